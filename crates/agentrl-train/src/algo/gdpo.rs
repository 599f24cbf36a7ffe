//! GDPO, group reward-decoupled normalisation (Liu et al. 2026, arXiv:2601.05242; verl
//! `adv_estimator: gdpo`; no ALGORITHMS.md section, formula in `agentrl_rl::gdpo_advantages`):
//! each reward component is normalised within its group on its own,
//! `A_k = (R_k − mean_g R_k)/(std_g R_k + 1e-6)`, then `A = whiten(Σ_k w_k A_k)` over the
//! batch's tokens; token-level PPO clip (verl's `vanilla`), `token-mean`, no KL.
//!
//! Why decoupled: GRPO normalises the *sum* of the components, so a component with a large
//! spread (here: solving) drowns the others, and a group whose sum ties gets no signal even
//! when its parts differ. GDPO gives every component that varies within a group its own unit
//! of advantage, and one that is constant within a group (every episode well-formed, say)
//! adds exactly 0.
//!
//! The components come from the gym's verdict of each episode ([`RewardComponent`]); the
//! scalar reward (`[reward]`) is still logged and still drives DAPO's hooks if they are on,
//! but not the advantage. The preset's components and weights:
//! - `hidden_solved` (w = 1): every hidden test passes, the goal itself;
//! - `hidden_fraction` (w = 0.5): the share of hidden tests that pass, partial credit that
//!   separates near misses in a group where nobody solves the task;
//! - `format` (w = 0.25): minus the number of malformed calls, a tie-breaker towards clean
//!   episodes.
//!
//! `public_passed` exists but is not in the preset: the public tests run in the agent's own
//! workspace, which it can edit, so rewarding them trains reward hacking.

use std::borrow::Cow;

use agentrl_gym::Reward;
use serde::{Deserialize, Serialize};

use super::registry::AdvEstimatorName;
use super::{Findings, Knobs, StepShape, BASE};

/// One part of the gym's verdict of an episode, as a GDPO reward component (verl's
/// `gdpo_reward_keys` name entries of the reward function's extra info; these are the gym's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardComponent {
    /// 1 when every hidden test passes, else 0.
    HiddenSolved,
    /// Share of the hidden tests that pass (0 when the task has none).
    HiddenFraction,
    /// 1 when every public test passes in the agent's workspace (hackable), else 0.
    PublicPassed,
    /// Minus the number of format errors (malformed call, unknown tool, bad arguments).
    Format,
}

impl RewardComponent {
    /// The component's value for one episode's verdict.
    pub fn value(self, reward: &Reward) -> f32 {
        match self {
            RewardComponent::HiddenSolved => f32::from(u8::from(reward.solved())),
            RewardComponent::HiddenFraction => {
                if reward.hidden_total == 0 {
                    0.0
                } else {
                    reward.hidden_passed as f32 / reward.hidden_total as f32
                }
            }
            RewardComponent::PublicPassed => f32::from(u8::from(reward.public_passed_all())),
            RewardComponent::Format => -(reward.format_errors as f32),
        }
    }
}

/// The preset's components, in the order of [`WEIGHTS`].
pub const COMPONENTS: &[RewardComponent] = &[
    RewardComponent::HiddenSolved,
    RewardComponent::HiddenFraction,
    RewardComponent::Format,
];

/// The preset's weights (see the module docs).
pub const WEIGHTS: &[f64] = &[1.0, 0.5, 0.25];

pub const PRESET: Knobs = Knobs {
    adv_estimator: AdvEstimatorName::Gdpo,
    gdpo_reward_keys: Cow::Borrowed(COMPONENTS),
    gdpo_reward_weights: Some(Cow::Borrowed(WEIGHTS)),
    ..BASE
};

/// `components[k][i]`: component `k` of episode `i`, for the episodes' verdicts in batch order;
/// `None` unless the estimator reads components.
pub fn reward_components<'a>(
    knobs: &Knobs,
    rewards: impl Iterator<Item = &'a Reward>,
) -> Option<Vec<Vec<f32>>> {
    if !knobs.needs_reward_components() {
        return None;
    }
    let rewards: Vec<&Reward> = rewards.collect();
    Some(
        knobs
            .gdpo_reward_keys
            .iter()
            .map(|c| rewards.iter().map(|r| c.value(r)).collect())
            .collect(),
    )
}

/// Checks of the `gdpo` estimator, on any preset.
pub fn check(knobs: &Knobs, shape: StepShape, f: &mut Findings) {
    if knobs.gdpo_reward_keys.is_empty() {
        f.errors.push(
            "adv_estimator = gdpo needs algorithm.gdpo_reward_keys (at least one of \
             hidden_solved, hidden_fraction, public_passed, format)"
                .into(),
        );
    }
    if let Some(w) = &knobs.gdpo_reward_weights {
        if w.len() != knobs.gdpo_reward_keys.len() {
            f.errors.push(format!(
                "algorithm.gdpo_reward_weights has {} weights for {} gdpo_reward_keys",
                w.len(),
                knobs.gdpo_reward_keys.len()
            ));
        }
        if w.iter().any(|x| !x.is_finite()) {
            f.errors
                .push("algorithm.gdpo_reward_weights must be finite numbers".into());
        }
    }
    if knobs
        .gdpo_reward_keys
        .contains(&RewardComponent::PublicPassed)
    {
        f.warnings.push(
            "algorithm.gdpo_reward_keys has public_passed: the public tests run in the agent's \
             own workspace, so rewarding them rewards tampering with them"
                .into(),
        );
    }
    if shape.group_size < 2 {
        f.warnings.push(
            "adv_estimator = gdpo with rollout.group_size = 1: every component's group baseline \
             is the component itself"
                .into(),
        );
    }
}
