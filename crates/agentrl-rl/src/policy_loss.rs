//! Policy-gradient losses: vanilla PG, PPO clip (with dual clip and DAPO's asymmetric
//! clip-higher), GSPO, GSPO-token, CISPO, and the covariance-selected Clip-Cov / KL-Cov
//! (ALGORITHMS.md §1, §3, §6, §9, §10, §12).
//!
//! Data flow: trainer log-probs `log π_θ` (differentiable), the proximal `log π_old` and the
//! advantages (from [`crate::advantages`]), all `[B, T]`, plus the loss mask → a per-token loss
//! `ℓ` → optional detached off-policy weights from [`crate::offpolicy`] (`ℓ ← w·ℓ`) →
//! [`crate::aggregation::aggregate`]. Every loss is *minimised* (it is the negated objective)
//! and returns its diagnostics as plain numbers.
//!
//! Log-ratios are clamped to ±20 before `exp` (verl), GSPO's sequence log-ratio to ≤ 10.

use std::collections::BTreeMap;

use candle_core::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::aggregation::{aggregate, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

/// Clamp applied to token log-ratios before exponentiation (verl).
pub const LOG_RATIO_CLAMP: f64 = 20.0;
/// Upper clamp of GSPO's sequence log-ratio (verl `compute_policy_loss_gspo`).
pub const GSPO_LOG_RATIO_MAX: f64 = 10.0;

/// The policy losses a trainer can select by name (verl `policy_loss.loss_mode`).
///
/// `BypassMode` carries its parsed rollout-correction spec inline (a few hundred bytes) so the
/// enum stays `Copy`; it is built once per run, so the size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PolicyLoss {
    /// Importance-weighted policy gradient without clipping, `ℓ = −Â·r`.
    Vanilla,
    /// PPO clip; `clip_low ≠ clip_high` is DAPO clip-higher; `dual_clip = Some(c)` (c > 1)
    /// bounds the loss of negative-advantage tokens.
    PpoClip {
        /// ε_low: lower bound `1 − ε_low` of the ratio.
        clip_low: f64,
        /// ε_high: upper bound `1 + ε_high` of the ratio.
        clip_high: f64,
        /// Dual-clip constant `c > 1` (verl `clip_ratio_c`, default 3.0), or none.
        dual_clip: Option<f64>,
    },
    /// GSPO: one length-normalised sequence ratio per response, differentiated through.
    Gspo {
        /// Left clip (paper: 3e-4).
        clip_low: f64,
        /// Right clip (paper: 4e-4).
        clip_high: f64,
    },
    /// GSPO-token: `s_{i,t} = sg[s_i]·π_θ/sg[π_θ]`, for per-token advantages.
    GspoToken {
        /// Left clip.
        clip_low: f64,
        /// Right clip.
        clip_high: f64,
    },
    /// CISPO: clipped, detached IS weight times `Â·log π_θ`.
    Cispo {
        /// Lower bound `1 − ε_low^IS` of the weight (set large for "no lower bound").
        clip_low: f64,
        /// Upper bound `1 + ε_high^IS` of the weight.
        clip_high: f64,
    },
    /// Clip-Cov: PPO clip, plus `⌊r·N⌋` random tokens with `Cov ∈ [ω_low, ω_high]` whose
    /// PG term is dropped (no gradient). See [`clip_cov_loss`].
    ClipCov {
        /// ε_low of the PPO clip.
        clip_low: f64,
        /// ε_high of the PPO clip.
        clip_high: f64,
        /// r: share of valid tokens to drop (paper and verl: 2e-4).
        clip_cov_ratio: f64,
        /// ω_low: lower covariance bound (default 1).
        cov_low: f64,
        /// ω_high: upper covariance bound (default 5).
        cov_high: f64,
        /// Seed of the random pick among in-range tokens (vary it per step).
        seed: u64,
    },
    /// KL-Cov: importance-weighted PG, plus `β·|log π_θ − log π_old|` on the top `⌊k·N⌋`
    /// tokens by Cov. See [`kl_cov_loss`].
    KlCov {
        /// k: share of valid tokens penalised (paper 7B: 2e-3; verl default 2e-4).
        kl_cov_ratio: f64,
        /// β: coefficient of the `|log-ratio|` penalty (default 1).
        kl_coef: f64,
    },
    /// SAPO soft gate (verl `sapo`); always `seq-mean-token-mean`. See
    /// [`crate::sapo_loss`].
    #[serde(rename = "sapo")]
    Sapo {
        /// Gate temperature for `Â > 0` (verl `tau_pos`).
        tau_pos: f64,
        /// Gate temperature for `Â ≤ 0` (verl `tau_neg`).
        tau_neg: f64,
    },
    /// GMPO geometric-mean ratio (verl `geo_mean`); ignores the aggregation mode. See
    /// [`crate::geo_mean_loss`].
    #[serde(rename = "geo_mean", alias = "geo-mean", alias = "gmpo")]
    GeoMean {
        /// ε_low on the token log-ratio.
        clip_low: f64,
        /// ε_high on the token log-ratio.
        clip_high: f64,
    },
    /// DPPO with a total-variation trust region (verl `dppo_tv`). See [`crate::dppo_loss`].
    #[serde(rename = "dppo_tv", alias = "dppo-tv")]
    DppoTv {
        /// δ_low (verl `clip_ratio_low`).
        clip_low: f64,
        /// δ_high (verl `clip_ratio_high`).
        clip_high: f64,
        /// Truncation `c` of the detached IS ratio (verl `clip_ratio_c`, default 20).
        clip_ratio_c: f64,
    },
    /// DPPO with a binary-KL trust region (verl `dppo_kl`). See [`crate::dppo_loss`].
    #[serde(rename = "dppo_kl", alias = "dppo-kl")]
    DppoKl {
        /// δ_low (verl `clip_ratio_low`).
        clip_low: f64,
        /// δ_high (verl `clip_ratio_high`).
        clip_high: f64,
        /// Truncation `c` of the detached IS ratio (verl `clip_ratio_c`, default 20).
        clip_ratio_c: f64,
    },
    /// GPG: `−Â log π_θ` (verl `gpg`). See [`crate::gpg_loss`].
    #[serde(rename = "gpg")]
    Gpg,
    /// DRO quadratic log-ratio penalty (verl `dro`). See [`crate::dro_loss`].
    #[serde(rename = "dro")]
    Dro {
        /// β > 0 (verl `policy_loss.dro_beta`).
        dro_beta: f64,
    },
    /// verl bypass mode: rollout correction inside the loss, `old_log_probs` = rollout
    /// log-probs (verl `bypass_mode`). See [`crate::bypass_mode_loss`].
    #[serde(rename = "bypass_mode", alias = "bypass-mode")]
    BypassMode {
        /// `ppo_clip` or `reinforce` (verl `rollout_correction.loss_type`).
        loss_type: crate::BypassLossType,
        /// ε_low of `ppo_clip`.
        clip_low: f64,
        /// ε_high of `ppo_clip`.
        clip_high: f64,
        /// Dual-clip constant of `ppo_clip` (verl `clip_ratio_c`, default 3).
        clip_ratio_c: f64,
        /// verl's `rollout_correction` block (field names and strings as verl spells them).
        rollout_correction: crate::RolloutCorrectionSpec,
    },
}

