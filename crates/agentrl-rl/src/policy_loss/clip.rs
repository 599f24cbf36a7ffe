//! Clipped-ratio policy losses: vanilla PG (the unclipped reference), PPO clip (with dual clip
//! and DAPO's asymmetric clip-higher), GSPO and GSPO-token (sequence-level ratio), CISPO
//! (clipped, detached IS weight), and the covariance-selected Clip-Cov / KL-Cov
//! (ALGORITHMS.md §1, §3, §6, §9, §10, §12).
//!
//! Where it sits: trainer log-probs `log π_θ` (differentiable), the proximal `log π_old` and
//! the advantages (from [`crate::advantages`]), all `[B, T]`, plus the loss mask → a per-token
//! loss `ℓ` → optional detached weights (`ℓ ← w·ℓ`) → [`crate::aggregation::aggregate`], by
//! way of [`super::contract`]. Every loss is *minimised* (it is the negated objective) and
//! returns its diagnostics as plain numbers.
//!
//! Log-ratios are clamped to ±20 before `exp` (verl), GSPO's sequence log-ratio to ≤ 10.

use candle_core::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::contract::{
    check, check_clip, finish, masked_frac, token_ratio, PolicyLossDiagnostics, PolicyLossInputs,
    PolicyLossOutput,
};
use crate::aggregation::{AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

/// Upper clamp of GSPO's sequence log-ratio (verl `compute_policy_loss_gspo`).
pub const GSPO_LOG_RATIO_MAX: f64 = 10.0;

/// Vanilla (importance-weighted) policy gradient `ℓ = −Â · r`, `r = π_θ/π_old`
/// (ALGORITHMS.md §1; Williams 1992). With `old_log_probs = sg(log_probs)` its gradient is
/// REINFORCE's `−Â ∇log π_θ`, and it equals PPO exactly whenever `r = 1`.
pub fn vanilla_pg_loss(
    x: &PolicyLossInputs<'_>,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    let c = check("vanilla_pg_loss", x)?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let per_token = ratio.mul(&x.advantages.detach())?.neg()?;
    finish(
        x,
        &c,
        per_token,
        &ratio,
        PolicyLossDiagnostics::default(),
        agg,
        scale,
    )
}

/// Clipped surrogate on a given ratio: `max(−Â r, −Â clip(r, 1−lo, 1+hi))`, then dual clip
/// `min(·, −Â c)` on `Â < 0`. Returns the per-token loss and the clip diagnostics.
fn clipped_surrogate(
    ratio: &Tensor,
    adv: &Tensor,
    mask_rows: &[Vec<f32>],
    low: f64,
    high: f64,
    dual_clip: Option<f64>,
) -> Result<(Tensor, PolicyLossDiagnostics)> {
    let unclipped = ratio.mul(adv)?.neg()?;
    let clipped = ratio.clamp(1.0 - low, 1.0 + high)?.mul(adv)?.neg()?;
    let mut per_token = unclipped.maximum(&clipped)?;
    let r = checks::rows(ratio)?;
    let a = checks::rows(adv)?;
    let mut diag = PolicyLossDiagnostics {
        clipfrac_upper: masked_frac(mask_rows, |i, t| {
            a[i][t] > 0.0 && f64::from(r[i][t]) > 1.0 + high
        }),
        clipfrac_lower: masked_frac(mask_rows, |i, t| {
            a[i][t] < 0.0 && f64::from(r[i][t]) < 1.0 - low
        }),
        ..Default::default()
    };
    let u = checks::rows(&unclipped)?;
    let cl = checks::rows(&clipped)?;
    diag.clipfrac = masked_frac(mask_rows, |i, t| cl[i][t] > u[i][t]);
    if let Some(c) = dual_clip {
        let bound = (adv.neg()? * c)?;
        let pt = checks::rows(&per_token)?;
        let bnd = checks::rows(&bound)?;
        diag.dual_clipfrac = masked_frac(mask_rows, |i, t| a[i][t] < 0.0 && bnd[i][t] < pt[i][t]);
        let lower_capped = per_token.minimum(&bound)?;
        per_token = adv.lt(0.0)?.where_cond(&lower_capped, &per_token)?;
    }
    Ok((per_token, diag))
}

/// PPO clipped surrogate (ALGORITHMS.md §3; Schulman et al. 2017, arXiv:1707.06347), with
/// DAPO's decoupled `clip_low`/`clip_high` (§6, arXiv:2503.14476) and dual clip `c > 1` (§3;
/// Ye et al. 2020, arXiv:1912.09729):
/// `ℓ = max(−Â r, −Â clip(r, 1−ε_low, 1+ε_high))`, and for `Â < 0`: `ℓ ← min(ℓ, −c Â)`.
pub fn ppo_clip_loss(
    x: &PolicyLossInputs<'_>,
    clip_low: f64,
    clip_high: f64,
    dual_clip: Option<f64>,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "ppo_clip_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    if let Some(dc) = dual_clip {
        if !(dc > 1.0 && dc.is_finite()) {
            return Err(RlError::invalid(
                F,
                "dual_clip",
                format!("the dual-clip constant must be > 1, got {dc}"),
            ));
        }
    }
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let (per_token, diag) = clipped_surrogate(
        &ratio,
        &x.advantages.detach(),
        &c.mask_rows,
        clip_low,
        clip_high,
        dual_clip,
    )?;
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}

