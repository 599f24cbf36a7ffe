//! RLOO (Ahmadian et al., arXiv:2402.14740; ALGORITHMS.md §7): leave-one-out baseline
//! `A_i = k/(k−1)·(R_i − mean R)`, REINFORCE on the sequence log-prob (`seq-mean-token-sum`),
//! no clipping in the paper (the on-policy ratio is 1, so the PPO form equals REINFORCE);
//! KL k1 in the reward. The loss is agentrl's `vanilla_pg` (`−Â·r`): verl's `vanilla` is the
//! clipped PPO form, which on-policy has the same gradient.

use agentrl_rl::{AggMode, KlEstimator};

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::KlPlacement;

use super::{Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Rloo,
    policy_loss: PolicyLossName::VanillaPg,
    loss_agg_mode: AggMode::SeqMeanTokenSum,
    std_normalize: false,
    kl_loss_type: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};

/// Checks of the `rloo` estimator, on any preset.
pub fn check(shape: super::StepShape, f: &mut super::Findings) {
    if shape.group_size < 2 {
        f.errors
            .push("adv_estimator = rloo needs rollout.group_size >= 2 (leave-one-out)".into());
    }
}
