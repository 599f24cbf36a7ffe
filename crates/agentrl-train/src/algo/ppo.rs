//! PPO with a critic (ALGORITHMS.md §2–3): GAE(γ, λ) over action tokens (bridging
//! observation tokens) from TinyAgent's value head, whitened advantages, PPO-clip token loss,
//! clipped value loss, several epochs with an old-log-prob pass.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    epochs: 2,
    minibatches: 2,
    old_logprob_pass: true,
    gamma: 1.0,
    lam: 0.95,
    value_coef: 0.5,
    value_clip: 0.5,
    ..BASE
};

/// GAE(γ, λ) from the value head's `V(s_t)` over action tokens (the recursion skips
/// observation tokens), whitened; the critic regresses on `Â + V`.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Gae {
        gamma: knobs.gamma,
        lambda: knobs.lam,
    }
}

/// Token-level PPO clip (dual clip with `algorithm.dual_clip_c`).
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    super::grpo::ppo_clip(knobs)
}

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if knobs.value_coef == 0.0 {
        f.warnings
            .push("ppo with value_coef = 0: the critic never learns".into());
    }
}
