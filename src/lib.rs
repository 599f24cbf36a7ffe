//! # agentrl
//!
//! Agentic reinforcement learning in Rust: the BugFix gym ([`agentrl_gym`]), the RL math
//! ([`agentrl_rl`]), chat formats ([`agentrl_chat`]) and policies ([`agentrl_model`]) are
//! workspace crates; this crate holds what composes them: the command line.

pub mod algo;
pub mod eval;
pub mod cli;
pub mod train;
