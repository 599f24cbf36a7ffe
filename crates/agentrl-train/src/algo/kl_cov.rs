//! KL-Cov (Cui et al., arXiv:2505.22617 §4; ALGORITHMS.md §12; verl `loss_mode: kl-cov`): the
//! importance-weighted PG term `−Â·r` (no ratio clip, as in verl), plus
//! `β·|log π_θ − log π_old|` on the `⌊k·N⌋` valid tokens with the largest covariance
//! `(log π − mean log π)(Â − mean Â)`; group advantage `(R − mean)/std`, `token-mean`, no KL to
//! the reference, no entropy bonus (the method replaces it).
//!
//! The penalty is to π_old, so it binds only once the policy has moved within a rollout batch:
//! the preset takes two minibatches per rollout batch (as GSPO does), so the second one sees a
//! moved policy.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::KlCov,
    loss_agg_mode: AggMode::TokenMean,
    minibatches: 2,
    // The paper's 7B k = 2e-3 penalises ⌊2e-3·N⌋ = 1 or 2 of the ~10³ action tokens of a
    // TinyAgent step; 1e-2 reaches a handful. β = 1 is the paper's (verl's config: 0.1).
    kl_cov_ratio: 1e-2,
    ppo_kl_coef: 1.0,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if !(0.0..=1.0).contains(&knobs.kl_cov_ratio) {
        f.errors.push(format!(
            "algorithm.kl_cov_ratio = {} must lie in [0, 1]",
            knobs.kl_cov_ratio
        ));
    }
    if !(knobs.ppo_kl_coef.is_finite() && knobs.ppo_kl_coef >= 0.0) {
        f.errors.push(format!(
            "algorithm.ppo_kl_coef = {} must be a finite number >= 0",
            knobs.ppo_kl_coef
        ));
    }
}
