//! Importance weights as ALGORITHMS.md §13 writes them: TIS (truncated), MIS (token, sequence
//! or geometric level) and IcePop, chosen by [`RolloutCorrection`], and the mismatch metrics
//! that show how far the engine drifted from the trainer.
//!
//! Where it sits: the engine's sampling log-probs `log π_rollout` and the trainer's
//! recomputation with the same weights `log π_old`, both `[B, T]` → detached per-token weights
//! `w` (0 on masked tokens) → [`crate::policy_loss::PolicyLossInputs::token_weights`], which
//! multiplies them into the per-token policy loss before aggregation. `ρ_t = π_old/π_rollout`.
//! verl's configured form of the same correction (with rejection) is [`super::apply`].

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::{Result, RlError};

/// Clamp of log-ratios before exponentiation.
const LOG_CLAMP: f32 = 20.0;

/// Which quantity MIS thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MisLevel {
    /// Per token: keep `ρ_t` if in bounds, else 0.
    Token,
    /// Per sequence: `ρ(y) = Π_t ρ_t`; keep `ρ(y)` on every token if in bounds, else reject.
    Sequence,
    /// Geometric mean `(Π_t ρ_t)^{1/|y|}`: pure rejection (weight 1 if in bounds, else 0).
    Geometric,
}

/// The rollout correction a trainer selects by config.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RolloutCorrection {
    /// No correction (weights all 1 on valid tokens).
    None,
    /// Truncated IS: `min(ρ_t, cap)`.
    Tis {
        /// Truncation C (FlashRL / verl default 2.0).
        cap: f64,
    },
    /// Masked IS. Orientation: `low`/`high` bound `ρ = π_train/π_rollout` (agentrl's
    /// convention). verl's `token_k1` / `seq_*_k1` strings bound the reciprocal
    /// `π_rollout/π_train`; use [`super::config::RolloutCorrectionConfig`] for verl's meaning.
    Mis {
        /// Token, sequence or geometric level.
        level: MisLevel,
        /// Lower bound `C_low` on the thresholded ratio `ρ = π_train/π_rollout`.
        low: f64,
        /// Upper bound `C_high` on `ρ = π_train/π_rollout`.
        high: f64,
        /// Token veto: reject a whole sequence if any `ρ_t` is below this.
        veto: Option<f64>,
    },
    /// IcePop double-sided token mask `M(ρ_t) = ρ_t if ρ_t ∈ [low, high] else 0`.
    IcePop {
        /// α.
        low: f64,
        /// β.
        high: f64,
    },
}

/// Per-token weights plus what they rejected.
#[derive(Debug, Clone)]
pub struct CorrectionWeights {
    /// Detached `[B, T]` weights, 0 on masked tokens.
    pub weights: Tensor,
    /// Share of valid tokens whose weight is 0 because they were rejected/masked.
    pub rejected_token_frac: f32,
    /// Share of sequences (with ≥ 1 valid token) fully rejected.
    pub rejected_sequence_frac: f32,
}

struct Prepared {
    log_rho: Vec<Vec<f32>>,
    mask: Vec<Vec<f32>>,
}

fn prepare(
    func: &'static str,
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
) -> Result<Prepared> {
    let (b, n) = checks::dims2(func, "train_log_probs", train_log_probs)?;
    checks::same2(func, "rollout_log_probs", rollout_log_probs, b, n)?;
    let mask = checks::mask_rows(func, mask, b, n)?;
    let tr = checks::rows(train_log_probs)?;
    let ro = checks::rows(rollout_log_probs)?;
    let mut log_rho = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        for t in 0..n {
            if mask[i][t] > 0.0 {
                let d = tr[i][t] - ro[i][t];
                if !d.is_finite() {
                    return Err(RlError::NonFinite {
                        func,
                        arg: "train_log_probs - rollout_log_probs",
                        index: i * n + t,
                        value: f64::from(d),
                    });
                }
                log_rho[i][t] = d;
            }
        }
    }
    Ok(Prepared { log_rho, mask })
}

fn check_bounds(func: &'static str, low: f64, high: f64) -> Result<()> {
    if !(low >= 0.0 && high > low && high.is_finite()) {
        return Err(RlError::invalid(
            func,
            "low/high",
            format!("need 0 <= low < high < inf, got [{low}, {high}]"),
        ));
    }
    Ok(())
}

