//! Training recipes: each turns a config into a run, sharing the session, checkpoints, resume
//! and metrics. [`rl`] is reinforcement learning with any preset of [`crate::algo`].

pub mod rl;
