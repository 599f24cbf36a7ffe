//! Outcome advantages by group (GRPO, Dr. GRPO, RLOO), REINFORCE++ global normalisation, and
//! DAPO's dynamic-sampling filter (ALGORITHMS.md §4–§8).
//!
//! Data flow: one scalar outcome reward per sequence `R_i` plus the group id of the prompt it
//! answered (from the batch) → a per-sequence advantage → [`broadcast_to_tokens`] over the loss
//! mask → policy loss. [`compute_advantages`] is the single entry point a trainer selects by
//! name with [`AdvantageEstimator`] (also covering GAE and REINFORCE++ on per-token rewards).
//!
//! **Degenerate groups, handled explicitly.** A group of size ≥ 2 whose rewards are all equal
//! carries no learning signal: every estimator gives it advantage exactly 0 (not
//! `tiny / (0 + ε)`, which float rounding of the mean would otherwise produce), and it is
//! counted in `zero_variance_groups`. A group of size 1 has no baseline; following verl
//! (ALGORITHMS.md §4: "a group of size 1 gets mean 0 and std 1") its advantage is its raw
//! reward for every estimator.

use std::collections::BTreeMap;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::{Result, RlError};
use crate::returns;

/// Epsilon added to the group std (verl `epsilon = 1e-6`).
pub const GROUP_STD_EPS: f32 = 1e-6;

/// Which group baseline to use for outcome rewards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBaseline {
    /// GRPO: `(R − mean)/(std + 1e-6)`, unbiased std (ALGORITHMS.md §4).
    GrpoStd,
    /// GRPO without std (= Dr. GRPO advantage): `R − mean` (ALGORITHMS.md §5).
    MeanOnly,
    /// RLOO: `R_i − mean_{j≠i} R_j = k/(k−1)(R_i − mean)` (ALGORITHMS.md §7).
    LeaveOneOut,
}

/// Per-sequence group advantages and what the grouping found.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAdvantages {
    /// One advantage per sequence, in batch order.
    pub per_sequence: Vec<f32>,
    /// Number of distinct groups in the batch.
    pub num_groups: usize,
    /// Groups of size ≥ 2 whose rewards are all equal (advantage set to exactly 0).
    pub zero_variance_groups: usize,
    /// Groups of size 1 (advantage = raw reward, see the module docs).
    pub singleton_groups: usize,
}

/// Indices of each group, in order of first appearance. Errors on empty or mismatched input
/// and on non-finite rewards.
fn groups_of(func: &'static str, rewards: &[f32], group_ids: &[usize]) -> Result<Vec<Vec<usize>>> {
    if rewards.is_empty() {
        return Err(RlError::Empty {
            func,
            what: "`rewards` is empty: a batch needs at least one sequence".into(),
        });
    }
    checks::len_is(func, "group_ids", group_ids, rewards.len())?;
    checks::finite(func, "rewards", rewards)?;
    let mut order: BTreeMap<usize, usize> = BTreeMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, &g) in group_ids.iter().enumerate() {
        let slot = *order.entry(g).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[slot].push(i);
    }
    Ok(groups)
}

