//! DRO, direct reward optimisation (Richemond et al., "Offline Regularised Reinforcement
//! Learning for LLM Alignment", arXiv:2405.19107; verl `loss_mode: dro`; no ALGORITHMS.md
//! section, formula in `agentrl_rl::dro_loss`): policy gradient on the log-prob with a
//! quadratic penalty on the log-ratio to π_old, `ℓ = −(Â·log π_θ − ½β(log π_θ − log π_old)²)`,
//! in place of a clip; group advantage `(R − mean)/std`, `token-mean`, no KL.
//!
//! The penalty is 0 with its gradient at `π_θ = π_old`, so it binds only once the policy has
//! moved within a rollout batch: the preset takes two minibatches (as GSPO does).

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::Dro,
    loss_agg_mode: AggMode::TokenMean,
    minibatches: 2,
    // verl has no default (its `dro_beta` must be set); β = 1 weighs a log-ratio of 0.1 at
    // 0.005 per token against advantages of order 1, so it only reins in large moves.
    dro_beta: 1.0,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if !(knobs.dro_beta.is_finite() && knobs.dro_beta > 0.0) {
        f.errors.push(format!(
            "algorithm.dro_beta = {} must be a finite number > 0 (verl requires it)",
            knobs.dro_beta
        ));
    }
}
