//! REINFORCE++ (arXiv:2501.03262; ALGORITHMS.md §8): return with a token-level k1 KL in the
//! reward, normalised over the whole global batch (not per group), PPO-clip token loss.

use agentrl_rl::{AggMode, KlEstimator};

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::KlPlacement;

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::ReinforcePlusPlus,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::TokenMean,
    kl_loss_type: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};
