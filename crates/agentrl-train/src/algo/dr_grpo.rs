//! Dr. GRPO (arXiv:2503.20783; ALGORITHMS.md §5): GRPO without its two biases: no std
//! normalisation of the advantage (difficulty bias), and `seq-mean-token-sum-norm`
//! aggregation, `Σ_t / L_max` with a constant L_max (length bias).

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::SeqMeanTokenSumNorm,
    std_normalize: false,
    ..BASE
};

/// `Â_i = R_i − mean_G R` (no std: no difficulty bias). `std_normalize = true` turns the std
/// back on (that is GRPO's advantage with Dr. GRPO's aggregation).
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    if knobs.std_normalize {
        AdvantageEstimator::Grpo { norm_by_std: true }
    } else {
        AdvantageEstimator::DrGrpo
    }
}

/// Token-level PPO clip; the length-bias fix lives in the aggregation (`Σ_t / L_max`, with
/// `L_max` = the episode's action-token budget, set by the trainer).
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    super::grpo::ppo_clip(knobs)
}
