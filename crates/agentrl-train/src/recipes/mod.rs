//! Training recipes: each turns a config into a run, sharing the session, checkpoints, resume
//! and metrics. [`rl`] is reinforcement learning with any preset of [`crate::algo`]; [`sft`] is
//! supervised fine-tuning on the gym expert's demonstrations or a file of episodes; [`rft`]
//! is rejection-sampling fine-tuning (the policy's own samples that pass the hidden tests);
//! [`dpo`] is direct preference optimisation on verified-against-failed pairs; [`distill`] is
//! on-policy distillation from a teacher run.

pub mod distill;
pub mod dpo;
pub mod rft;
pub mod rl;
pub mod sft;
