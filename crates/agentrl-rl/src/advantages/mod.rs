//! Advantages: how much better than expected each action token was, the step between the
//! batch and the policy loss (task → episode → batch → **advantages** → loss → update).
//!
//! Input: per-token rewards `[B, T]` (the outcome score on the last action token, plus an
//! optional KL penalty from [`crate::kl::apply_kl_to_rewards`]), the loss mask, the prompt
//! group ids and, for GAE, the critic's values. Output: `[B, T]` advantages, 0 on masked
//! tokens, which the policy losses of [`crate::policy_loss`] read as constants.
//!
//! [`compute_advantages`] is the single entry point a trainer selects by name with
//! [`AdvantageEstimator`] (verl `adv_estimator`). The estimators themselves live by what they
//! compare a reward against:
//! - [`group`]: one advantage per sequence from its prompt group's outcome rewards (GRPO,
//!   Dr. GRPO, RLOO, OPO, GPG, GDPO, pass@k; ALGORITHMS.md §4–§7), and DAPO's dynamic-sampling
//!   filter (§6);
//! - [`token`]: per-token advantages from per-token rewards (REINFORCE++ §8, ReMax, OTB,
//!   TIR-OTB);
//! - GAE (§2) with the critic's returns, in [`crate::returns`].

pub mod group;
pub mod token;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::{Result, RlError};
use crate::returns;

pub use group::{
    broadcast_to_tokens, dynamic_sampling_filter, gdpo_advantages, gpg_advantages,
    group_advantages, grpo_passk_advantages, opo_advantages, DynamicSamplingFilter,
    GroupAdvantages, GroupBaseline, GROUP_STD_EPS,
};
pub use token::{
    optimal_token_baseline_advantages, reinforce_pp_advantages, reinforce_pp_baseline_advantages,
    remax_advantages, tir_optimal_token_baseline_advantages, OtbInputs, OTB_EPS,
};

/// The advantage estimators a trainer can select by name (verl `adv_estimator`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AdvantageEstimator {
    /// GAE with a critic, then masked whitening (PPO, ALGORITHMS.md §2).
    Gae {
        /// Discount γ.
        gamma: f64,
        /// GAE λ (verl `lam`).
        #[serde(alias = "lam")]
        lambda: f64,
    },
    /// GRPO (ALGORITHMS.md §4); `norm_by_std = false` is the Dr. GRPO advantage. verl's
    /// `grpo_vectorized` (the same estimator, computed in f32) is accepted as this.
    #[serde(alias = "grpo_vectorized")]
    Grpo {
        /// Divide by the group std (verl `norm_adv_by_std_in_grpo`).
        norm_by_std: bool,
    },
    /// Dr. GRPO: `R − mean` (ALGORITHMS.md §5).
    DrGrpo,
    /// RLOO leave-one-out (ALGORITHMS.md §7).
    Rloo,
    /// REINFORCE++ with global batch normalisation (ALGORITHMS.md §8).
    #[serde(alias = "reinforce_plus_plus")]
    ReinforcePlusPlus {
        /// Discount γ of the token returns.
        gamma: f64,
    },
    /// REINFORCE++-baseline: group mean, then global normalisation (ALGORITHMS.md §8).
    #[serde(alias = "reinforce_plus_plus_baseline")]
    ReinforcePlusPlusBaseline,
    /// OPO length-weighted baseline (verl `opo`), see [`group::opo_advantages`].
    #[serde(rename = "opo")]
    Opo,
    /// GPG advantage (verl `gpg`), see [`group::gpg_advantages`].
    #[serde(rename = "gpg")]
    Gpg {
        /// Divisor `f_norm` (verl default 1).
        #[serde(default = "one")]
        f_norm: f64,
    },
    /// ReMax: reward-to-go minus the greedy response's reward (verl `remax`); needs
    /// [`AdvantageExtras::reward_baselines`]. See [`token::remax_advantages`].
    #[serde(rename = "remax")]
    Remax,
    /// GDPO per-component group normalisation (verl `gdpo`); needs
    /// [`AdvantageExtras::reward_components`] (verl `gdpo_reward_keys`) and optionally
    /// [`AdvantageExtras::reward_weights`] (verl `gdpo_reward_weights`). See
    /// [`group::gdpo_advantages`].
    #[serde(rename = "gdpo")]
    Gdpo {
        /// Divide each component by its group std (verl `norm_adv_by_std_in_grpo`).
        #[serde(default = "yes")]
        norm_by_std: bool,
    },
    /// Pass@k advantage (verl `grpo_passk`), see [`group::grpo_passk_advantages`].
    #[serde(rename = "grpo_passk", alias = "grpo-passk")]
    GrpoPassk {
        /// Divide by the group std (verl `norm_adv_by_std_in_grpo`).
        #[serde(default = "yes")]
        norm_by_std: bool,
    },
    /// Optimal token baseline (verl `optimal_token_baseline`); needs
    /// [`AdvantageExtras::old_log_probs`] and [`AdvantageExtras::sum_pi_squared`]. See
    /// [`token::optimal_token_baseline_advantages`].
    #[serde(rename = "optimal_token_baseline", alias = "optimal-token-baseline")]
    OptimalTokenBaseline {
        /// verl `handle_zero_tail` (default true).
        #[serde(default = "yes")]
        handle_zero_tail: bool,
    },
    /// Multi-turn optimal token baseline (verl `tir_optimal_token_baseline`); same inputs as
    /// OTB. See [`token::tir_optimal_token_baseline_advantages`].
    #[serde(
        rename = "tir_optimal_token_baseline",
        alias = "tir-optimal-token-baseline"
    )]
    TirOptimalTokenBaseline {
        /// verl `handle_zero_tail` (default true).
        #[serde(default = "yes")]
        handle_zero_tail: bool,
    },
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

