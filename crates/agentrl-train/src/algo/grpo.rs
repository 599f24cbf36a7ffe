//! GRPO (DeepSeekMath, arXiv:2402.03300; ALGORITHMS.md §4): group-normalised outcome
//! advantage `(R − mean)/std` broadcast to every action token, PPO-clip token ratio, KL to the
//! reference as k3 in the loss, `seq-mean-token-mean` aggregation. The default algorithm.
//!
//! Preset choices for TinyAgent:
//! - β = 0, not the paper's 0.04: that value anchors a 7B model to its SFT policy; TinyAgent
//!   starts from random weights, where a KL anchor to the initial policy only slows learning
//!   (set `algorithm.kl_coef` to use it; the reference forward then runs).
//! - `entropy_coef = 0.01`: the policy reads the candidates, so it decides per bug family,
//!   and a family it becomes sure about wrongly gets no GRPO signal (every episode of its
//!   group scores 0). With 0.01, 8 of 8 seeds reached 100% on train in 60 steps; without it,
//!   6 of 8. It belongs to this preset, not to the default config, so it does not leak into
//!   the other algorithms.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::SeqMeanTokenMean,
    std_normalize: true,
    entropy_coef: 0.01,
    ..BASE
};

/// `Â_i = (R_i − mean_G R)/(std_G R + 1e-6)`, the same for every action token of episode `i`.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// Token-level PPO clip (with optional dual clip), `min(rÂ, clip(r, 1−ε, 1+ε)Â)`.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    ppo_clip(knobs)
}

/// The token-level PPO clip with the knobs' bounds; shared by the presets that use it.
pub(crate) fn ppo_clip(knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::PpoClip {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
        dual_clip: knobs.dual_clip_c,
    }
}
