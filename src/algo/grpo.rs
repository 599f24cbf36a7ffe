//! GRPO (DeepSeekMath, arXiv:2402.03300; ALGORITHMS.md §4): group-normalised outcome
//! advantage `(R − mean)/std` broadcast to every action token, PPO-clip token ratio, KL to the
//! reference as k3 in the loss, `seq-mean-token-mean` aggregation. The default algorithm.
//!
//! Preset choice: the paper's β = 0.04 is for a 7B model anchored to its SFT policy; TinyAgent
//! starts from random weights, where a KL anchor to the initial policy only slows learning, so
//! β defaults to 0 here (set `algorithm.kl_coef` to use it; the reference forward then runs).

use super::{Preset, BASE};
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    agg: AggMode::SeqMeanTokenMean,
    std_normalize: true,
    ..BASE
};