/// Group-relative outcome advantages (ALGORITHMS.md §4 GRPO eq. 3 / §4.1.2, arXiv:2402.03300;
/// §5 Dr. GRPO, arXiv:2503.20783; §7 RLOO, arXiv:2402.14740 / Kool et al. 2019).
///
/// `rewards[i]` is the outcome of sequence `i`, `group_ids[i]` the prompt group it belongs to
/// (any ids; groups may have unequal sizes and need not be contiguous).
pub fn group_advantages(
    rewards: &[f32],
    group_ids: &[usize],
    baseline: GroupBaseline,
) -> Result<GroupAdvantages> {
    const F: &str = "group_advantages";
    let groups = groups_of(F, rewards, group_ids)?;
    let mut out = vec![0.0f32; rewards.len()];
    let (mut zero_var, mut singletons) = (0, 0);
    for members in &groups {
        let k = members.len();
        if k == 1 {
            singletons += 1;
            out[members[0]] = rewards[members[0]];
            continue;
        }
        let first = rewards[members[0]];
        if members.iter().all(|&i| rewards[i] == first) {
            zero_var += 1;
            continue; // advantages stay exactly 0
        }
        let kf = k as f64;
        let mean = members.iter().map(|&i| f64::from(rewards[i])).sum::<f64>() / kf;
        match baseline {
            GroupBaseline::GrpoStd => {
                let var = members
                    .iter()
                    .map(|&i| (f64::from(rewards[i]) - mean).powi(2))
                    .sum::<f64>()
                    / (kf - 1.0);
                let denom = var.sqrt() + f64::from(GROUP_STD_EPS);
                for &i in members {
                    out[i] = ((f64::from(rewards[i]) - mean) / denom) as f32;
                }
            }
            GroupBaseline::MeanOnly => {
                for &i in members {
                    out[i] = (f64::from(rewards[i]) - mean) as f32;
                }
            }
            GroupBaseline::LeaveOneOut => {
                for &i in members {
                    out[i] = ((f64::from(rewards[i]) - mean) * kf / (kf - 1.0)) as f32;
                }
            }
        }
    }
    Ok(GroupAdvantages {
        per_sequence: out,
        num_groups: groups.len(),
        zero_variance_groups: zero_var,
        singleton_groups: singletons,
    })
}

/// Outcome of DAPO's dynamic-sampling filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicSamplingFilter {
    /// Batch indices of the sequences to keep, in batch order.
    pub kept_indices: Vec<usize>,
    /// Number of groups dropped because all their rewards were equal.
    pub dropped_groups: usize,
    /// Number of sequences in the dropped groups.
    pub dropped_sequences: usize,
    /// Number of groups kept.
    pub kept_groups: usize,
}

/// DAPO dynamic sampling (ALGORITHMS.md §6 technique 2, arXiv:2503.14476 eq. 11): drop every
/// group whose rewards are all equal (accuracy 0 or 1), report how many were dropped. Groups
/// of size 1 are kept, as in verl's filter (`std > 0 or len == 1`). The caller over-samples and
/// refills the batch.
pub fn dynamic_sampling_filter(
    rewards: &[f32],
    group_ids: &[usize],
) -> Result<DynamicSamplingFilter> {
    const F: &str = "dynamic_sampling_filter";
    let groups = groups_of(F, rewards, group_ids)?;
    let mut keep = vec![false; rewards.len()];
    let (mut dropped_groups, mut dropped_sequences, mut kept_groups) = (0, 0, 0);
    for members in &groups {
        let first = rewards[members[0]];
        let degenerate = members.len() > 1 && members.iter().all(|&i| rewards[i] == first);
        if degenerate {
            dropped_groups += 1;
            dropped_sequences += members.len();
        } else {
            kept_groups += 1;
            for &i in members {
                keep[i] = true;
            }
        }
    }
    Ok(DynamicSamplingFilter {
        kept_indices: keep
            .iter()
            .enumerate()
            .filter_map(|(i, &k)| k.then_some(i))
            .collect(),
        dropped_groups,
        dropped_sequences,
        kept_groups,
    })
}

/// Broadcasts one value per sequence to every valid token: `out[i, t] = values[i] · mask[i, t]`.
pub fn broadcast_to_tokens(per_sequence: &[f32], mask: &Tensor) -> Result<Tensor> {
    const F: &str = "broadcast_to_tokens";
    let (b, n) = checks::dims2(F, "mask", mask)?;
    checks::len_is(F, "per_sequence", per_sequence, b)?;
    checks::finite(F, "per_sequence", per_sequence)?;
    checks::mask_rows(F, mask, b, n)?;
    Ok(mask.broadcast_mul(&checks::column(per_sequence, mask)?)?)
}

/// REINFORCE++ advantages (ALGORITHMS.md §8, arXiv:2501.03262): γ-discounted returns of the
/// per-token rewards (outcome on the last action token, `−β·k1` KL on every token from
/// [`crate::kl::apply_kl_to_rewards`]), then z-scored over the *whole batch* of valid tokens
/// with [`returns::masked_whiten`].
pub fn reinforce_pp_advantages(
    token_rewards: &Tensor,
    mask: &Tensor,
    gamma: f64,
) -> Result<Tensor> {
    let g = returns::discounted_returns(token_rewards, mask, gamma)?;
    returns::masked_whiten(&g, mask, true)
}