/// Masked mean over each sequence of `log π_θ − log π_old`: `[B, 1]`, differentiable.
fn sequence_log_ratio(x: &PolicyLossInputs<'_>, mask_rows: &[Vec<f32>]) -> Result<Tensor> {
    let inv_len: Vec<f32> = mask_rows
        .iter()
        .map(|r| {
            let n: f32 = r.iter().sum();
            1.0 / n.max(1.0)
        })
        .collect();
    let zeros = x.log_probs.zeros_like()?;
    let diff = x
        .mask
        .ne(0.0)?
        .where_cond(&x.log_probs.sub(&x.old_log_probs.detach())?, &zeros)?;
    Ok(diff
        .sum_keepdim(1)?
        .mul(&checks::column(&inv_len, x.log_probs)?)?)
}

/// GSPO, sequence level (ALGORITHMS.md §9; Zheng et al. 2025, arXiv:2507.18071 eqs. 5–7):
/// `s_i = exp((1/|y_i|) Σ_t (log π_θ − log π_old))`, `ℓ_i = max(−Â s_i, −Â clip(s_i, 1−lo, 1+hi))`,
/// broadcast to the tokens of sequence `i`. Use with `seq-mean-token-mean` for the paper's one
/// term per sequence, averaged over the group (its gradient is eq. 10).
pub fn gspo_loss(
    x: &PolicyLossInputs<'_>,
    clip_low: f64,
    clip_high: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "gspo_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    let seq = sequence_log_ratio(x, &c.mask_rows)?.minimum(GSPO_LOG_RATIO_MAX)?;
    let ratio = seq.exp()?.broadcast_as(x.log_probs.shape())?.contiguous()?;
    let (per_token, diag) = clipped_surrogate(
        &ratio,
        &x.advantages.detach(),
        &c.mask_rows,
        clip_low,
        clip_high,
        None,
    )?;
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}

/// GSPO-token (ALGORITHMS.md §9, arXiv:2507.18071 eqs. 13–14; verl `compute_policy_loss_gspo`):
/// `s_{i,t} = exp(sg[log s_i] + log π_θ − sg[log π_θ])`, numerically `s_i`, with the gradient of
/// each token's own log-prob, so per-token advantages are allowed.
pub fn gspo_token_loss(
    x: &PolicyLossInputs<'_>,
    clip_low: f64,
    clip_high: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "gspo_token_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    let seq = sequence_log_ratio(x, &c.mask_rows)?.detach();
    let log_ratio = x
        .log_probs
        .sub(&x.log_probs.detach())?
        .broadcast_add(&seq)?
        .minimum(GSPO_LOG_RATIO_MAX)?;
    let ratio = log_ratio.exp()?;
    let (per_token, diag) = clipped_surrogate(
        &ratio,
        &x.advantages.detach(),
        &c.mask_rows,
        clip_low,
        clip_high,
        None,
    )?;
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}

/// CISPO (ALGORITHMS.md §10; MiniMax-M1, arXiv:2506.13585 eqs. 4–5):
/// `ℓ = −sg[clip(r, 1−ε_low, 1+ε_high)] · Â · log π_θ`. No token loses its gradient; the weight
/// is only capped.
pub fn cispo_loss(
    x: &PolicyLossInputs<'_>,
    clip_low: f64,
    clip_high: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "cispo_loss";
    let c = check(F, x)?;
    check_clip(F, clip_low, clip_high)?;
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?.detach();
    let weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)?;
    let per_token = weight
        .mul(&x.advantages.detach())?
        .mul(x.log_probs)?
        .neg()?;
    let r = checks::rows(&ratio)?;
    let upper = masked_frac(&c.mask_rows, |i, t| f64::from(r[i][t]) > 1.0 + clip_high);
    let lower = masked_frac(&c.mask_rows, |i, t| f64::from(r[i][t]) < 1.0 - clip_low);
    let diag = PolicyLossDiagnostics {
        clipfrac: upper + lower,
        clipfrac_upper: upper,
        clipfrac_lower: lower,
        ..Default::default()
    };
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}

