//! Per-token advantages from per-token rewards: REINFORCE++ and its group-mean variant
//! (ALGORITHMS.md §8, whitened over the whole batch), ReMax (reward-to-go minus the greedy
//! response's reward) and the optimal token baselines OTB / TIR-OTB (verl
//! `docs/algo/otb.md`).
//!
//! Sits beside [`super::group`] in the advantage step: per-token rewards (the outcome on the
//! last action token, plus an optional KL penalty from [`crate::kl::apply_kl_to_rewards`]) and
//! the loss mask → `[B, T]` advantages, exactly 0 on masked tokens → policy loss. GAE, the
//! critic's estimator, lives with the returns in [`crate::returns`]. ReMax and the OTBs have
//! no ALGORITHMS.md section; each doc comment states the formula, the paper and the verl
//! function.

use candle_core::Tensor;

use super::group::{broadcast_to_tokens, group_advantages, group_members, GroupBaseline};
use crate::checks;
use crate::error::{Result, RlError};
use crate::returns;

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

/// Reverse cumulative sum of `r·m` along `T` (verl's reward-to-go with γ = 1, *not* bridging:
/// a masked position keeps the sum of the later valid rewards).
fn reverse_cumsum(r: &[Vec<f32>], m: &[Vec<f32>]) -> Vec<Vec<f64>> {
    r.iter()
        .zip(m)
        .map(|(rr, mr)| {
            let mut acc = 0.0f64;
            let mut out = vec![0.0f64; rr.len()];
            for t in (0..rr.len()).rev() {
                acc += f64::from(rr[t]) * f64::from(mr[t]);
                out[t] = acc;
            }
            out
        })
        .collect()
}

fn to_rows_f32(x: &[Vec<f64>]) -> Vec<Vec<f32>> {
    x.iter()
        .map(|r| r.iter().map(|&v| v as f32).collect())
        .collect()
}

/// ReMax advantages and returns (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient
/// Reinforcement Learning Method for Aligning LLMs", arXiv:2310.10505; verl
/// `compute_remax_outcome_advantage`): `G_t = Σ_{k≥t} m_k r_k`, `A_t = G_t − b` with `b` the
/// reward of the *greedy* response to the same prompt (`reward_baselines[i]`, verl
/// `reward_baselines`). Returns `(advantages, returns)`, both `[B, T]`.
///
/// Difference from verl: advantages and returns are 0 on masked tokens (verl leaves the
/// reward-to-go on observation holes; the loss mask drops them either way).
pub fn remax_advantages(
    token_rewards: &Tensor,
    reward_baselines: &[f32],
    mask: &Tensor,
) -> Result<(Tensor, Tensor)> {
    const F: &str = "remax_advantages";
    let (b, n) = checks::dims2(F, "token_rewards", token_rewards)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    checks::len_is(F, "reward_baselines", reward_baselines, b)?;
    checks::finite(F, "reward_baselines", reward_baselines)?;
    let r = checks::finite_rows(F, "token_rewards", token_rewards)?;
    let g = reverse_cumsum(&r, &m);
    let mut adv = vec![vec![0.0f32; n]; b];
    let mut ret = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        for t in 0..n {
            if m[i][t] > 0.0 {
                ret[i][t] = g[i][t] as f32;
                adv[i][t] = (g[i][t] - f64::from(reward_baselines[i])) as f32;
            }
        }
    }
    Ok((
        checks::from_rows(&adv, token_rewards)?,
        checks::from_rows(&ret, token_rewards)?,
    ))
}
/// Inputs of the optimal token baselines, all `[B, T]` except `group_ids`.
#[derive(Debug, Clone, Copy)]
pub struct OtbInputs<'a> {
    /// Per-token rewards (outcome on the last action token).
    pub token_rewards: &'a Tensor,
    /// 0/1 loss mask.
    pub mask: &'a Tensor,
    /// Prompt group of each sequence.
    pub group_ids: &'a [usize],
    /// `log π_old` of the sampled tokens (verl `old_log_probs`).
    pub old_log_probs: &'a Tensor,
    /// `Σ_v π_old(v)²` per position, from [`crate::entropy::sum_pi_squared`] on the old logits.
    pub sum_pi_squared: &'a Tensor,
    /// Optional rollout IS weights `ρ̄_t`; `w_t` is multiplied by `ρ̄_t²`.
    pub rollout_is_weights: Option<&'a Tensor>,
    /// Zero the baseline of the unique longest response beyond the second-longest one in its
    /// group (verl `handle_zero_tail`, default true).
    pub handle_zero_tail: bool,
}

