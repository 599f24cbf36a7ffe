//! GSPO (Qwen, arXiv:2507.18071; ALGORITHMS.md §9): the length-normalised sequence ratio
//! `s_i = exp(mean_t log r_{i,t})`, clipped at sequence level with a tight range, group
//! advantage `(R − mean)/std`, one term per sequence averaged over the group.

use agentrl_rl::{AdvantageEstimator, AggMode, PolicyLoss};

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    // The paper's clips (3e-4 / 4e-4) bind once a rollout batch is split into minibatches.
    eps_low: 3e-4,
    eps_high: 4e-4,
    agg: AggMode::SeqMeanTokenMean,
    minibatches: 2,
    ..BASE
};

/// `(R − mean)/std` per group, one value per episode.
pub fn advantage_estimator(knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Grpo {
        norm_by_std: knobs.std_normalize,
    }
}

/// The sequence ratio `s_i = exp(mean_t log r_{i,t})`, clipped to `[1−ε_low, 1+ε_high]`.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::Gspo {
        clip_low: knobs.eps_low,
        clip_high: knobs.eps_high,
    }
}

pub fn check(knobs: &Knobs, f: &mut super::Findings) {
    if knobs.dual_clip_c.is_some() {
        f.warnings
            .push("algorithm.dual_clip_c is ignored by gspo".into());
    }
}
