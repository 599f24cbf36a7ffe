//! # agentrl-rollout: from tasks to training batches
//!
//! Data flow: a task id → [`driver::run_groups`] (an `Engine` samples each turn, a
//! `ChatCodec` renders and parses, an `Env` steps) → [`episode::Episode`]s, every token with
//! its source, turn and sampling log-prob → [`batch::Batch`], the padded tensors the update
//! consumes. [`EnvClock`] times the environment's share of a rollout. [`mod@demonstrate`] runs
//! scripted calls (the gym's expert) through the same driver, for supervised fine-tuning.
//! [`ShuffledCandidates`] augments training episodes, [`StalenessBound`] bounds how old the
//! weights of asynchronous rollouts may be, and [`eval`]
//! summarises episodes of a split into solve rates and pass@k.
//!
//! Where it sits in task → episode → batch → loss → update: it turns tasks into episodes and
//! episodes into a batch. A user starts from [`run_groups`] (sample with an engine) or
//! [`expert_episodes`] (the gym's scripted expert, for SFT), gets [`Episode`]s, and packs them
//! with [`Batch::from_episodes`]; [`evaluate_split`] gives an [`EvalReport`].
//!
//! ```rust
//! use std::sync::Arc;
//! use agentrl_chat::tiny::TinyCodec;
//! use agentrl_chat::ChatCodec;
//! use agentrl_gym::expert::{EditForm, Variant};
//! use agentrl_gym::{default_executor, BugFixEnv, EnvConfig, OutcomeCache, Split, TaskSet};
//! use agentrl_rollout::{expert_episodes, Batch, ExpertJob, RolloutLimits};
//!
//! let tasks = Arc::new(TaskSet::builtin()?);
//! let codec = TinyCodec::for_gym();
//! let env = BugFixEnv::new(tasks.clone(), default_executor()?, OutcomeCache::new(), EnvConfig::default());
//! let job = ExpertJob {
//!     task_id: tasks.split(Split::Train)[0].id.clone(),
//!     group_id: 0,
//!     variant: Variant::Brief, // read, edit in the fix, submit
//!     form: EditForm::Candidate,
//! };
//! let limits = RolloutLimits { max_episode_tokens: 256, env_threads: 1 };
//!
//! // task → episode: the calls rendered by the codec and stepped in a real env.
//! let episodes = expert_episodes(&codec, &limits, &tasks, vec![env], &[job], 10)?;
//! assert!(episodes[0].reward.solved());
//!
//! // episode → batch: padded [B, T] tensors, the loss mask on the action tokens only.
//! let batch = Batch::from_episodes(&episodes, codec.pad_id(), &candle_core::Device::Cpu)?;
//! assert_eq!(batch.input_ids.dims()[0], 1);
//! # anyhow::Ok(())
//! ```
//!
//! Not here: the losses and the optimizer (`agentrl-train`, `agentrl-rl`), models
//! (`agentrl-model`), how a token is drawn (`agentrl-engine`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod batch;
pub mod demonstrate;
pub mod driver;
pub mod episode;
pub mod eval;

mod env_clock;
mod staleness;

// Internal, public for the trainer and the binary.
#[doc(hidden)]
pub mod shuffle;

pub use batch::Batch;
pub use demonstrate::{demonstrate, edit_forms, expert_episodes, expert_jobs, ExpertJob};
pub use driver::{
    run_episodes, run_groups, run_groups_bounded, EpisodeJob, LiveBound, RolloutLimits,
};
pub use env_clock::{EnvClock, Timed};
pub use episode::{Episode, TokenSource};
pub use eval::{evaluate_split, summarize, EpisodeOutcome, EvalReport};
pub use shuffle::ShuffledCandidates;
pub use staleness::{Prefetched, StalenessBound};