/// Epsilon of the OTB denominator (verl `epsilon = 1e-8`).
pub const OTB_EPS: f64 = 1e-8;

struct OtbPrepared {
    m: Vec<Vec<f32>>,
    returns: Vec<Vec<f64>>,
    w_cum: Vec<Vec<f64>>,
}

fn otb_prepare(func: &'static str, x: &OtbInputs<'_>) -> Result<OtbPrepared> {
    let (b, n) = checks::dims2(func, "token_rewards", x.token_rewards)?;
    let m = checks::mask_rows(func, x.mask, b, n)?;
    checks::len_is(func, "group_ids", x.group_ids, b)?;
    checks::same2(func, "old_log_probs", x.old_log_probs, b, n)?;
    checks::same2(func, "sum_pi_squared", x.sum_pi_squared, b, n)?;
    let r = checks::finite_rows(func, "token_rewards", x.token_rewards)?;
    let lp = checks::rows(x.old_log_probs)?;
    let s2 = checks::rows(x.sum_pi_squared)?;
    let is = match x.rollout_is_weights {
        Some(w) => {
            checks::same2(func, "rollout_is_weights", w, b, n)?;
            Some(checks::rows(w)?)
        }
        None => None,
    };
    let mut w_cum = vec![vec![0.0f64; n]; b];
    for i in 0..b {
        let mut acc = 0.0f64;
        for t in 0..n {
            if m[i][t] > 0.0 {
                let mut w = 1.0 - 2.0 * f64::from(lp[i][t]).exp() + f64::from(s2[i][t]);
                if let Some(is) = &is {
                    w *= f64::from(is[i][t]).powi(2);
                }
                if !w.is_finite() {
                    return Err(RlError::NonFinite {
                        func,
                        arg: "old_log_probs / sum_pi_squared / rollout_is_weights",
                        index: i * n + t,
                        value: w,
                    });
                }
                acc += w;
            }
            w_cum[i][t] = acc;
        }
    }
    Ok(OtbPrepared {
        returns: reverse_cumsum(&r, &m),
        m,
        w_cum,
    })
}

/// Second-largest length and the index (in `members`) of the unique longest one, if the
/// longest is unique and strictly longer (verl `handle_zero_tail`).
fn zero_tail(lengths: &[usize]) -> Option<(usize, usize)> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let (max, second) = (sorted[sorted.len() - 1], sorted[sorted.len() - 2]);
    let argmax: Vec<usize> = (0..lengths.len()).filter(|&k| lengths[k] == max).collect();
    (argmax.len() == 1 && max > second).then_some((argmax[0], second))
}

/// Optimal token baseline, OTB (verl `compute_optimal_token_baseline_advantage` and
/// `docs/algo/otb.md`; R. Li, "Optimal Token Baseline", richardli.xyz/optimal-token-baseline,
/// no arXiv paper: the variance-minimising baseline of a score-function estimator, Weaver &
/// Tao 2001, taken per token). Per group `g` and position `t`:
///
/// `w_t = (1 − 2π_t + Σ_v π_v²)·ρ̄_t²` (the squared score norm `‖∇_z log π(a_t)‖²` of a softmax;
/// ρ̄ only with IS weights), `W_t = Σ_{j≤t} m_j w_j`, `G_t = Σ_{k≥t} m_k r_k`,
/// `B_t = Σ_{i∈g} m G W / (Σ_{i∈g} m W + 1e-8)`, `A_t = (G_t − B_t)·m_t`, aligned by
/// *position* `t`. Singletons: `B = 0`. Returns `(advantages, returns)`; returns are 0 on
/// masked tokens here (verl keeps the reward-to-go there; the loss mask drops it).
pub fn optimal_token_baseline_advantages(x: &OtbInputs<'_>) -> Result<(Tensor, Tensor)> {
    const F: &str = "optimal_token_baseline_advantages";
    let p = otb_prepare(F, x)?;
    let (b, n) = (p.m.len(), p.m.first().map_or(0, Vec::len));
    let mut base = vec![vec![0.0f64; n]; b];
    for g in group_members(x.group_ids) {
        if g.len() == 1 {
            continue;
        }
        let per_step: Vec<f64> = (0..n)
            .map(|t| {
                let (mut num, mut den) = (0.0f64, 0.0f64);
                for &i in &g {
                    let mw = f64::from(p.m[i][t]) * p.w_cum[i][t];
                    num += p.returns[i][t] * mw;
                    den += mw;
                }
                num / (den + OTB_EPS)
            })
            .collect();
        for &i in &g {
            base[i].clone_from(&per_step);
        }
        if x.handle_zero_tail {
            let lengths: Vec<usize> = g
                .iter()
                .map(|&i| p.m[i].iter().filter(|&&v| v > 0.0).count())
                .collect();
            if let Some((k, second)) = zero_tail(&lengths) {
                for v in &mut base[g[k]][second..] {
                    *v = 0.0;
                }
            }
        }
    }
    let mut adv = vec![vec![0.0f64; n]; b];
    let mut ret = vec![vec![0.0f64; n]; b];
    for i in 0..b {
        for t in 0..n {
            if p.m[i][t] > 0.0 {
                adv[i][t] = p.returns[i][t] - base[i][t];
                ret[i][t] = p.returns[i][t];
            }
        }
    }
    Ok((
        checks::from_rows(&to_rows_f32(&adv), x.token_rewards)?,
        checks::from_rows(&to_rows_f32(&ret), x.token_rewards)?,
    ))
}