impl PolicyLoss {
    /// PPO with symmetric clip ε (ALGORITHMS.md §3, ε = 0.2 default).
    pub fn ppo(eps: f64) -> Self {
        PolicyLoss::PpoClip {
            clip_low: eps,
            clip_high: eps,
            dual_clip: None,
        }
    }
}

/// Per-token tensors a policy loss reads. All `[B, T]`.
#[derive(Debug, Clone, Copy)]
pub struct PolicyLossInputs<'a> {
    /// `log π_θ` of the sampled tokens; the only differentiable input.
    pub log_probs: &'a Tensor,
    /// `log π_old` (proximal policy); treated as a constant.
    pub old_log_probs: &'a Tensor,
    /// Advantages `Â`; treated as a constant.
    pub advantages: &'a Tensor,
    /// 0/1 loss mask (1 = policy action token).
    pub mask: &'a Tensor,
    /// Optional detached per-token weights (TIS / MIS / IcePop) multiplied into `ℓ`.
    pub token_weights: Option<&'a Tensor>,
}

/// Diagnostics of a policy loss, over valid tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyLossDiagnostics {
    /// Share of tokens whose clipped branch is active: verl `pg_clipfrac`
    /// (= `clipfrac_upper + clipfrac_lower` for PPO).
    pub clipfrac: f32,
    /// Share of tokens clipped at the upper bound (PPO/GSPO: `Â > 0 ∧ r > 1+ε_high`;
    /// CISPO: `r > 1+ε_high`, weight capped).
    pub clipfrac_upper: f32,
    /// Share of tokens clipped at the lower bound (PPO/GSPO: `Â < 0 ∧ r < 1−ε_low`;
    /// CISPO: `r < 1−ε_low`).
    pub clipfrac_lower: f32,
    /// Share of tokens where the dual clip bound `c·|Â|` is active (verl `pg_clipfrac_lower`).
    pub dual_clipfrac: f32,
    /// `mean(log π_old − log π_θ)`: k1 estimate of KL(π_old‖π_θ) (verl `ppo_kl`).
    pub approx_kl: f32,
    /// Mean of the ratio used by the loss (token ratio, or sequence ratio for GSPO).
    pub ratio_mean: f32,
    /// Minimum of the ratio over valid tokens.
    pub ratio_min: f32,
    /// Maximum of the ratio over valid tokens.
    pub ratio_max: f32,
    /// Number of valid tokens.
    pub num_tokens: f32,
    /// Clip-Cov / KL-Cov: number of tokens selected by covariance (dropped, or penalised).
    pub cov_selected: f32,
}

