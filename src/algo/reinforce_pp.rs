//! REINFORCE++ (arXiv:2501.03262; ALGORITHMS.md §8): return with a token-level k1 KL in the
//! reward, normalised over the whole global batch (not per group), PPO-clip token loss.

use super::{Preset, BASE};
use crate::train::config::KlPlacement;
use crate::train::pending_rl::{AggMode, KlEstimator};

pub const PRESET: Preset = Preset {
    agg: AggMode::TokenMean,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};