/// Inputs that only some estimators read (all `None` by default). Kept apart from
/// [`AdvantageInputs`] so that existing call sites stay valid.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdvantageExtras<'a> {
    /// ReMax: reward of the greedy response per sequence (verl `reward_baselines`).
    pub reward_baselines: Option<&'a [f32]>,
    /// GDPO: `components[k][i]`, reward component `k` of sequence `i`.
    pub reward_components: Option<&'a [Vec<f32>]>,
    /// GDPO: one weight per component (default 1).
    pub reward_weights: Option<&'a [f32]>,
    /// OTB / TIR-OTB: `[B, T]` `log π_old`.
    pub old_log_probs: Option<&'a Tensor>,
    /// OTB / TIR-OTB: `[B, T]` `Σ_v π_old(v)²` ([`crate::entropy::sum_pi_squared`]).
    pub sum_pi_squared: Option<&'a Tensor>,
    /// OTB / TIR-OTB: optional `[B, T]` rollout IS weights.
    pub rollout_is_weights: Option<&'a Tensor>,
}

/// What [`compute_advantages`] needs; unused fields may be `None` for estimators that ignore them.
#[derive(Debug, Clone, Copy)]
pub struct AdvantageInputs<'a> {
    /// `[B, T]` per-token rewards; the sequence outcome is their masked sum.
    pub token_rewards: &'a Tensor,
    /// `[B, T]` 0/1 loss mask.
    pub mask: &'a Tensor,
    /// `[B]` group (prompt) id of each sequence; required by the group estimators.
    pub group_ids: Option<&'a [usize]>,
    /// `[B, T]` critic values; required by GAE.
    pub values: Option<&'a Tensor>,
}

/// Result of [`compute_advantages`].
#[derive(Debug, Clone)]
pub struct AdvantageOutput {
    /// `[B, T]` advantages, 0 on masked tokens.
    pub advantages: Tensor,
    /// `[B, T]` critic targets (GAE only).
    pub returns: Option<Tensor>,
    /// Group statistics (group estimators only).
    pub groups: Option<GroupAdvantages>,
}

/// Masked per-sequence sum of `[B, T]` per-token rewards (the outcome `R_i`).
pub fn sequence_rewards(token_rewards: &Tensor, mask: &Tensor) -> Result<Vec<f32>> {
    const F: &str = "sequence_rewards";
    let (b, n) = checks::dims2(F, "token_rewards", token_rewards)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let r = checks::finite_rows(F, "token_rewards", token_rewards)?;
    Ok(r.iter()
        .zip(&m)
        .map(|(rr, mr)| rr.iter().zip(mr).map(|(&x, &w)| x * w).sum())
        .collect())
}

/// Dispatches on [`AdvantageEstimator`]: one call site for the trainer. Estimators that need
/// [`AdvantageExtras`] return an error naming the missing input; use
/// [`compute_advantages_with`] for them.
pub fn compute_advantages(
    estimator: &AdvantageEstimator,
    inputs: &AdvantageInputs<'_>,
) -> Result<AdvantageOutput> {
    compute_advantages_with(estimator, inputs, &AdvantageExtras::default())
}

