//! ReMax (Li et al., arXiv:2310.10505; verl `adv_estimator: remax`; no ALGORITHMS.md section,
//! formula in `agentrl_rl::remax_advantages`): REINFORCE whose baseline is the reward of the
//! *greedy* response to the same prompt, `A_t = Σ_{k≥t} r_k − R(greedy)`; no critic, no group
//! baseline. Token-level PPO clip (verl's actor loss; on-policy with one epoch it is
//! REINFORCE), `token-mean`, KL k1 in the reward as in verl's ReMax example (β = 0 here, as in
//! every preset).
//!
//! The trainer samples one extra episode per task at temperature 0 for the baseline
//! ([`super::Algorithm::needs_greedy_baseline`]); it is used for nothing else.

use agentrl_rl::{AdvantageEstimator, AggMode, KlEstimator, PolicyLoss};

use super::{KlPlacement, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    agg: AggMode::TokenMean,
    kl_estimator: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};

/// Reward-to-go of the (KL-shaped) token rewards minus the greedy episode's reward.
pub fn advantage_estimator(_knobs: &Knobs) -> AdvantageEstimator {
    AdvantageEstimator::Remax
}

/// Token-level PPO clip.
pub fn policy_loss(knobs: &Knobs) -> PolicyLoss {
    super::grpo::ppo_clip(knobs)
}
