//! # agentrl-gym: the BugFix gym
//!
//! Small Python bug-fix tasks that an agent solves by calling the tools `read`, `test`, `edit`
//! and `submit` (plus `exploit`, which games a reward that trusts the public tests). Tests run
//! the real code in a sandboxed child process; a verifier runs hidden tests on a pristine
//! harness and turns the outcome into a [`types::Reward`].
//!
//! This crate sits at the start of the data flow (`TaskSet → Env::reset → Observation →
//! ToolCall → Env::step → Reward`) and has no tensor stack: it builds and tests on its own.

pub mod bench;
pub mod cli;
pub mod env;
pub mod harness;
pub mod local_exec;
pub mod render;
pub mod reward;
pub mod sandbox;
pub mod task;
pub mod types;
pub mod validate;
pub mod verify;

pub use env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
pub use reward::RewardFn;
pub use task::{Split, Task, TaskSet};
pub use types::*;
