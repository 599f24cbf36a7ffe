//! GSPO (Qwen, arXiv:2507.18071; ALGORITHMS.md §9): the length-normalised sequence ratio
//! `s_i = exp(mean_t log r_{i,t})`, clipped at sequence level with a tight range, group
//! advantage `(R − mean)/std`, one term per sequence averaged over the group.

use super::{Preset, BASE};
use crate::train::config::RatioLevel;
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    // The paper's clips (3e-4 / 4e-4) are for minibatched off-policy updates of a large
    // model; with several minibatches per rollout they are where the trust region binds.
    clip_eps: 3e-4,
    eps_low: 3e-4,
    eps_high: 4e-4,
    ratio_level: RatioLevel::Sequence,
    agg: AggMode::SeqMeanTokenMean,
    minibatches: 2,
    ..BASE
};