/// REINFORCE++-baseline (ALGORITHMS.md §8; verl
/// `compute_reinforce_plus_plus_baseline_outcome_advantage`): subtract the group mean reward
/// (singletons: mean 0), broadcast to tokens, then whiten over the whole batch's valid tokens.
pub fn reinforce_pp_baseline_advantages(
    rewards: &[f32],
    group_ids: &[usize],
    mask: &Tensor,
) -> Result<Tensor> {
    let centred = group_advantages(rewards, group_ids, GroupBaseline::MeanOnly)?;
    let per_token = broadcast_to_tokens(&centred.per_sequence, mask)?;
    returns::masked_whiten(&per_token, mask, true)
}

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
    /// OPO length-weighted baseline (verl `opo`), see [`crate::opo_advantages`].
    #[serde(rename = "opo")]
    Opo,
    /// GPG advantage (verl `gpg`), see [`crate::gpg_advantages`].
    #[serde(rename = "gpg")]
    Gpg {
        /// Divisor `f_norm` (verl default 1).
        #[serde(default = "one")]
        f_norm: f64,
    },
    /// ReMax: reward-to-go minus the greedy response's reward (verl `remax`); needs
    /// [`AdvantageExtras::reward_baselines`]. See [`crate::remax_advantages`].
    #[serde(rename = "remax")]
    Remax,
    /// GDPO per-component group normalisation (verl `gdpo`); needs
    /// [`AdvantageExtras::reward_components`] (verl `gdpo_reward_keys`) and optionally
    /// [`AdvantageExtras::reward_weights`] (verl `gdpo_reward_weights`). See
    /// [`crate::gdpo_advantages`].
    #[serde(rename = "gdpo")]
    Gdpo {
        /// Divide each component by its group std (verl `norm_adv_by_std_in_grpo`).
        #[serde(default = "yes")]
        norm_by_std: bool,
    },
    /// Pass@k advantage (verl `grpo_passk`), see [`crate::grpo_passk_advantages`].
    #[serde(rename = "grpo_passk", alias = "grpo-passk")]
    GrpoPassk {
        /// Divide by the group std (verl `norm_adv_by_std_in_grpo`).
        #[serde(default = "yes")]
        norm_by_std: bool,
    },
    /// Optimal token baseline (verl `optimal_token_baseline`); needs
    /// [`AdvantageExtras::old_log_probs`] and [`AdvantageExtras::sum_pi_squared`]. See
    /// [`crate::optimal_token_baseline_advantages`].
    #[serde(rename = "optimal_token_baseline", alias = "optimal-token-baseline")]
    OptimalTokenBaseline {
        /// verl `handle_zero_tail` (default true).
        #[serde(default = "yes")]
        handle_zero_tail: bool,
    },
    /// Multi-turn optimal token baseline (verl `tir_optimal_token_baseline`); same inputs as
    /// OTB. See [`crate::tir_optimal_token_baseline_advantages`].
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
    /// OTB / TIR-OTB: `[B, T]` `Σ_v π_old(v)²` ([`crate::sum_pi_squared`]).
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
            let a = crate::estimators::opo_advantages(&rewards, &lengths, need_groups()?)?;
            per_sequence(&a)
        }
        AdvantageEstimator::Gpg { f_norm } => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            per_sequence(&crate::estimators::gpg_advantages(
                &rewards,
                need_groups()?,
                f_norm,
            )?)
        }
        AdvantageEstimator::GrpoPassk { norm_by_std } => {
            let rewards = sequence_rewards(inputs.token_rewards, inputs.mask)?;
            per_sequence(&crate::estimators::grpo_passk_advantages(
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
                crate::estimators::remax_advantages(inputs.token_rewards, baselines, inputs.mask)?;
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
                advantages: crate::estimators::gdpo_advantages(
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
            let x = crate::estimators::OtbInputs {
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
                    crate::estimators::optimal_token_baseline_advantages(&x)?
                } else {
                    crate::estimators::tir_optimal_token_baseline_advantages(&x)?
                };
            Ok(AdvantageOutput {
                advantages,
                returns: Some(returns),
                groups: None,
            })
        }
    }
}
