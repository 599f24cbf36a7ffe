//! ReMax (Li et al., arXiv:2310.10505; verl `adv_estimator: remax`; no ALGORITHMS.md section,
//! formula in `agentrl_rl::remax_advantages`): REINFORCE whose baseline is the reward of the
//! *greedy* response to the same prompt, `A_t = Σ_{k≥t} r_k − R(greedy)`; no critic, no group
//! baseline. Token-level PPO clip (verl's actor loss; on-policy with one epoch it is
//! REINFORCE), `token-mean`, KL k1 in the reward as in verl's ReMax example (β = 0 here, as in
//! every preset).
//!
//! The trainer samples one extra episode per task at temperature 0 for the baseline
//! ([`super::Knobs::needs_greedy_baseline`]); it is used for nothing else.

use agentrl_rl::{AggMode, KlEstimator};

use super::registry::{AdvEstimatorName, PolicyLossName};
use super::{KlPlacement, Knobs, BASE};

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Remax,
    policy_loss: PolicyLossName::Vanilla,
    loss_agg_mode: AggMode::TokenMean,
    kl_loss_type: KlEstimator::K1,
    kl_placement: KlPlacement::InReward,
    ..BASE
};