/// Token covariance of ALGORITHMS.md §12, `Cov_i = (log π_i − mean log π)·(Â_i − mean Â)`,
/// with both means over the valid tokens of the whole batch (verl). Host rows; `log π` is
/// taken as a constant.
fn token_covariance(logp: &[Vec<f32>], adv: &[Vec<f32>], mask_rows: &[Vec<f32>]) -> Vec<Vec<f64>> {
    let (mut sum_lp, mut sum_a, mut n) = (0.0f64, 0.0f64, 0.0f64);
    for ((lr, ar), mr) in logp.iter().zip(adv).zip(mask_rows) {
        for ((&l, &a), &m) in lr.iter().zip(ar).zip(mr) {
            if m > 0.0 {
                sum_lp += f64::from(l);
                sum_a += f64::from(a);
                n += 1.0;
            }
        }
    }
    let (mean_lp, mean_a) = (sum_lp / n.max(1.0), sum_a / n.max(1.0));
    logp.iter()
        .zip(adv)
        .map(|(lr, ar)| {
            lr.iter()
                .zip(ar)
                .map(|(&l, &a)| (f64::from(l) - mean_lp) * (f64::from(a) - mean_a))
                .collect()
        })
        .collect()
}

fn check_ratio(func: &'static str, arg: &'static str, v: f64) -> Result<()> {
    if !((0.0..=1.0).contains(&v)) {
        return Err(RlError::invalid(
            func,
            arg,
            format!("must be a share of tokens in [0, 1], got {v}"),
        ));
    }
    Ok(())
}

/// 0/1 host rows with ones at `picked` `(row, col)` positions.
fn selection_rows(b: usize, n: usize, picked: &[(usize, usize)]) -> Vec<f32> {
    let mut flat = vec![0.0f32; b * n];
    for &(i, t) in picked {
        flat[i * n + t] = 1.0;
    }
    flat
}

/// Clip-Cov (ALGORITHMS.md §12; Cui et al. 2025, arXiv:2505.22617 §4; verl
/// `compute_policy_loss_clip_cov`): the PPO clipped surrogate `ℓ = max(−Â r, −Â clip(r, 1−lo,
/// 1+hi))`, then among valid tokens that PPO did not already clip and whose token covariance
/// (see §12) lies in `[cov_low, cov_high]`, `⌊r·N⌋` (N = valid tokens) are drawn at random
/// (ChaCha8 seeded by `seed`) and their term is multiplied by 0, so they contribute neither
/// value nor gradient (verl's `corr` mask).
///
/// Deviation from verl: verl draws `max(⌊r·N⌋, 1)` tokens; this draws `⌊r·N⌋`, as the paper
/// and ALGORITHMS.md state, so `clip_cov_ratio = 0` is exactly PPO. No dual clip (verl has none
/// in this loss).
pub fn clip_cov_loss(
    x: &PolicyLossInputs<'_>,
    params: ClipCovParams,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "clip_cov_loss";
    let c = check(F, x)?;
    check_clip(F, params.clip_low, params.clip_high)?;
    check_ratio(F, "clip_cov_ratio", params.clip_cov_ratio)?;
    if !(params.cov_low.is_finite()
        && params.cov_high.is_finite()
        && params.cov_low <= params.cov_high)
    {
        return Err(RlError::invalid(
            F,
            "cov_low",
            format!(
                "need finite cov_low <= cov_high, got [{}, {}]",
                params.cov_low, params.cov_high
            ),
        ));
    }
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let adv = x.advantages.detach();
    let (per_token, mut diag) = clipped_surrogate(
        &ratio,
        &adv,
        &c.mask_rows,
        params.clip_low,
        params.clip_high,
        None,
    )?;
    let unclipped = checks::rows(&ratio.mul(&adv)?.neg()?)?;
    let clipped = checks::rows(
        &ratio
            .clamp(1.0 - params.clip_low, 1.0 + params.clip_high)?
            .mul(&adv)?
            .neg()?,
    )?;
    let cov = token_covariance(
        &checks::rows(x.log_probs)?,
        &checks::rows(&adv)?,
        &c.mask_rows,
    );
    let num_valid: f32 = c.mask_rows.iter().flatten().sum();
    let take = (params.clip_cov_ratio * f64::from(num_valid)).floor() as usize;
    let mut candidates = Vec::new();
    for (i, mr) in c.mask_rows.iter().enumerate() {
        for (t, &m) in mr.iter().enumerate() {
            let in_range = (params.cov_low..=params.cov_high).contains(&cov[i][t]);
            if m > 0.0 && in_range && clipped[i][t] <= unclipped[i][t] {
                candidates.push((i, t));
            }
        }
    }
    let take = take.min(candidates.len());
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let picked: Vec<(usize, usize)> = rand::seq::index::sample(&mut rng, candidates.len(), take)
        .into_iter()
        .map(|k| candidates[k])
        .collect();
    let (b, n) = x.log_probs.dims2()?;
    let keep = Tensor::from_vec(selection_rows(b, n, &picked), (b, n), x.log_probs.device())?
        .to_dtype(per_token.dtype())?
        .affine(-1.0, 1.0)?;
    diag.cov_selected = picked.len() as f32;
    let per_token = per_token.mul(&keep)?;
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}

