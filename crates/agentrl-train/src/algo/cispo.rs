//! CISPO (MiniMax-M1, arXiv:2506.13585 §3.1; ALGORITHMS.md §10): REINFORCE weighted by a
//! clipped, detached importance weight `sg(clip(r, 1−ε_low, 1+ε_high))·Â·log π` (the bounds are
//! `algorithm.eps_low` / `eps_high`), so no token
//! loses its gradient; group advantage, `token-mean`, no KL.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    // The paper sets no lower bound in practice: ε_low = 1 makes the floor 0.
    eps_low: 1.0,
    eps_high: 0.28,
    minibatches: 2,
    ..BASE
};

/// `(R − mean)/std` per group, as in GRPO.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// `−sg(clip(r, 1−ε_low, 1+ε_high))·Â·log π`: clipped weight, gradient kept on every token.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::Cispo {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
    }
}

pub fn check(knobs: &Knobs, f: &mut super::Findings) {
    if knobs.dual_clip_c.is_some() {
        f.warnings
            .push("algorithm.dual_clip_c is ignored by cispo".into());
    }
}
