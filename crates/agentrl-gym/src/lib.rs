//! # agentrl-gym: the BugFix gym
//!
//! Small Python bug-fix tasks that an agent solves by calling the tools `read`, `test`, `edit`
//! and `submit` (plus `exploit`, which games a reward that trusts the public tests). Tests run
//! the real code in a sandboxed child process; a verifier runs hidden tests on a pristine
//! harness and turns the outcome into a [`types::Reward`].
//!
//! Module map, in data-flow order: [`task`] (task folders, splits; format in `TASKS.md`) →
//! [`mod@env`] (`BugFixEnv`: workspaces and tools, outcome cache) → [`harness`] (the Python programs
//! run in the [`sandbox`], and trusted parsing of their results) → [`verify`] (hidden tests as
//! one warm job tree per verdict, a forked process per hidden case; re-runs of time-limited
//! cases; tamper check) → [`trusted`] (the checker process: a case's check split from its calls
//! under test and evaluated where no candidate code runs) → [`check`] (trusted-side comparison
//! of what a case returned with its expectation) → [`reward`] (`RewardFn`; a tampered
//! workspace earns no verdict).
//! [`expert`] scripts the calls that solve a task (SFT demonstrations). [`render`] turns
//! observations into chat text or TinyAgent symbols; [`validate`] checks task folders and
//! measures a random policy. [`service`] puts the gym behind HTTP (`agentrl gym serve`) and
//! gives the trainer a client over a fleet of such servers. With the `cli` feature, `cli` is `agentrl gym …` and
//! `bench` is `agentrl bench gym` (the library itself takes no flags and needs no clap).
//!
//! Underneath all of them, the [`sandbox`] runs Python jobs and names no module above it: the
//! programs it starts (the worker, the trusted checker, the verdict tree, one fork helper the
//! worker and the tree share) live in it, and `harness`, `trusted` and `verify` take them from
//! there. [`task`] stands on `builtin` (the embedded tasks), never the other way round.
//!
//! This crate sits at the start of the data flow (`TaskSet → Env::reset → Observation →
//! ToolCall → Env::step → Reward`) and has no tensor stack: it builds and tests on its own.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "cli")]
pub mod bench;
// Public for the integration tests (tests/gym/builtin_extraction.rs).
#[doc(hidden)]
pub mod builtin;
pub mod check;
#[cfg(feature = "cli")]
pub mod cli;
pub mod env;
pub mod expert;
pub mod harness;
pub mod render;
pub mod reward;
pub mod sandbox;
pub mod service;
pub mod task;
pub mod trusted;
pub mod types;
pub mod validate;
pub mod verify;

pub use env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
pub use reward::{Ending, RewardFn, RewardKind};
pub use task::{Split, Task, TaskSet};
pub use types::*;