/// Multi-turn optimal token baseline, TIR-OTB (verl
/// `compute_multi_turn_optimal_token_baseline_advantage`): [`optimal_token_baseline_advantages`]
/// with positions counted in *policy tokens*: each response's valid tokens are packed to
/// `k = 0, 1, …` (tool-output holes removed), `B_k = Σ_{i∈g} G_{i,k} W_{i,k} / (Σ_{i∈g} W_{i,k} +
/// 1e-8)` over the responses that reach `k`, and `A` is scattered back to the valid positions.
/// Responses with no valid token join no group; zero-tail uses packed lengths.
pub fn tir_optimal_token_baseline_advantages(x: &OtbInputs<'_>) -> Result<(Tensor, Tensor)> {
    const F: &str = "tir_optimal_token_baseline_advantages";
    let p = otb_prepare(F, x)?;
    let (b, n) = (p.m.len(), p.m.first().map_or(0, Vec::len));
    let pos: Vec<Vec<usize>> =
        p.m.iter()
            .map(|r| (0..n).filter(|&t| r[t] > 0.0).collect())
            .collect();
    let lmax = pos.iter().map(Vec::len).max().unwrap_or(0);
    let packed = |src: &[Vec<f64>], i: usize| -> Vec<f64> {
        let mut v = vec![0.0f64; lmax];
        for (k, &t) in pos[i].iter().enumerate() {
            v[k] = src[i][t];
        }
        v
    };
    let w: Vec<Vec<f64>> = (0..b).map(|i| packed(&p.w_cum, i)).collect();
    let g_ret: Vec<Vec<f64>> = (0..b).map(|i| packed(&p.returns, i)).collect();
    let mut base = vec![vec![0.0f64; lmax]; b];
    let ids: Vec<usize> = (0..b).filter(|&i| !pos[i].is_empty()).collect();
    let sub_ids: Vec<usize> = ids.iter().map(|&i| x.group_ids[i]).collect();
    for g in group_members(&sub_ids) {
        let g: Vec<usize> = g.iter().map(|&k| ids[k]).collect();
        if g.len() == 1 {
            continue;
        }
        for k in 0..lmax {
            let num: f64 = g.iter().map(|&i| g_ret[i][k] * w[i][k]).sum();
            let den: f64 = g.iter().map(|&i| w[i][k]).sum();
            for &i in &g {
                base[i][k] = num / (den + OTB_EPS);
            }
        }
        if x.handle_zero_tail {
            let lengths: Vec<usize> = g.iter().map(|&i| pos[i].len()).collect();
            if let Some((k, second)) = zero_tail(&lengths) {
                for v in &mut base[g[k]][second..] {
                    *v = 0.0;
                }
            }
        }
    }
    let mut adv = vec![vec![0.0f64; n]; b];
    let mut ret = vec![vec![0.0f64; n]; b];
    for i in 0..b {
        for (k, &t) in pos[i].iter().enumerate() {
            adv[i][t] = g_ret[i][k] - base[i][k];
            ret[i][t] = p.returns[i][t];
        }
    }
    Ok((
        checks::from_rows(&to_rows_f32(&adv), x.token_rewards)?,
        checks::from_rows(&to_rows_f32(&ret), x.token_rewards)?,
    ))
}
