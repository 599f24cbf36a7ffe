//! The policy interface the trainer and the engine see: token ids in, next-token logits and
//! value estimates out.
//!
//! Sits between the models (TinyAgent, Qwen3) and everything that consumes logits: the local
//! sampling engine (`agentrl::engine`) and the trainer's loss (`agentrl-rl`).

use candle_core::{Result, Tensor};

/// What a full forward pass returns.
#[derive(Debug, Clone)]
pub struct PolicyOutput {
    /// Next-token logits, `[B, T, V]` f32: position `t` scores token `t + 1`.
    pub logits: Tensor,
    /// Value estimates `V(s_t)` from the value head, `[B, T]` f32 (PPO's critic, ALGORITHMS.md §2).
    pub values: Tensor,
}

/// A causal language-model policy with a value head.
pub trait Policy {
    /// Full (training) forward pass over `ids` `[B, T]` u32, positions `0..T` in every row.
    fn forward(&self, ids: &Tensor) -> Result<PolicyOutput>;
    /// Size of the output vocabulary (last dimension of the logits).
    fn vocab_size(&self) -> usize;
}
