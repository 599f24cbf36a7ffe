//! GSPO (Qwen, arXiv:2507.18071; ALGORITHMS.md §9): the length-normalised sequence ratio
//! `s_i = exp(mean_t log r_{i,t})`, clipped at sequence level with a tight range, group
//! advantage `(R − mean)/std`, one term per sequence averaged over the group.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Preset, BASE};
use crate::train::config::{RatioLevel, ResolvedAlgorithm};

pub const PRESET: Preset = Preset {
    // The paper's clips (3e-4 / 4e-4) bind once a rollout batch is split into minibatches.
    clip_eps: 3e-4,
    eps_low: 3e-4,
    eps_high: 4e-4,
    ratio_level: RatioLevel::Sequence,
    agg: AggMode::SeqMeanTokenMean,
    minibatches: 2,
    ..BASE
};

/// `(R − mean)/std` per group, one value per episode.
pub fn advantage_estimator(knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// The sequence ratio `s_i = exp(mean_t log r_{i,t})`, clipped to `[1−ε_low, 1+ε_high]`.
pub fn policy_loss(knobs: &ResolvedAlgorithm) -> PolicyLoss {
    PolicyLoss::Gspo {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
    }
}
