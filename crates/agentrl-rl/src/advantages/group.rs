//! Group baselines: one advantage per sequence from the outcome rewards of the sequences that
//! answered the same prompt (ALGORITHMS.md §4 GRPO, §5 Dr. GRPO, §7 RLOO, §6 DAPO's dynamic
//! sampling), and the rest of verl's outcome estimators that use the group the same way: OPO
//! (length-weighted baseline), GPG, GDPO (per-component normalisation) and pass@k
//! (`grpo_passk`).
//!
//! Sits at the start of [`super`]: batch (outcome `R_i` per sequence, prompt group ids) →
//! a per-sequence advantage here → [`broadcast_to_tokens`] over the loss mask → policy loss.
//! The verl-only estimators have no ALGORITHMS.md section; each doc comment states the
//! formula, the paper and the verl function. Host arithmetic is f64 where verl's is.
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
    Ok(group_members(group_ids))
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

/// Indices of each group, in order of first appearance (the grouping of [`groups_of`]
/// without its checks, for callers that checked their inputs).
pub(super) fn group_members(group_ids: &[usize]) -> Vec<Vec<usize>> {
    let mut slot: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, &g) in group_ids.iter().enumerate() {
        let s = *slot.entry(g).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[s].push(i);
    }
    out
}

/// OPO, the length-weighted optimal baseline (Hao et al. 2025, "On-Policy RL with Optimal
/// Reward Baseline", arXiv:2505.23585; verl `compute_opo_outcome_advantage`):
/// `A_i = R_i − Σ_{j∈g} |o_j| R_j / Σ_{j∈g} |o_j|`, with `|o_j|` the valid-token count
/// `lengths[j]`. Singletons: baseline 0 (advantage = reward). A group whose lengths sum to 0
/// gets baseline 0 (verl: NaN).
pub fn opo_advantages(rewards: &[f32], lengths: &[f32], group_ids: &[usize]) -> Result<Vec<f32>> {
    const F: &str = "opo_advantages";
    let gs = groups_of(F, rewards, group_ids)?;
    checks::len_is(F, "lengths", lengths, rewards.len())?;
    checks::finite(F, "lengths", lengths)?;
    let mut out = vec![0.0f32; rewards.len()];
    for g in &gs {
        let baseline = if g.len() == 1 {
            0.0
        } else {
            let len_sum: f64 = g.iter().map(|&i| f64::from(lengths[i])).sum();
            let weighted: f64 = g
                .iter()
                .map(|&i| f64::from(lengths[i]) * f64::from(rewards[i]))
                .sum();
            if len_sum > 0.0 {
                weighted / len_sum
            } else {
                0.0
            }
        };
        for &i in g {
            out[i] = (f64::from(rewards[i]) - baseline) as f32;
        }
    }
    Ok(out)
}

