//! PPO with a critic (ALGORITHMS.md §2–3): GAE(γ, λ) over action tokens (bridging
//! observation tokens) from TinyAgent's value head, whitened advantages, PPO-clip token loss,
//! clipped value loss, several epochs with an old-log-prob pass.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Gae,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::TokenMean,
    epochs: 2,
    minibatches: 2,
    old_logprob_pass: true,
    gamma: 1.0,
    lam: 0.95,
    value_coef: 0.5,
    value_clip: 0.5,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if knobs.value_coef == 0.0 {
        f.warnings
            .push("ppo with value_coef = 0: the critic never learns".into());
    }
}
