//! RLOO (Ahmadian et al., arXiv:2402.14740; ALGORITHMS.md §7): leave-one-out baseline
//! `A_i = k/(k−1)·(R_i − mean R)`, REINFORCE on the sequence log-prob (`seq-mean-token-sum`),
//! no clipping in the paper (the on-policy ratio is 1, so the PPO form equals REINFORCE);
//! KL k1 in the reward.

use agentrl_rl::{AdvantageEstimator, AggMode, KlEstimator, PolicyLoss};

use super::KlPlacement;

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::SeqMeanTokenSum,
    std_normalize: false,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};

/// Leave-one-out: `A_i = R_i − mean_{j≠i} R_j` over the group (on KL-shaped rewards).
pub fn advantage_estimator(_knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Rloo
}

/// Plain importance-weighted policy gradient `−Â·r` (r ≡ 1 on-policy: REINFORCE).
pub fn policy_loss(_knobs: &Knobs) -> PolicyLoss {
    PolicyLoss::Vanilla
}

pub fn check(shape: super::StepShape, f: &mut super::Findings) {
    if shape.group_size < 2 {
        f.errors
            .push("rloo needs rollout.group_size >= 2 (leave-one-out)".into());
    }
}
