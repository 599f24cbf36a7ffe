//! REINFORCE++ (arXiv:2501.03262; ALGORITHMS.md §8): return with a token-level k1 KL in the
//! reward, normalised over the whole global batch (not per group), PPO-clip token loss.

use agentrl_rl::{AdvantageEstimator, AggMode, KlEstimator, PolicyLoss};

use super::{Preset, BASE};
use crate::train::config::{KlPlacement, ResolvedAlgorithm};

pub const PRESET: Preset = Preset {
    agg: AggMode::TokenMean,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};

/// Discounted return of the (KL-shaped) token rewards, whitened over the whole batch.
pub fn advantage_estimator(knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
    AdvantageEstimator::ReinforcePlusPlus { gamma: knobs.gamma }
}

/// Token-level PPO clip.
pub fn policy_loss(knobs: &ResolvedAlgorithm) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