/// GPG advantage (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline",
/// arXiv:2504.02546; verl `compute_gpg_outcome_advantage`):
/// `A_i = α (R_i − mean_g R) / f_norm`, `α = B / max(#{i : R_i ≠ 0}, 1)` over the whole batch
/// (the paper's correction for the share of samples that carry a gradient). Singletons:
/// mean 0. verl's `alpha` argument is overwritten by this α, so it is not a parameter here.
pub fn gpg_advantages(rewards: &[f32], group_ids: &[usize], f_norm: f64) -> Result<Vec<f32>> {
    const F: &str = "gpg_advantages";
    let gs = groups_of(F, rewards, group_ids)?;
    if !(f_norm.is_finite() && f_norm != 0.0) {
        return Err(RlError::invalid(
            F,
            "f_norm",
            format!("must be finite and non-zero, got {f_norm}"),
        ));
    }
    let nonzero = rewards.iter().filter(|&&r| r != 0.0).count().max(1);
    let alpha = rewards.len() as f64 / nonzero as f64;
    let mut out = vec![0.0f32; rewards.len()];
    for g in &gs {
        let mean = if g.len() == 1 {
            0.0
        } else {
            g.iter().map(|&i| f64::from(rewards[i])).sum::<f64>() / g.len() as f64
        };
        for &i in g {
            out[i] = (alpha * (f64::from(rewards[i]) - mean) / f_norm) as f32;
        }
    }
    Ok(out)
}
/// GDPO, group reward-decoupled normalisation (Liu et al. 2026, arXiv:2601.05242; verl
/// `compute_gdpo_outcome_advantage`): each reward component `k` is group-normalised on its
/// own, `A_k = (R_k − mean_g R_k)/(std_g R_k + 1e-6)` (or `R_k − mean` without
/// `norm_by_std`, GRPO's conventions for singletons), then `A = whiten(Σ_k w_k A_k)` over the
/// batch's valid tokens ([`returns::masked_whiten`]). `components[k][i]` is component `k` of
/// sequence `i` (verl `gdpo_reward_keys`); `weights` default to 1 (verl
/// `gdpo_reward_weights`). Returns `[B, T]`, 0 on masked tokens.
pub fn gdpo_advantages(
    components: &[Vec<f32>],
    weights: Option<&[f32]>,
    group_ids: &[usize],
    mask: &Tensor,
    norm_by_std: bool,
) -> Result<Tensor> {
    const F: &str = "gdpo_advantages";
    if components.is_empty() {
        return Err(RlError::Empty {
            func: F,
            what: "`components` is empty: GDPO needs at least one reward component".into(),
        });
    }
    if let Some(w) = weights {
        checks::len_is(F, "weights", w, components.len())?;
        checks::finite(F, "weights", w)?;
    }
    let b = group_ids.len();
    let mut total = vec![0.0f64; b];
    for (k, comp) in components.iter().enumerate() {
        checks::len_is(F, "components[_]", comp, b)?;
        let baseline = if norm_by_std {
            GroupBaseline::GrpoStd
        } else {
            GroupBaseline::MeanOnly
        };
        let a = group_advantages(comp, group_ids, baseline)?.per_sequence;
        let w = weights.map_or(1.0, |w| f64::from(w[k]));
        for i in 0..b {
            total[i] += w * f64::from(a[i]);
        }
    }
    let total: Vec<f32> = total.iter().map(|&v| v as f32).collect();
    let per_token = broadcast_to_tokens(&total, mask)?;
    returns::masked_whiten(&per_token, mask, true)
}

/// Pass@k advantage (Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration
/// and Exploitation", arXiv:2503.19595 as cited by verl; verl
/// `compute_grpo_passk_outcome_advantage`): in each group only the best response gets a
/// non-zero advantage, `A = R_max − R_second`, divided by `std_g R + 1e-6` (unbiased std)
/// when `norm_by_std`. Ties for the maximum go to the first one in batch order. Groups need
/// at least 2 members (verl raises, so does this).
pub fn grpo_passk_advantages(
    rewards: &[f32],
    group_ids: &[usize],
    norm_by_std: bool,
) -> Result<Vec<f32>> {
    const F: &str = "grpo_passk_advantages";
    let gs = groups_of(F, rewards, group_ids)?;
    let mut out = vec![0.0f32; rewards.len()];
    for g in &gs {
        if g.len() < 2 {
            return Err(RlError::invalid(
                F,
                "group_ids",
                format!(
                    "pass@k needs at least 2 samples per group, group of sequence {} has 1",
                    g[0]
                ),
            ));
        }
        let mut order = g.clone();
        // Stable sort, descending: ties keep batch order.
        order.sort_by(|&a, &b| rewards[b].total_cmp(&rewards[a]));
        let (best, second) = (order[0], order[1]);
        let mut adv = f64::from(rewards[best]) - f64::from(rewards[second]);
        if norm_by_std {
            let k = g.len() as f64;
            let mean = g.iter().map(|&i| f64::from(rewards[i])).sum::<f64>() / k;
            let var = g
                .iter()
                .map(|&i| (f64::from(rewards[i]) - mean).powi(2))
                .sum::<f64>()
                / (k - 1.0);
            adv /= var.sqrt() + f64::from(GROUP_STD_EPS);
        }
        out[best] = adv as f32;
    }
    Ok(out)
}
