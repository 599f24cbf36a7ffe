//! REINFORCE++ (arXiv:2501.03262; ALGORITHMS.md §8): return with a token-level k1 KL in the
//! reward, normalised over the whole global batch (not per group), PPO-clip token loss.

use agentrl_rl::{AdvantageEstimator, AggMode, KlEstimator, PolicyLoss};

use super::KlPlacement;

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};

/// Discounted return of the (KL-shaped) token rewards, whitened over the whole batch.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::ReinforcePlusPlus { gamma: knobs.gamma }
}

/// Token-level PPO clip.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
