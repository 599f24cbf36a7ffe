//! Dr. GRPO (arXiv:2503.20783; ALGORITHMS.md §5): GRPO without its two biases: no std
//! normalisation of the advantage (difficulty bias), and `seq-mean-token-sum-norm`
//! aggregation, `Σ_t / L_max` with a constant L_max (length bias).

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::SeqMeanTokenSumNorm,
    std_normalize: false,
    ..BASE
};
