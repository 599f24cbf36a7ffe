//! CISPO (MiniMax-M1, arXiv:2506.13585 §3.1; ALGORITHMS.md §10): REINFORCE weighted by a
//! clipped, detached importance weight `sg(clip(r, 1−ε_low, 1+ε_high))·Â·log π` (the bounds are
//! `algorithm.eps_low` / `eps_high`), so no token
//! loses its gradient; group advantage, `token-mean`, no KL.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Cispo,
    loss_agg_mode: AggMode::TokenMean,
    // The paper sets no lower bound in practice: ε_low = 1 makes the floor 0.
    eps_low: 1.0,
    eps_high: 0.28,
    minibatches: 2,
    ..BASE
};
