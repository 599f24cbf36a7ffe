//! DAPO (arXiv:2503.14476; ALGORITHMS.md §6): clip-higher (ε_low 0.2, ε_high 0.28), dynamic
//! sampling (groups with all-equal rewards dropped), token-level loss (`token-mean`), soft
//! overlong punishment added to the reward, no KL.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Preset, BASE};
use crate::train::config::ResolvedAlgorithm;

pub const PRESET: Preset = Preset {
    eps_low: 0.2,
    eps_high: 0.28,
    agg: AggMode::TokenMean,
    std_normalize: true,
    dynamic_sampling: true,
    // The paper's L_cache is 4096 of a 20480-token budget; TinyAgent's budget is tens of
    // action tokens, so the cache is a few tokens.
    overlong_cache: Some(4),
    ..BASE
};

/// `(R − mean)/std` per group, on rewards that already carry the soft overlong punishment;
/// the trainer has dropped the all-equal groups (dynamic sampling) before this runs.
pub fn advantage_estimator(knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// Clip-higher: `clip(r, 1−ε_low, 1+ε_high)` with ε_high > ε_low.
pub fn policy_loss(knobs: &ResolvedAlgorithm) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
