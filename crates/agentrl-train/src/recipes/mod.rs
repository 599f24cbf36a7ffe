//! Training recipes: each turns a config into a run, sharing the session, checkpoints, resume
//! and metrics. [`rl`] is reinforcement learning with any preset of [`crate::algo`]; [`sft`] is
//! supervised fine-tuning on the gym expert's demonstrations or a file of episodes.

pub mod rl;
pub mod sft;
