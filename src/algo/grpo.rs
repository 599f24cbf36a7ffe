//! GRPO (DeepSeekMath, arXiv:2402.03300; ALGORITHMS.md §4): group-normalised outcome
//! advantage `(R − mean)/std` broadcast to every action token, PPO-clip token ratio, KL to the
//! reference as k3 in the loss, `seq-mean-token-mean` aggregation. The default algorithm.
//!
//! Preset choice: the paper's β = 0.04 is for a 7B model anchored to its SFT policy; TinyAgent
//! starts from random weights, where a KL anchor to the initial policy only slows learning, so
//! β defaults to 0 here (set `algorithm.kl_coef` to use it; the reference forward then runs).

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Preset, BASE};
use crate::train::config::ResolvedAlgorithm;

pub const PRESET: Preset = Preset {
    agg: AggMode::SeqMeanTokenMean,
    std_normalize: true,
    ..BASE
};

/// `Â_i = (R_i − mean_G R)/(std_G R + 1e-6)`, the same for every action token of episode `i`.
pub fn advantage_estimator(knobs: &ResolvedAlgorithm) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// Token-level PPO clip (with optional dual clip), `min(rÂ, clip(r, 1−ε, 1+ε)Â)`.
pub fn policy_loss(knobs: &ResolvedAlgorithm) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
