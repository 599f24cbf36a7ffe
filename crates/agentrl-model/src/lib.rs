//! # agentrl-model: policies as candle modules
//!
//! TinyAgent (a small transformer with a value head), and the [`Policy`] interface the engine
//! and the trainer use. Token ids in, logits and values out; no gym, no sampling.

pub mod fused;
pub mod policy;
pub mod tiny;

pub use policy::{Policy, PolicyOutput};
pub use tiny::{KvCache, TinyAgent, TinyConfig};