/// Hyper-parameters of [`clip_cov_loss`] (see [`super::PolicyLoss::ClipCov`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipCovParams {
    /// ε_low of the PPO clip.
    pub clip_low: f64,
    /// ε_high of the PPO clip.
    pub clip_high: f64,
    /// r: share of valid tokens dropped.
    pub clip_cov_ratio: f64,
    /// ω_low.
    pub cov_low: f64,
    /// ω_high.
    pub cov_high: f64,
    /// RNG seed of the pick.
    pub seed: u64,
}

impl Default for ClipCovParams {
    /// The paper's defaults (ALGORITHMS.md §12): ε = 0.2, r = 2e-4, ω = [1, 5], seed 0.
    fn default() -> Self {
        ClipCovParams {
            clip_low: 0.2,
            clip_high: 0.2,
            clip_cov_ratio: 2e-4,
            cov_low: 1.0,
            cov_high: 5.0,
            seed: 0,
        }
    }
}

/// KL-Cov (ALGORITHMS.md §12; Cui et al. 2025, arXiv:2505.22617 §4; verl
/// `compute_policy_loss_kl_cov`): the importance-weighted PG term `ℓ = −Â r` (no ratio clip,
/// as in verl), and for the `⌊k·N⌋` valid tokens with the largest token covariance
/// `ℓ ← ℓ + β·|log π_θ − log π_old|` (differentiable). Ties break by position.
///
/// Deviation from verl: verl penalises `max(⌊k·N⌋, 1)` tokens (none when `k = 0`); this uses
/// `⌊k·N⌋` as the paper and ALGORITHMS.md state.
pub fn kl_cov_loss(
    x: &PolicyLossInputs<'_>,
    kl_cov_ratio: f64,
    kl_coef: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "kl_cov_loss";
    let c = check(F, x)?;
    check_ratio(F, "kl_cov_ratio", kl_cov_ratio)?;
    if !(kl_coef >= 0.0 && kl_coef.is_finite()) {
        return Err(RlError::invalid(
            F,
            "kl_coef",
            format!("must be a finite value >= 0, got {kl_coef}"),
        ));
    }
    let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
    let adv = x.advantages.detach();
    let pg = ratio.mul(&adv)?.neg()?;
    let cov = token_covariance(
        &checks::rows(x.log_probs)?,
        &checks::rows(&adv)?,
        &c.mask_rows,
    );
    let mut valid: Vec<(usize, usize)> = Vec::new();
    for (i, mr) in c.mask_rows.iter().enumerate() {
        for (t, &m) in mr.iter().enumerate() {
            if m > 0.0 {
                valid.push((i, t));
            }
        }
    }
    let take = ((kl_cov_ratio * valid.len() as f64).floor() as usize).min(valid.len());
    // Stable sort: descending covariance, ties keep row-major order.
    valid.sort_by(|&(i, t), &(j, u)| cov[j][u].total_cmp(&cov[i][t]));
    valid.truncate(take);
    let (b, n) = x.log_probs.dims2()?;
    let selected = Tensor::from_vec(selection_rows(b, n, &valid), (b, n), x.log_probs.device())?
        .to_dtype(pg.dtype())?;
    // |d| as d·sg(sign d): the subgradient at d = 0 is 0 as in torch (candle's `abs` gives 1).
    let log_ratio = x.log_probs.sub(&x.old_log_probs.detach())?;
    let sign = log_ratio
        .gt(0.0)?
        .to_dtype(pg.dtype())?
        .sub(&log_ratio.lt(0.0)?.to_dtype(pg.dtype())?)?
        .detach();
    let penalty = log_ratio.mul(&sign)?.affine(kl_coef, 0.0)?.mul(&selected)?;
    let per_token = pg.add(&penalty)?;
    let diag = PolicyLossDiagnostics {
        cov_selected: valid.len() as f32,
        ..Default::default()
    };
    finish(x, &c, per_token, &ratio, diag, agg, scale)
}
