//! # agentrl
//!
//! Agentic reinforcement learning in Rust: the BugFix gym ([`agentrl_gym`]), the RL math
//! ([`agentrl_rl`]), chat formats ([`agentrl_chat`]) and policies ([`agentrl_model`]) are
//! workspace crates; this crate holds what composes them: the command line.

pub mod algo;
pub mod batch;
pub mod bench_qwen3;
pub mod bench_train_step;
pub mod cli;
pub mod engine;
pub mod episode;
pub mod eval;
pub mod train;
