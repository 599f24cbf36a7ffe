//! PPO with a critic (ALGORITHMS.md §2–3): GAE(γ, λ) over action tokens (bridging
//! observation tokens) from TinyAgent's value head, whitened advantages, PPO-clip token loss,
//! clipped value loss, several epochs with an old-log-prob pass.

use super::{Preset, BASE};
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    agg: AggMode::TokenMean,
    epochs: 2,
    minibatches: 2,
    old_logprob_pass: true,
    gamma: 1.0,
    lam: 0.95,
    value_coef: 0.5,
    value_clip: 0.5,
    ..BASE
};
