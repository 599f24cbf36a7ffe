//! GRPO (DeepSeekMath, arXiv:2402.03300; ALGORITHMS.md §4): group-normalised outcome
//! advantage `(R − mean)/std` broadcast to every action token, PPO-clip token ratio, KL to the
//! reference as k3 in the loss, `seq-mean-token-mean` aggregation. The default algorithm.
//!
//! Preset choices for TinyAgent (β = 0, `entropy_coef = 0.02`): why, and the seed sweeps
//! behind them, in `docs/experiments.md`, "TinyAgent's defaults".

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::SeqMeanTokenMean,
    std_normalize: true,
    entropy_coef: 0.02,
    ..BASE
};
