//! What every policy loss takes and gives: the `[B, T]` inputs ([`PolicyLossInputs`]), the
//! minimised scalar with its diagnostics ([`PolicyLossOutput`]), and the checks and the shared
//! tail (token weights, aggregation, ratio statistics) each loss ends with.
//!
//! The bottom of [`super`]: every loss module builds on this one and on
//! [`crate::aggregation`], and this one knows no loss. Masked tokens get exactly zero
//! gradient; optional detached `token_weights` (TIS / MIS / IcePop, from
//! [`crate::rollout_correction`]) multiply the per-token loss before aggregation.

use std::collections::BTreeMap;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::aggregation::{aggregate, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

/// Clamp applied to token log-ratios before exponentiation (verl).
pub const LOG_RATIO_CLAMP: f64 = 20.0;

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

// verl's metric keys and small checks, shared by the losses ported from its registry
// ([`super::trust_region`], [`super::bypass`]).

/// verl's three policy-loss metrics.
pub(crate) fn verl_metrics(
    clipfrac: f32,
    ppo_kl: f32,
    clipfrac_lower: f32,
) -> BTreeMap<String, f64> {
    BTreeMap::from([
        ("actor/pg_clipfrac".to_string(), f64::from(clipfrac)),
        ("actor/ppo_kl".to_string(), f64::from(ppo_kl)),
        (
            "actor/pg_clipfrac_lower".to_string(),
            f64::from(clipfrac_lower),
        ),
    ])
}

type HostRows = Vec<Vec<f32>>;

/// `(log π_θ, log π_old, Â)` as host rows.
pub(crate) fn host_rows(x: &PolicyLossInputs<'_>) -> Result<(HostRows, HostRows, HostRows)> {
    Ok((
        checks::rows(x.log_probs)?,
        checks::rows(x.old_log_probs)?,
        checks::rows(x.advantages)?,
    ))
}

pub(crate) fn positive(func: &'static str, arg: &'static str, v: f64) -> Result<()> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(RlError::invalid(
            func,
            arg,
            format!("must be finite and > 0, got {v}"),
        ))
    }
}

pub(crate) fn with_metrics(
    mut out: PolicyLossOutput,
    metrics: BTreeMap<String, f64>,
) -> PolicyLossOutput {
    out.metrics = metrics;
    out
}
