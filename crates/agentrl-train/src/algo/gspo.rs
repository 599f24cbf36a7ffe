//! GSPO (Qwen, arXiv:2507.18071; ALGORITHMS.md §9): the length-normalised sequence ratio
//! `s_i = exp(mean_t log r_{i,t})`, clipped at sequence level with a tight range, group
//! advantage `(R − mean)/std`, one term per sequence averaged over the group.
//!
//! The loss is verl's `gspo` (GSPO-token, `s_{i,t} = sg[s_i]·π_θ/sg[π_θ]`), which with these
//! sequence-level advantages and `seq-mean-token-mean` equals the sequence form in value and
//! gradient; `policy_loss = "gspo_sequence"` selects the sequence form itself.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Gspo,
    // The paper's clips (3e-4 / 4e-4) bind once a rollout batch is split into minibatches.
    eps_low: 3e-4,
    eps_high: 4e-4,
    loss_agg_mode: AggMode::SeqMeanTokenMean,
    minibatches: 2,
    ..BASE
};
