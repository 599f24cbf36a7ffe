//! # agentrl-rollout: from tasks to training batches
//!
//! Data flow: a task id → [`driver::run_groups`] (an `Engine` samples each turn, a
//! `ChatCodec` renders and parses, an `Env` steps) → [`episode::Episode`]s, every token with
//! its source, turn and sampling log-prob → [`batch::Batch`], the padded tensors the update
//! consumes. [`env_clock`] times the environment's share of a rollout. [`mod@demonstrate`] runs scripted calls (the gym's expert) through the same driver,
//! for supervised fine-tuning. [`shuffle`] holds env wrappers that augment training episodes,
//! [`staleness`] bounds how old the weights of asynchronous rollouts may be, and [`eval`]
//! summarises episodes of a split into solve rates and pass@k.
//!
//! Not here: the losses and the optimizer (`agentrl-train`, `agentrl-rl`), models
//! (`agentrl-model`), how a token is drawn (`agentrl-engine`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod batch;
pub mod demonstrate;
pub mod driver;
pub mod env_clock;
pub mod episode;
pub mod eval;
pub mod shuffle;
pub mod staleness;

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
