//! # agentrl-model: policies as candle modules
//!
//! TinyAgent (a small transformer with a value head), Qwen3 (the real model family, with HF
//! weight names), LoRA adapters in PEFT's layout, and the [`Policy`] interface the trainer
//! uses (the engine decodes through its own `Decoder` trait). Token ids in, logits and
//! values out; no gym, no chat formats, no sampling: this crate never depends on
//! `agentrl-chat`.
//!
//! Where it sits in task → episode → batch → loss → update: the engine samples the episodes'
//! actions from these models, and the update scores a batch's tokens with them
//! ([`Policy::forward`]) and changes their weights. A user starts from [`TinyAgent`]
//! ([`TinyConfig`]) or [`qwen3::Qwen3`], both [`Policy`]s, and [`best_device`].
//!
//! ```rust
//! use agentrl_model::{Policy, TinyAgent, TinyConfig};
//! use candle_core::{Device, Tensor};
//!
//! // A randomly initialised TinyAgent over a 32-word vocabulary, one layer.
//! let config = TinyConfig { n_layers: 1, max_seq: 16, ..TinyConfig::for_vocab(32) };
//! let policy = TinyAgent::new(config, 1, &Device::Cpu)?;
//! let ids = Tensor::new(&[[1u32, 5, 7, 2]], &Device::Cpu)?; // [B, T] = [1, 4]
//! let out = Policy::forward(&policy, &ids)?;
//! assert_eq!(out.logits.dims(), &[1, 4, 32]); // position t scores token t + 1
//! assert_eq!(out.values.map(|v| v.dims().to_vec()), Some(vec![1, 4])); // the value head
//! # anyhow::Ok(())
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod lora;
pub mod qwen3;
pub mod tiny;

mod device;
mod policy;

// Internals, public for the integration tests (crates/agentrl-model/tests/), the other crates
// and the binary.
#[doc(hidden)]
pub mod constrained;
#[doc(hidden)]
pub mod fused;
#[doc(hidden)]
pub mod gguf;
#[doc(hidden)]
pub mod weights;

pub use constrained::{ConstrainedPolicy, LogitBias};
pub use device::best_device;
pub use policy::{ForUpdate, PendingGradients, Policy, PolicyOutput};
pub use tiny::{DecodeCache, KvCache, TinyAgent, TinyConfig, TinyOutput};
