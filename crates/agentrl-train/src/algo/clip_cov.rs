//! Clip-Cov (Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning
//! Language Models", arXiv:2505.22617 §4; ALGORITHMS.md §12; verl `loss_mode: clip-cov`): PPO
//! clip, plus a random `⌊r·N⌋` of the valid tokens whose covariance
//! `(log π − mean log π)(Â − mean Â)` lies in `[ω_low, ω_high]` lose their PG term, which keeps
//! confident, positively rewarded tokens from collapsing the entropy; group advantage
//! `(R − mean)/std`, `token-mean`, no KL, no entropy bonus (the method replaces it).
//!
//! The update reseeds the random pick for every optimizer step from its shuffle stream.

use agentrl_rl::AggMode;

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{Findings, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Grpo,
    policy_loss: PolicyLossName::ClipCov,
    loss_agg_mode: AggMode::TokenMean,
    // The paper's r = 2e-4 picks ⌊2e-4·N⌋ = 0 of the ~10³ action tokens of a TinyAgent step;
    // 1e-2 drops a handful, the scale of tokens the paper's r drops in a 7B batch.
    clip_cov_ratio: 1e-2,
    clip_cov_lb: 1.0,
    clip_cov_ub: 5.0,
    ..BASE
};

pub fn check(knobs: &Knobs, f: &mut Findings) {
    if !(0.0..=1.0).contains(&knobs.clip_cov_ratio) {
        f.errors.push(format!(
            "algorithm.clip_cov_ratio = {} must lie in [0, 1]",
            knobs.clip_cov_ratio
        ));
    }
    let ordered = knobs.clip_cov_lb <= knobs.clip_cov_ub;
    if !ordered {
        f.errors.push(format!(
            "algorithm.clip_cov_lb ({}) must not exceed algorithm.clip_cov_ub ({})",
            knobs.clip_cov_lb, knobs.clip_cov_ub
        ));
    }
}
