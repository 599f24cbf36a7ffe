//! # agentrl-model: policies as candle modules
//!
//! TinyAgent (a small transformer with a value head), Qwen3 (the real model family, with HF
//! weight names), LoRA adapters in PEFT's layout, and the [`Policy`] interface the trainer
//! uses (the engine decodes through its own `Decoder` trait). Token ids in, logits and
//! values out; no gym, no chat formats, no sampling: this crate never depends on
//! `agentrl-chat`.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod constrained;
pub mod device;
pub mod fused;
pub mod gguf;
pub mod lora;
pub mod policy;
pub mod qwen3;
pub mod tiny;
pub mod weights;

pub use constrained::{ConstrainedPolicy, LogitBias};
pub use device::best_device;
pub use policy::{ForUpdate, PendingGradients, Policy, PolicyOutput};
pub use tiny::{DecodeCache, KvCache, TinyAgent, TinyConfig, TinyOutput};