/// A policy loss: the scalar to backpropagate plus diagnostics.
#[derive(Debug, Clone)]
pub struct PolicyLossOutput {
    /// Aggregated scalar loss (differentiable with respect to `log_probs`).
    pub loss: Tensor,
    /// Per-token loss before weighting and aggregation, `[B, T]`.
    pub per_token: Tensor,
    /// Clip fractions, approx KL, ratio statistics.
    pub diagnostics: PolicyLossDiagnostics,
    /// verl's metrics under verl's keys, for the losses ported from verl's registry
    /// (`actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower`; bypass mode adds
    /// `rollout_corr/…`). Empty for the other losses.
    pub metrics: BTreeMap<String, f64>,
}

pub(crate) struct Checked {
    pub(crate) mask_rows: Vec<Vec<f32>>,
}

pub(crate) fn check(func: &'static str, x: &PolicyLossInputs<'_>) -> Result<Checked> {
    let (b, n) = checks::dims2(func, "log_probs", x.log_probs)?;
    checks::same2(func, "old_log_probs", x.old_log_probs, b, n)?;
    checks::same2(func, "advantages", x.advantages, b, n)?;
    if let Some(w) = x.token_weights {
        checks::same2(func, "token_weights", w, b, n)?;
    }
    Ok(Checked {
        mask_rows: checks::mask_rows(func, x.mask, b, n)?,
    })
}

pub(crate) fn check_clip(func: &'static str, low: f64, high: f64) -> Result<()> {
    if !(low >= 0.0 && low.is_finite()) {
        return Err(RlError::invalid(
            func,
            "clip_low",
            format!("must be a finite value >= 0, got {low}"),
        ));
    }
    if !(high >= 0.0 && high.is_finite()) {
        return Err(RlError::invalid(
            func,
            "clip_high",
            format!("must be a finite value >= 0, got {high}"),
        ));
    }
    Ok(())
}

/// Token ratio `exp(clamp(log π_θ − log π_old, ±20))`, differentiable in `log_probs`.
pub fn token_ratio(log_probs: &Tensor, old_log_probs: &Tensor) -> Result<Tensor> {
    Ok(log_probs
        .sub(&old_log_probs.detach())?
        .clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)?
        .exp()?)
}

/// Masked statistics of host rows.
struct Stats {
    mean: f32,
    min: f32,
    max: f32,
}

fn masked_stats(values: &[Vec<f32>], mask: &[Vec<f32>]) -> Stats {
    let (mut sum, mut count, mut min, mut max) = (0.0f64, 0.0f64, f32::INFINITY, f32::NEG_INFINITY);
    for (vr, mr) in values.iter().zip(mask) {
        for (&v, &m) in vr.iter().zip(mr) {
            if m > 0.0 {
                sum += f64::from(v);
                count += 1.0;
                min = min.min(v);
                max = max.max(v);
            }
        }
    }
    if count == 0.0 {
        return Stats {
            mean: 0.0,
            min: 0.0,
            max: 0.0,
        };
    }
    Stats {
        mean: (sum / count) as f32,
        min,
        max,
    }
}

