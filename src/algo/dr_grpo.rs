//! Dr. GRPO (arXiv:2503.20783; ALGORITHMS.md §5): GRPO without the two biases — advantage
//! `R − mean` (no std), and the per-token loss summed and divided by the constant generation
//! budget `L_max` (`seq-mean-token-sum-norm`), no KL.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Preset, BASE};
use crate::train::config::ResolvedAlgorithm;

pub const PRESET: Preset = Preset {
    agg: AggMode::SeqMeanTokenSumNorm,
    std_normalize: false,
    ..BASE
};

/// `Â_i = R_i − mean_G R` (no std: no difficulty bias). `std_normalize = true` turns the std
/// back on (that is GRPO's advantage with Dr. GRPO's aggregation).
pub fn advantage_estimator(knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
    if knobs.std_normalize {
        AdvantageEstimator::Grpo { norm_by_std: true }
    } else {
        AdvantageEstimator::DrGrpo
    }
}

/// Token-level PPO clip; the length-bias fix lives in the aggregation (`Σ_t / L_max`, with
/// `L_max` = the episode's action-token budget, set by the trainer).
pub fn policy_loss(knobs: &ResolvedAlgorithm) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
