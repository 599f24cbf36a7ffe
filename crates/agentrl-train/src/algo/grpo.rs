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

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::SeqMeanTokenMean,
    std_normalize: true,
    entropy_coef: 0.01,
    ..BASE
};