pub(crate) fn masked_frac(mask: &[Vec<f32>], pred: impl Fn(usize, usize) -> bool) -> f32 {
    let (mut hit, mut count) = (0.0f64, 0.0f64);
    for (i, mr) in mask.iter().enumerate() {
        for (t, &m) in mr.iter().enumerate() {
            if m > 0.0 {
                count += 1.0;
                if pred(i, t) {
                    hit += 1.0;
                }
            }
        }
    }
    if count == 0.0 {
        0.0
    } else {
        (hit / count) as f32
    }
}

/// Shared tail: weights, aggregation, ratio/approx-KL diagnostics.
pub(crate) fn finish(
    x: &PolicyLossInputs<'_>,
    c: &Checked,
    per_token: Tensor,
    ratio: &Tensor,
    mut diagnostics: PolicyLossDiagnostics,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    let weighted = match x.token_weights {
        Some(w) => per_token.mul(&w.detach())?,
        None => per_token.clone(),
    };
    let loss = aggregate(&weighted, x.mask, agg, scale)?;
    let ratio_rows = checks::rows(ratio)?;
    let stats = masked_stats(&ratio_rows, &c.mask_rows);
    let neg_kl = checks::rows(&x.old_log_probs.sub(x.log_probs)?)?;
    diagnostics.approx_kl = masked_stats(&neg_kl, &c.mask_rows).mean;
    diagnostics.ratio_mean = stats.mean;
    diagnostics.ratio_min = stats.min;
    diagnostics.ratio_max = stats.max;
    diagnostics.num_tokens = c.mask_rows.iter().flatten().sum();
    Ok(PolicyLossOutput {
        loss,
        per_token,
        diagnostics,
        metrics: BTreeMap::new(),
    })
}

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

/// Hyper-parameters of [`clip_cov_loss`] (see [`PolicyLoss::ClipCov`]).
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

/// Dispatches on [`PolicyLoss`]: one call site for the trainer.
pub fn compute_policy_loss(
    loss: &PolicyLoss,
    x: &PolicyLossInputs<'_>,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    match *loss {
        PolicyLoss::Vanilla => vanilla_pg_loss(x, agg, scale),
        PolicyLoss::PpoClip {
            clip_low,
            clip_high,
            dual_clip,
        } => ppo_clip_loss(x, clip_low, clip_high, dual_clip, agg, scale),
        PolicyLoss::Gspo {
            clip_low,
            clip_high,
        } => gspo_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::GspoToken {
            clip_low,
            clip_high,
        } => gspo_token_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::Cispo {
            clip_low,
            clip_high,
        } => cispo_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::ClipCov {
            clip_low,
            clip_high,
            clip_cov_ratio,
            cov_low,
            cov_high,
            seed,
        } => clip_cov_loss(
            x,
            ClipCovParams {
                clip_low,
                clip_high,
                clip_cov_ratio,
                cov_low,
                cov_high,
                seed,
            },
            agg,
            scale,
        ),
        PolicyLoss::KlCov {
            kl_cov_ratio,
            kl_coef,
        } => kl_cov_loss(x, kl_cov_ratio, kl_coef, agg, scale),
        PolicyLoss::Sapo { tau_pos, tau_neg } => crate::sapo_loss(x, tau_pos, tau_neg, scale),
        PolicyLoss::GeoMean {
            clip_low,
            clip_high,
        } => crate::geo_mean_loss(x, clip_low, clip_high),
        PolicyLoss::DppoTv {
            clip_low,
            clip_high,
            clip_ratio_c,
        } => crate::dppo_loss(
            x,
            crate::DppoDivergence::Tv,
            clip_low,
            clip_high,
            clip_ratio_c,
            agg,
            scale,
        ),
        PolicyLoss::DppoKl {
            clip_low,
            clip_high,
            clip_ratio_c,
        } => crate::dppo_loss(
            x,
            crate::DppoDivergence::BinaryKl,
            clip_low,
            clip_high,
            clip_ratio_c,
            agg,
            scale,
        ),
        PolicyLoss::Gpg => crate::gpg_loss(x, agg, scale),
        PolicyLoss::Dro { dro_beta } => crate::dro_loss(x, dro_beta, agg, scale),
        PolicyLoss::BypassMode {
            loss_type,
            clip_low,
            clip_high,
            clip_ratio_c,
            rollout_correction,
        } => crate::bypass_mode_loss(
            x,
            loss_type,
            clip_low,
            clip_high,
            clip_ratio_c,
            &rollout_correction,
            agg,
            scale,
        ),
    }
}