/// [`compute_advantages`] with the inputs only some estimators read.
pub fn compute_advantages_with(
    estimator: &AdvantageEstimator,
    inputs: &AdvantageInputs<'_>,
    extras: &AdvantageExtras<'_>,
) -> Result<AdvantageOutput> {
    const F: &str = "compute_advantages";
    let need_groups = || {
        inputs
            .group_ids
            .ok_or_else(|| RlError::invalid(F, "group_ids", "this estimator needs group ids"))
    };
    let per_sequence = |a: &[f32]| -> Result<AdvantageOutput> {
        Ok(AdvantageOutput {
            advantages: broadcast_to_tokens(a, inputs.mask)?,
            returns: None,
            groups: None,
        })
    };
    let group_based = |baseline| -> Result<AdvantageOutput> {
        let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
        let groups = group_advantages(&rewards, need_groups()?, baseline)?;
        Ok(AdvantageOutput {
            advantages: broadcast_to_tokens(&groups.per_sequence, inputs.mask)?,
            returns: None,
            groups: Some(groups),
        })
    };
    match *estimator {
        AdvantageEstimator::Gae { gamma, lambda } => {
            let values = inputs
                .values
                .ok_or_else(|| RlError::invalid(F, "values", "GAE needs critic values"))?;
            let out = returns::gae(inputs.token_rewards, values, inputs.mask, gamma, lambda)?;
            Ok(AdvantageOutput {
                advantages: returns::masked_whiten(&out.advantages, inputs.mask, true)?,
                returns: Some(out.returns),
                groups: None,
            })
        }
        AdvantageEstimator::Grpo { norm_by_std: true } => group_based(GroupBaseline::GrpoStd),
        AdvantageEstimator::Grpo { norm_by_std: false } | AdvantageEstimator::DrGrpo => {
            group_based(GroupBaseline::MeanOnly)
        }
        AdvantageEstimator::Rloo => group_based(GroupBaseline::LeaveOneOut),
        AdvantageEstimator::ReinforcePlusPlus { gamma } => Ok(AdvantageOutput {
            advantages: reinforce_pp_advantages(inputs.token_rewards, inputs.mask, gamma)?,
            returns: None,
            groups: None,
        }),
        AdvantageEstimator::ReinforcePlusPlusBaseline => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            let ids = need_groups()?;
            Ok(AdvantageOutput {
                advantages: reinforce_pp_baseline_advantages(&rewards, ids, inputs.mask)?,
                returns: None,
                groups: Some(group_advantages(&rewards, ids, GroupBaseline::MeanOnly)?),
            })
        }
        AdvantageEstimator::Opo => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            let lengths: Vec<f32> = checks::rows(inputs.mask)?
                .iter()
                .map(|r| r.iter().sum())
                .collect();
            let a = opo_advantages(&rewards, &lengths, need_groups()?)?;
            per_sequence(&a)
        }
        AdvantageEstimator::Gpg { f_norm } => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            per_sequence(&gpg_advantages(&rewards, need_groups()?, f_norm)?)
        }
        AdvantageEstimator::GrpoPassk { norm_by_std } => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            per_sequence(&grpo_passk_advantages(
                &rewards,
                need_groups()?,
                norm_by_std,
            )?)
        }
        AdvantageEstimator::Remax => {
            let baselines = extras.reward_baselines.ok_or_else(|| {
                RlError::invalid(
                    F,
                    "extras.reward_baselines",
                    "ReMax needs the greedy rewards",
                )
            })?;
            let (advantages, returns) =
                remax_advantages(inputs.token_rewards, baselines, inputs.mask)?;
            Ok(AdvantageOutput {
                advantages,
                returns: Some(returns),
                groups: None,
            })
        }
        AdvantageEstimator::Gdpo { norm_by_std } => {
            let comps = extras.reward_components.ok_or_else(|| {
                RlError::invalid(
                    F,
                    "extras.reward_components",
                    "GDPO needs reward components",
                )
            })?;
            Ok(AdvantageOutput {
                advantages: gdpo_advantages(
                    comps,
                    extras.reward_weights,
                    need_groups()?,
                    inputs.mask,
                    norm_by_std,
                )?,
                returns: None,
                groups: None,
            })
        }
        AdvantageEstimator::OptimalTokenBaseline { handle_zero_tail }
        | AdvantageEstimator::TirOptimalTokenBaseline { handle_zero_tail } => {
            let x = OtbInputs {
                token_rewards: inputs.token_rewards,
                mask: inputs.mask,
                group_ids: need_groups()?,
                old_log_probs: extras.old_log_probs.ok_or_else(|| {
                    RlError::invalid(
                        F,
                        "extras.old_log_probs",
                        "the optimal token baseline needs it",
                    )
                })?,
                sum_pi_squared: extras.sum_pi_squared.ok_or_else(|| {
                    RlError::invalid(
                        F,
                        "extras.sum_pi_squared",
                        "the optimal token baseline needs it",
                    )
                })?,
                rollout_is_weights: extras.rollout_is_weights,
                handle_zero_tail,
            };
            let (advantages, returns) =
                if matches!(estimator, AdvantageEstimator::OptimalTokenBaseline { .. }) {
                    optimal_token_baseline_advantages(&x)?
                } else {
                    tir_optimal_token_baseline_advantages(&x)?
                };
            Ok(AdvantageOutput {
                advantages,
                returns: Some(returns),
                groups: None,
            })
        }
    }
}
