//! RLOO (Ahmadian et al., arXiv:2402.14740; ALGORITHMS.md §7): leave-one-out baseline
//! `A_i = k/(k−1)·(R_i − mean R)`, REINFORCE on the sequence log-prob (`seq-mean-token-sum`),
//! no clipping in the paper (the on-policy ratio is 1, so the PPO form equals REINFORCE);
//! KL k1 in the reward.

use super::{Preset, BASE};
use crate::train::config::KlPlacement;
use crate::train::pending_rl::{AggMode, KlEstimator};

pub const PRESET: Preset = Preset {
    agg: AggMode::SeqMeanTokenSum,
    std_normalize: false,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};
