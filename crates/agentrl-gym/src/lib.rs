//! # agentrl-gym: the BugFix gym
//!
//! Small Python bug-fix tasks that an agent solves by calling the tools `read`, `test`, `edit`
//! and `submit` (plus `exploit`, which games a reward that trusts the public tests). Tests run
//! the real code in a sandboxed child process; a verifier runs hidden tests on a pristine
//! harness and turns the outcome into a [`types::Reward`].
//!
//! Where it sits in task → episode → batch → loss → update: at the start. It holds the tasks
//! and steps the episodes (`TaskSet → Env::reset → Observation → ToolCall → Env::step →
//! Reward`); the rollout crate records those episodes, and everything after them (batches,
//! losses, updates) is elsewhere. It has no tensor stack: it builds and tests on its own.
//!
//! A user starts from a [`TaskSet`] (the built-in tasks, or a folder of them; format in
//! `TASKS.md`) and a [`BugFixEnv`], which implements [`Env`]: [`Env::reset`] on a task id gives
//! the first [`Observation`], [`Env::step`] applies an [`Action`] (a [`ToolCall`], or a
//! malformed one) and, when the episode ends, carries its [`Reward`]. [`default_executor`] is
//! the sandbox the env runs Python in; [`EnvConfig`] holds the turn limit, the
//! [`RewardFn`] and the sandbox's [`Limits`]. [`expert`] scripts the calls that solve a task.
//!
//! ```rust
//! use std::sync::Arc;
//! use agentrl_gym::expert::{self, EditForm, Variant};
//! use agentrl_gym::{default_executor, Action, BugFixEnv, Env, EnvConfig, OutcomeCache, Split, TaskSet};
//!
//! let tasks = Arc::new(TaskSet::builtin()?);
//! let task = tasks.split(Split::Train)[0].clone();
//! let config = EnvConfig::default();
//! let mut env = BugFixEnv::new(tasks, default_executor()?, OutcomeCache::new(), config);
//! let first = env.reset(&task.id)?;
//! println!("{first:?}");
//!
//! // The scripted expert's shortest solution: read the module, edit in the fix, submit.
//! let calls = expert::plan(&task, Variant::Brief, EditForm::Candidate, 10)?;
//! let mut reward = None;
//! for call in calls {
//!     reward = env.step(&Action::Call(call))?.reward;
//! }
//! assert!(reward.expect("submit ends the episode").solved());
//! # anyhow::Ok(())
//! ```
//!
//! Module map, in data-flow order: [`task`] (task folders, splits) → [`mod@env`] (`BugFixEnv`:
//! workspaces and tools, outcome cache) → `harness` (the Python programs run in the `sandbox`,
//! and trusted parsing of their results) → `verify` (hidden tests as one warm job tree per
//! verdict, a forked process per hidden case; re-runs of time-limited cases; tamper check) →
//! `trusted` (the checker process: a case's check split from its calls under test and
//! evaluated where no candidate code runs) → `check` (trusted-side comparison of what a case
//! returned with its expectation) → [`reward`] (`RewardFn`; a tampered workspace earns no
//! verdict). [`expert`] scripts the calls that solve a task (SFT demonstrations). [`render`]
//! turns observations into chat text or TinyAgent symbols; [`validate`] checks task folders
//! and measures a random policy. [`service`] puts the gym behind HTTP (`agentrl gym serve`)
//! and gives the trainer a client over a fleet of such servers. With the `cli` feature, `cli`
//! is `agentrl gym …` and `bench` is `agentrl bench gym` (the library itself takes no flags
//! and needs no clap). The modules in plain type are internals, hidden from these docs (public
//! for the integration tests and the binary).
//!
//! Underneath all of them, the `sandbox` runs Python jobs and names no module above it: the
//! programs it starts (the worker, the trusted checker, the verdict tree, one fork helper the
//! worker and the tree share) live in it, and `harness`, `trusted` and `verify` take them from
//! there. [`task`] stands on `builtin` (the embedded tasks), never the other way round.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

// The face: what a user starts from.
pub mod env;
pub mod expert;
pub mod render;
pub mod reward;
pub mod service;
pub mod task;
pub mod types;
pub mod validate;

// Internals, public for the integration tests (crates/agentrl-gym/tests/) and the binary.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod builtin;
#[doc(hidden)]
pub mod check;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod harness;
#[doc(hidden)]
pub mod sandbox;
#[doc(hidden)]
pub mod trusted;
#[doc(hidden)]
pub mod verify;

pub use env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
pub use reward::{Ending, RewardFn, RewardKind};
pub use sandbox::{default_executor, Executor, Limits};
pub use task::{Split, Task, TaskSet};
pub use types::*;
