//! # agentrl-train: rollouts become weight updates
//!
//! The trainer of the stack. Where it sits in task → episode → batch → loss → update: it takes
//! the gym's tasks, samples episodes of them with the engine (`agentrl-rollout`), packs them
//! into a batch, computes the losses of the chosen algorithm (`agentrl-rl`) and updates the
//! policy (`agentrl-model`), then writes what happened into the run directory (`agentrl-run`).
//!
//! Start from a [`Config`] ([`load_config`]: the built-in defaults, an optional TOML file and
//! `key=value` overrides, the same as `agentrl train --config … --set …`), build a [`Trainer`]
//! from it, and call [`Trainer::step`] (one RL step, returning its [`StepRecord`]) and
//! [`Trainer::evaluate`] (an [`EvalSpec`]: split, tasks, episodes per task, k, temperature,
//! seed). [`run_rl_session`] runs a whole session as `agentrl train` does (evaluations,
//! checkpoints, summary); the other recipes (SFT, RFT, DPO, distillation) are in [`recipes`].
//!
//! ```rust
//! use agentrl_gym::Split;
//! use agentrl_train::{load_config, EvalSpec, Trainer};
//!
//! let runs = tempfile::tempdir()?;
//! let config = load_config(
//!     None,
//!     &[
//!         format!("train.runs_root={:?}", runs.path().to_string_lossy()),
//!         "train.threads=1".into(),
//!         "rollout.tasks_per_step=1".into(),
//!         "rollout.group_size=2".into(),
//!     ],
//! )?;
//! let (mut trainer, _warnings) = Trainer::create(config)?;
//! let record = trainer.step()?; // sample 1 task x 2 episodes, verify, update
//! assert_eq!((record.step, record.episodes), (1, 2));
//! trainer.log(&record)?; // one line of metrics.jsonl in the run directory
//!
//! let report = trainer.evaluate(&EvalSpec {
//!     split: Split::Heldout,
//!     max_tasks: Some(2),
//!     samples_per_task: 1,
//!     k: 1,
//!     temperature: 0.0, // greedy
//!     ..EvalSpec::default()
//! })?;
//! assert_eq!(report.tasks, 2);
//! # anyhow::Ok(())
//! ```
//!
//! `examples/train_in_code.rs` in the repository trains for 20 steps this way.
//!
//! Inside, one RL step (see `shared/DESIGN.md`): the `recipes::rl` step samples a group of
//! episodes per task through the `sampler` (the engine on the weights `engine_sync` keeps) →
//! rewards (and the preset's step hooks) → a `Batch` → `update`: advantages and the policy
//! loss from the [`algo`] preset, KL, entropy and the value loss, AdamW (`optim`) with
//! gradient clipping and the LR `schedule` → a [`StepRecord`] → `metrics` lines, sampled
//! episodes and periodic checkpoints in the run directory. [`session`] runs a whole training
//! session with evaluations; [`config`] is the run configuration. The modules a user does
//! not need are hidden from these docs (public only for the tests and the binary).
//!
//! The rooms: the trainer core ([`trainer`], built from the config by `build` and
//! `engine_sync`; `sampler`, `streams`, `step_record`, `demonstrations`) knows no recipe; each
//! recipe ([`recipes`]: RL, SFT, RFT, DPO, distillation) is one file on top of it and never
//! imports another.
//!
//! Rules this crate keeps: [`algo`] never imports [`config`] (the config is built from the
//! presets, not the other way round); no file imports a recipe, and the files' imports form
//! no circle (the workspace's `tests/cli/import_graph.rs` checks these, the last for every
//! crate); the update and evaluation are generic over `agentrl_model::Policy`; `threads`
//! and `allocator` are the only places that set process-wide state.

#![deny(clippy::unwrap_used, clippy::expect_used)]

// The face: what a user starts from.
pub mod algo;
pub mod config;
pub mod recipes;
pub mod session;
pub mod step_record;
pub mod trainer;

mod eval_spec;
mod policy_stack;

// Internals, public for the integration tests (crates/agentrl-train/tests/) and the binary.
#[doc(hidden)]
pub mod allocator;
#[doc(hidden)]
pub mod build;
#[doc(hidden)]
pub mod demonstrations;
#[doc(hidden)]
pub mod engine_sync;
#[doc(hidden)]
pub mod fleet_plan;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod optim;
#[doc(hidden)]
pub mod plan;
#[doc(hidden)]
pub mod preflight;
#[doc(hidden)]
pub mod sampler;
#[doc(hidden)]
pub mod schedule;
#[doc(hidden)]
pub mod streams;
#[doc(hidden)]
pub mod threads;
#[doc(hidden)]
pub mod update;

pub use config::{load_config, Config};
pub use eval_spec::EvalSpec;
pub use recipes::rl::run_rl_session;
pub use recipes::Recipe;
pub use session::{Progress, SessionOptions, SessionOutcome};
pub use step_record::StepRecord;
pub use trainer::Trainer;

/// `n > 0` and `step` is a multiple of `n` ("every n steps"). Written with `%` because the
/// workspace's MSRV (1.85) predates `usize::is_multiple_of`.
#[allow(clippy::manual_is_multiple_of)]
/// README.md's Rust blocks, compiled by `cargo test --doc` so the "use it from your crate"
/// example keeps to the API (it is `no_run`: it trains and writes a run directory).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

pub(crate) fn every(step: usize, n: usize) -> bool {
    n > 0 && step % n == 0
}