fn finish(p: &Prepared, weights: Vec<Vec<f32>>, like: &Tensor) -> Result<CorrectionWeights> {
    let (mut valid, mut rejected, mut seqs, mut rejected_seqs) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (wr, mr) in weights.iter().zip(&p.mask) {
        let n_valid = mr.iter().filter(|&&m| m > 0.0).count();
        let n_rej = wr
            .iter()
            .zip(mr)
            .filter(|(&w, &m)| m > 0.0 && w == 0.0)
            .count();
        valid += n_valid as f64;
        rejected += n_rej as f64;
        if n_valid > 0 {
            seqs += 1.0;
            if n_rej == n_valid {
                rejected_seqs += 1.0;
            }
        }
    }
    let frac = |a: f64, b: f64| if b > 0.0 { (a / b) as f32 } else { 0.0 };
    Ok(CorrectionWeights {
        weights: checks::from_rows(&weights, like)?.detach(),
        rejected_token_frac: frac(rejected, valid),
        rejected_sequence_frac: frac(rejected_seqs, seqs),
    })
}

/// TIS (ALGORITHMS.md §13; Yao, Liu et al. 2025, "Your Efficient RL Framework Secretly Brings
/// You Off-Policy RL Training"): `w_t = min(π_old/π_rollout, C)`, detached.
pub fn tis_weights(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
    cap: f64,
) -> Result<CorrectionWeights> {
    const F: &str = "tis_weights";
    if !(cap > 0.0 && cap.is_finite()) {
        return Err(RlError::invalid(
            F,
            "cap",
            format!("must be finite and > 0, got {cap}"),
        ));
    }
    let p = prepare(F, train_log_probs, rollout_log_probs, mask)?;
    let w = p
        .log_rho
        .iter()
        .zip(&p.mask)
        .map(|(lr, mr)| {
            lr.iter()
                .zip(mr)
                .map(|(&l, &m)| {
                    if m > 0.0 {
                        (f64::from(l.clamp(-LOG_CLAMP, LOG_CLAMP)).exp().min(cap)) as f32
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    finish(&p, w, train_log_probs)
}

/// MIS (ALGORITHMS.md §13; Liu, Li et al. 2025, "When Speed Kills Stability"; verl
/// `seq_is_rs` / `geo_rs`): reject (weight 0) outside `[low, high]`, otherwise keep the ratio
/// (token/sequence) or weight 1 (geometric, a pure rejection filter). `veto`: reject a whole
/// sequence if any `ρ_t < veto`.
///
/// Orientation: `[low, high]` bounds `ρ = π_train/π_rollout`. verl's `k1` rejection strings
/// (`token_k1` at `"lo_hi"`) bound `π_rollout/π_train` instead; with `"0.5_1.5"` verl keeps
/// `1/1.5 ≤ ρ ≤ 2` where this keeps `0.5 ≤ ρ ≤ 1.5`. For verl's meaning use
/// [`super::apply::rollout_correction_and_rejection`].
pub fn mis_weights(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
    level: MisLevel,
    low: f64,
    high: f64,
    veto: Option<f64>,
) -> Result<CorrectionWeights> {
    const F: &str = "mis_weights";
    check_bounds(F, low, high)?;
    let p = prepare(F, train_log_probs, rollout_log_probs, mask)?;
    let (ln_low, ln_high) = (low.ln(), high.ln());
    let in_bounds = |l: f64| l >= ln_low && l <= ln_high;
    let mut out = Vec::with_capacity(p.mask.len());
    for (lr, mr) in p.log_rho.iter().zip(&p.mask) {
        let valid: Vec<f64> = lr
            .iter()
            .zip(mr)
            .filter(|(_, &m)| m > 0.0)
            .map(|(&l, _)| f64::from(l))
            .collect();
        let vetoed = veto.is_some_and(|v| valid.iter().any(|&l| l.exp() < v));
        let row: Vec<f32> = match level {
            MisLevel::Token => lr
                .iter()
                .zip(mr)
                .map(|(&l, &m)| {
                    let l = f64::from(l);
                    if m > 0.0 && !vetoed && in_bounds(l) {
                        l.exp() as f32
                    } else {
                        0.0
                    }
                })
                .collect(),
            MisLevel::Sequence | MisLevel::Geometric => {
                let sum: f64 = valid.iter().sum();
                let stat = if level == MisLevel::Sequence {
                    sum
                } else {
                    sum / (valid.len().max(1) as f64)
                };
                let keep = !valid.is_empty() && !vetoed && in_bounds(stat);
                let w = if !keep {
                    0.0
                } else if level == MisLevel::Sequence {
                    stat.clamp(-f64::from(LOG_CLAMP), f64::from(LOG_CLAMP))
                        .exp() as f32
                } else {
                    1.0
                };
                mr.iter().map(|&m| if m > 0.0 { w } else { 0.0 }).collect()
            }
        };
        out.push(row);
    }
    finish(&p, out, train_log_probs)
}

/// IcePop (ALGORITHMS.md §13; Ling team, Ring-1T, arXiv:2510.18855): the double-sided token
/// mask with calibration `M(ρ_t) = ρ_t if ρ_t ∈ [α, β] else 0` — token-level MIS without veto.
pub fn icepop_weights(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
    low: f64,
    high: f64,
) -> Result<CorrectionWeights> {
    mis_weights(
        train_log_probs,
        rollout_log_probs,
        mask,
        MisLevel::Token,
        low,
        high,
        None,
    )
}

/// Dispatches on [`RolloutCorrection`].
pub fn rollout_correction_weights(
    correction: &RolloutCorrection,
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
) -> Result<CorrectionWeights> {
    match *correction {
        RolloutCorrection::None => {
            let p = prepare(
                "rollout_correction_weights",
                train_log_probs,
                rollout_log_probs,
                mask,
            )?;
            let w = p.mask.clone();
            finish(&p, w, train_log_probs)
        }
        RolloutCorrection::Tis { cap } => {
            tis_weights(train_log_probs, rollout_log_probs, mask, cap)
        }
        RolloutCorrection::Mis {
            level,
            low,
            high,
            veto,
        } => mis_weights(
            train_log_probs,
            rollout_log_probs,
            mask,
            level,
            low,
            high,
            veto,
        ),
        RolloutCorrection::IcePop { low, high } => {
            icepop_weights(train_log_probs, rollout_log_probs, mask, low, high)
        }
    }
}

/// Engine/trainer mismatch metrics over valid tokens (ALGORITHMS.md §13).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MismatchMetrics {
    /// `mean |log π_rollout − log π_train|`.
    pub mean_abs_log_prob_diff: f32,
    /// `max |log π_rollout − log π_train|`.
    pub max_abs_log_prob_diff: f32,
    /// `KL_k1 = mean(log π_rollout − log π_train)`.
    pub kl_k1: f32,
    /// `KL_k3 = mean(ρ − log ρ − 1)`, `ρ = π_train/π_rollout`.
    pub kl_k3: f32,
    /// `exp(−mean log ρ)`.
    pub ppl_ratio: f32,
    /// `E[ρ²] − 1` per token.
    pub chi2_token: f32,
    /// Share of valid tokens with `ρ_t ∉ [low, high]`.
    pub frac_outside_bounds: f32,
    /// Pearson correlation of the token probabilities `π_train` and `π_rollout`.
    pub prob_correlation: f32,
    /// Number of valid tokens.
    pub num_tokens: f32,
}

/// Computes [`MismatchMetrics`]; `low`/`high` are the bounds whose violation rate is reported.
pub fn mismatch_metrics(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
    low: f64,
    high: f64,
) -> Result<MismatchMetrics> {
    const F: &str = "mismatch_metrics";
    check_bounds(F, low, high)?;
    let p = prepare(F, train_log_probs, rollout_log_probs, mask)?;
    let tr = checks::rows(train_log_probs)?;
    let ro = checks::rows(rollout_log_probs)?;
    let (mut n, mut abs_sum, mut abs_max, mut k1, mut k3, mut log_rho_sum, mut rho2, mut outside) = (
        0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64,
    );
    let (mut pt, mut pr) = (Vec::new(), Vec::new());
    for (i, mr) in p.mask.iter().enumerate() {
        for (t, &m) in mr.iter().enumerate() {
            if m == 0.0 {
                continue;
            }
            let l = f64::from(p.log_rho[i][t]).clamp(-f64::from(LOG_CLAMP), f64::from(LOG_CLAMP));
            let rho = l.exp();
            n += 1.0;
            abs_sum += l.abs();
            abs_max = abs_max.max(l.abs());
            k1 += -l;
            k3 += rho - l - 1.0;
            log_rho_sum += l;
            rho2 += rho * rho;
            if rho < low || rho > high {
                outside += 1.0;
            }
            pt.push(f64::from(tr[i][t]).exp());
            pr.push(f64::from(ro[i][t]).exp());
        }
    }
    if n == 0.0 {
        return Ok(MismatchMetrics::default());
    }
    let corr = {
        let (mt, mr) = (pt.iter().sum::<f64>() / n, pr.iter().sum::<f64>() / n);
        let cov: f64 = pt.iter().zip(&pr).map(|(a, b)| (a - mt) * (b - mr)).sum();
        let vt: f64 = pt.iter().map(|a| (a - mt).powi(2)).sum();
        let vr: f64 = pr.iter().map(|b| (b - mr).powi(2)).sum();
        if vt > 0.0 && vr > 0.0 {
            cov / (vt.sqrt() * vr.sqrt())
        } else {
            1.0
        }
    };
    Ok(MismatchMetrics {
        mean_abs_log_prob_diff: (abs_sum / n) as f32,
        max_abs_log_prob_diff: abs_max as f32,
        kl_k1: (k1 / n) as f32,
        kl_k3: (k3 / n) as f32,
        ppl_ratio: (-log_rho_sum / n).exp() as f32,
        chi2_token: (rho2 / n - 1.0) as f32,
        frac_outside_bounds: (outside / n) as f32,
        prob_correlation: corr as f32,
        num_tokens: n as f32,
    })
}
