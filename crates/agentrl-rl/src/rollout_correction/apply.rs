//! verl's rollout correction applied to a batch, with verl's metric names: IS weights at token
//! or sequence level (truncated, IcePop-masked, optionally batch-normalised), the rejection
//! filters of a [`RolloutCorrectionSpec`], and the off-policy diagnostics (ALGORITHMS.md §13;
//! verl `trainer/ppo/rollout_corr_helper.py`, `docs/algo/rollout_corr_math.md`).
//!
//! Data flow: the trainer's `log π_train` (verl `old_log_probs`, or the current `log π_θ` in
//! bypass mode) and the engine's `log π_rollout`, both `[B, T]`, plus the loss mask →
//! [`rollout_correction_and_rejection`] → detached IS weights (`PolicyLossInputs::token_weights`),
//! a *modified mask* (rejected tokens set to 0: use it as the loss mask, so rejected tokens also
//! leave every denominator, as verl does) and `rollout_corr/…` metrics.
//!
//! `log ρ_t = log π_train − log π_rollout`. The rejection statistics are
//! `k1 = −log ρ`, `k2 = ½(log ρ)²`, `k3 = ρ − 1 − log ρ` (log ρ clamped to ±20). The k1
//! orientation of the thresholds is verl's (see [`super::config`]).
//!
//! Differences from verl: none in value. Errors replace verl's exceptions (same conditions);
//! torch's `distributed_masked_mean` of the batch-normalisation (multi-rank) is not modelled:
//! pass the whole global batch to get the same factor.

use std::collections::BTreeMap;

use candle_core::Tensor;

use super::config::{IsLevel, RolloutCorrectionSpec, RsFilter, RsOption, SAFETY_BOUND};
use crate::checks;
use crate::error::{Result, RlError};

/// IS weights, modified mask and metrics of [`rollout_correction_and_rejection`].
#[derive(Debug, Clone)]
pub struct RolloutCorrectionOutput {
    /// Detached `[B, T]` IS weights (0 on masked tokens), or `None` when `rollout_is` is off.
    /// After batch normalisation if requested.
    pub weights: Option<Tensor>,
    /// The loss mask with rejected tokens set to 0 (equal to the input without rejection).
    pub mask: Tensor,
    /// Every metric verl logs, under verl's key (`rollout_corr/…`).
    pub metrics: BTreeMap<String, f64>,
}

/// Host rows of the inputs, in f64.
struct Rows {
    log_ratio: Vec<Vec<f64>>,
    train: Vec<Vec<f64>>,
    rollout: Vec<Vec<f64>>,
    m: Vec<Vec<f64>>,
    count: Vec<f64>,
}

impl Rows {
    fn total(&self) -> f64 {
        self.count.iter().sum()
    }

    /// verl `masked_mean` over all tokens: `Σ m v / (Σ m + 1e-8)`.
    fn mm(&self, v: impl Fn(usize, usize) -> f64) -> f64 {
        let mut s = 0.0;
        for (i, r) in self.m.iter().enumerate() {
            for (t, &w) in r.iter().enumerate() {
                if w > 0.0 {
                    s += v(i, t);
                }
            }
        }
        s / (self.total() + 1e-8)
    }

    /// Per-row masked mean `Σ_t m v / (Σ_t m + 1e-8)`.
    fn row_mean(&self, i: usize, v: impl Fn(usize) -> f64) -> f64 {
        self.row_sum(i, v) / (self.count[i] + 1e-8)
    }

    fn row_sum(&self, i: usize, v: impl Fn(usize) -> f64) -> f64 {
        self.m[i]
            .iter()
            .enumerate()
            .filter(|(_, &w)| w > 0.0)
            .map(|(t, _)| v(t))
            .sum()
    }

    fn valid(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.m.iter().enumerate().flat_map(|(i, r)| {
            r.iter()
                .enumerate()
                .filter(|(_, &w)| w > 0.0)
                .map(move |(t, _)| (i, t))
        })
    }
}

fn prepare(
    func: &'static str,
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
) -> Result<Rows> {
    let (b, n) = checks::dims2(func, "train_log_probs", train_log_probs)?;
    checks::same2(func, "rollout_log_probs", rollout_log_probs, b, n)?;
    let m = checks::mask_rows(func, mask, b, n)?;
    let to64 = |r: Vec<Vec<f32>>| -> Vec<Vec<f64>> {
        r.into_iter()
            .map(|x| x.into_iter().map(f64::from).collect())
            .collect()
    };
    let train = to64(checks::rows(train_log_probs)?);
    let rollout = to64(checks::rows(rollout_log_probs)?);
    let m = to64(m);
    let count: Vec<f64> = m.iter().map(|r| r.iter().sum()).collect();
    if count.iter().sum::<f64>() == 0.0 {
        return Err(RlError::Empty {
            func,
            what: "`mask` must contain at least one valid token".into(),
        });
    }
    let mut log_ratio = vec![vec![0.0f64; n]; b];
    for i in 0..b {
        for t in 0..n {
            if m[i][t] > 0.0 {
                let d = train[i][t] - rollout[i][t];
                if !d.is_finite() {
                    return Err(RlError::NonFinite {
                        func,
                        arg: "train_log_probs - rollout_log_probs",
                        index: i * n + t,
                        value: d,
                    });
                }
                log_ratio[i][t] = d;
            }
        }
    }
    Ok(Rows {
        log_ratio,
        train,
        rollout,
        m,
        count,
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// torch `std` (unbiased) of a slice; 0 for fewer than 2 values (verl's guard).
fn std_unbiased(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mu = mean(v);
    (v.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0)).sqrt()
}

fn max_of(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(f64::NEG_INFINITY, f64::max)
}

fn min_of(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(f64::INFINITY, f64::min)
}

fn frac(v: &[bool]) -> f64 {
    v.iter().filter(|&&x| x).count() as f64 / v.len() as f64
}

/// verl `compute_rollout_correction_weights` + `compute_is_metrics` (keys without prefix).
fn is_weights(
    p: &Rows,
    level: IsLevel,
    upper: f64,
    lower: Option<f64>,
    normalize: bool,
    metrics: &mut BTreeMap<String, f64>,
) -> Vec<Vec<f64>> {
    let (b, n) = (p.m.len(), p.m[0].len());
    let seq_log: Vec<f64> = (0..b)
        .map(|i| p.row_sum(i, |t| p.log_ratio[i][t]))
        .collect();
    let raw: Vec<Vec<f64>> = (0..b)
        .map(|i| {
            (0..n)
                .map(|t| {
                    let l = match level {
                        IsLevel::Token => p.log_ratio[i][t],
                        IsLevel::Sequence => seq_log[i],
                    };
                    l.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp() * p.m[i][t]
                })
                .collect()
        })
        .collect();
    let mut w: Vec<Vec<f64>> = raw
        .iter()
        .map(|r| {
            r.iter()
                .map(|&x| match lower {
                    None => x.min(upper),
                    Some(lo) => {
                        if x >= lo && x <= upper {
                            x
                        } else {
                            0.0
                        }
                    }
                })
                .collect()
        })
        .collect();
    let lower_thr = lower.unwrap_or(1.0 / upper);
    let mut put = |k: &str, v: f64| {
        metrics.insert(format!("rollout_is_{k}"), v);
    };
    match level {
        IsLevel::Sequence => {
            let lmax = max_of(seq_log.iter().copied());
            let lmin = min_of(seq_log.iter().copied());
            put("max", lmax.min(SAFETY_BOUND).exp());
            put("min", lmin.exp());
            put("mean", p.mm(|i, t| w[i][t]));
            let hi: Vec<bool> = seq_log.iter().map(|&l| l > upper.ln()).collect();
            let lo: Vec<bool> = seq_log.iter().map(|&l| l < lower_thr.ln()).collect();
            put("ratio_fraction_high", frac(&hi));
            put("ratio_fraction_low", frac(&lo));
        }
        IsLevel::Token => {
            put("mean", p.mm(|i, t| w[i][t]));
            put(
                "ratio_fraction_high",
                p.mm(|i, t| f64::from(u8::from(raw[i][t] > upper))),
            );
            put(
                "ratio_fraction_low",
                p.mm(|i, t| f64::from(u8::from(raw[i][t] < lower_thr))),
            );
            put("max", max_of(p.valid().map(|(i, t)| w[i][t])));
            put("min", min_of(p.valid().map(|(i, t)| w[i][t])));
        }
    }
    let clamped = |i: usize, t: usize| w[i][t].clamp(0.0, upper);
    if p.total() > 1.0 {
        let mu = p.mm(clamped);
        let var = p.mm(|i, t| clamped(i, t).powi(2)) - mu * mu;
        put("std", var.max(0.0).sqrt());
    } else {
        put("std", 0.0);
    }
    let mu = p.mm(clamped);
    put(
        "eff_sample_size",
        1.0 / p.mm(|i, t| (clamped(i, t) / (mu + 1e-8)).powi(2)),
    );
    let seq_w: Vec<f64> = (0..b).map(|i| p.row_mean(i, |t| w[i][t])).collect();
    put("seq_mean", mean(&seq_w));
    put("seq_std", std_unbiased(&seq_w));
    put("seq_max", max_of(seq_w.iter().copied()));
    put("seq_min", min_of(seq_w.iter().copied()));
    put(
        "seq_max_deviation",
        max_of(seq_w.iter().map(|x| (x - 1.0).abs())),
    );
    let raw_seq: Vec<f64> = (0..b).map(|i| p.row_mean(i, |t| raw[i][t])).collect();
    put(
        "seq_fraction_high",
        frac(&raw_seq.iter().map(|&x| x > upper).collect::<Vec<_>>()),
    );
    put(
        "seq_fraction_low",
        frac(&raw_seq.iter().map(|&x| x < lower_thr).collect::<Vec<_>>()),
    );
    if let Some(lo) = lower {
        put(
            "oob_ratio",
            p.mm(|i, t| f64::from(u8::from(raw[i][t] < lo || raw[i][t] > upper))),
        );
    }
    if normalize {
        let wmean = match level {
            IsLevel::Token => p.mm(|i, t| w[i][t]),
            IsLevel::Sequence => {
                let valid = p.count.iter().filter(|&&c| c > 0.0).count() as f64;
                let s: f64 = (0..b).filter(|&i| p.count[i] > 0.0).map(|i| seq_w[i]).sum();
                s / valid.max(1e-8)
            }
        };
        if wmean > 1e-8 {
            for r in &mut w {
                for x in r.iter_mut() {
                    *x /= wmean;
                }
            }
            put("batch_norm_factor", wmean);
        } else {
            put("batch_norm_factor", 1.0);
        }
    }
    w
}

/// verl `compute_rollout_rejection_mask` + `compute_rs_metrics`: the 0/1 keep mask over all
/// positions (keys without prefix).
fn rejection(p: &Rows, filters: &[RsFilter], metrics: &mut BTreeMap<String, f64>) -> Vec<Vec<f64>> {
    let (b, n) = (p.m.len(), p.m[0].len());
    let safe = |i: usize, t: usize| p.log_ratio[i][t].clamp(-SAFETY_BOUND, SAFETY_BOUND);
    let k1 = |i: usize, t: usize| -safe(i, t);
    let k2 = |i: usize, t: usize| 0.5 * safe(i, t).powi(2);
    let k3 = |i: usize, t: usize| safe(i, t).exp() - 1.0 - safe(i, t);
    let seq_valid: Vec<bool> = p.count.iter().map(|&c| c > 0.0).collect();
    let mut combined = vec![vec![1.0f64; n]; b];
    for f in filters {
        let name = f.option.name();
        let stat_fn: &dyn Fn(usize, usize) -> f64 = match f.option {
            RsOption::TokenK1 | RsOption::SeqSumK1 | RsOption::SeqMeanK1 => &k1,
            RsOption::TokenK2 | RsOption::SeqSumK2 | RsOption::SeqMeanK2 | RsOption::SeqMaxK2 => {
                &k2
            }
            _ => &k3,
        };
        let (lo_m, hi_m) = match f.lower {
            Some(lo) => (lo.ln(), f.upper.ln()),
            None => (0.0, f.upper),
        };
        let keep_v = |v: f64| {
            if f.option.is_k1() {
                v >= lo_m && v <= hi_m
            } else {
                v <= hi_m
            }
        };
        // Per-token statistic (sequence options: the sequence's value on every position).
        let per_seq: Option<Vec<f64>> = match f.option {
            RsOption::SeqSumK1 | RsOption::SeqSumK2 | RsOption::SeqSumK3 => {
                Some((0..b).map(|i| p.row_sum(i, |t| stat_fn(i, t))).collect())
            }
            RsOption::SeqMeanK1 | RsOption::SeqMeanK2 | RsOption::SeqMeanK3 => {
                Some((0..b).map(|i| p.row_mean(i, |t| stat_fn(i, t))).collect())
            }
            RsOption::SeqMaxK2 | RsOption::SeqMaxK3 => Some(
                (0..b)
                    .map(|i| {
                        if seq_valid[i] {
                            max_of(
                                p.valid()
                                    .filter(|&(r, _)| r == i)
                                    .map(|(_, t)| stat_fn(i, t)),
                            )
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            ),
            _ => None,
        };
        let stat = |i: usize, t: usize| match &per_seq {
            Some(s) => s[i],
            None => stat_fn(i, t),
        };
        let keep: Vec<Vec<bool>> = (0..b)
            .map(|i| (0..n).map(|t| keep_v(stat(i, t))).collect())
            .collect();
        for i in 0..b {
            for t in 0..n {
                if !keep[i][t] {
                    combined[i][t] = 0.0;
                }
            }
        }
        // Metrics (verl compute_rs_metrics).
        let prefix = format!("rollout_rs_{name}");
        let mut put = |k: &str, v: f64| {
            metrics.insert(format!("{prefix}_{k}"), v);
        };
        let seq_values: Vec<f64> = match &per_seq {
            Some(s) => s.clone(),
            None => (0..b).map(|i| p.row_mean(i, |t| stat(i, t))).collect(),
        };
        let sv: Vec<f64> = (0..b)
            .filter(|&i| seq_valid[i])
            .map(|i| seq_values[i])
            .collect();
        let is_seq = !f.option.is_token();
        put("mean", p.mm(stat));
        if is_seq && !sv.is_empty() {
            put("max", max_of(sv.iter().copied()));
            put("min", min_of(sv.iter().copied()));
            put(
                "fraction_high",
                frac(&sv.iter().map(|&v| v > hi_m).collect::<Vec<_>>()),
            );
            put(
                "fraction_low",
                if f.option.is_k1() {
                    frac(&sv.iter().map(|&v| v < lo_m).collect::<Vec<_>>())
                } else {
                    0.0
                },
            );
        } else {
            put("max", max_of(p.valid().map(|(i, t)| stat(i, t))));
            put("min", min_of(p.valid().map(|(i, t)| stat(i, t))));
            put(
                "fraction_high",
                p.mm(|i, t| f64::from(u8::from(stat(i, t) > hi_m))),
            );
            put(
                "fraction_low",
                if f.option.is_k1() {
                    p.mm(|i, t| f64::from(u8::from(stat(i, t) < lo_m)))
                } else {
                    0.0
                },
            );
        }
        if p.total() > 1.0 {
            let c = |i: usize, t: usize| stat(i, t).max(lo_m).min(hi_m);
            let mu = p.mm(c);
            let var = p.mm(|i, t| c(i, t).powi(2)) - mu * mu;
            put("std", var.max(0.0).sqrt());
        } else {
            put("std", 0.0);
        }
        if sv.is_empty() {
            for k in [
                "seq_mean",
                "seq_std",
                "seq_max",
                "seq_min",
                "seq_max_deviation",
                "seq_fraction_high",
                "seq_fraction_low",
            ] {
                put(k, 0.0);
            }
        } else {
            put("seq_mean", mean(&sv));
            put("seq_std", std_unbiased(&sv));
            put("seq_max", max_of(sv.iter().copied()));
            put("seq_min", min_of(sv.iter().copied()));
            put("seq_max_deviation", max_of(sv.iter().map(|v| v.abs())));
            put(
                "seq_fraction_high",
                frac(&sv.iter().map(|&v| v > hi_m).collect::<Vec<_>>()),
            );
            if f.option.is_k1() {
                put(
                    "seq_fraction_low",
                    frac(&sv.iter().map(|&v| v < lo_m).collect::<Vec<_>>()),
                );
            }
        }
        put(
            "masked_fraction",
            p.mm(|i, t| if keep[i][t] { 0.0 } else { 1.0 }),
        );
        let nvalid = seq_valid.iter().filter(|&&v| v).count();
        let seq_masked = (0..b)
            .filter(|&i| seq_valid[i])
            .filter(|&i| (0..n).any(|t| !keep[i][t] && p.m[i][t] > 0.0))
            .count();
        put(
            "seq_masked_fraction",
            if nvalid > 0 {
                seq_masked as f64 / nvalid as f64
            } else {
                0.0
            },
        );
    }
    metrics.insert(
        "rollout_rs_masked_fraction".into(),
        p.mm(|i, t| 1.0 - combined[i][t]),
    );
    let has_masked: Vec<bool> = (0..b)
        .map(|i| (0..n).any(|t| p.m[i][t] > 0.0 && combined[i][t] <= 0.5))
        .collect();
    metrics.insert("rollout_rs_seq_masked_fraction".into(), frac(&has_masked));
    combined
}

/// verl `compute_offpolicy_metrics` (keys without prefix). Per-sequence means average over
/// *all* `B` rows, fully masked ones included (their mean log-prob is 0), as in verl.
fn offpolicy(p: &Rows, metrics: &mut BTreeMap<String, f64>) {
    let b = p.m.len();
    let mut put = |k: &str, v: f64| {
        metrics.insert(k.to_string(), v);
    };
    let mlp_train: Vec<f64> = (0..b).map(|i| p.row_mean(i, |t| p.train[i][t])).collect();
    let mlp_roll: Vec<f64> = (0..b).map(|i| p.row_mean(i, |t| p.rollout[i][t])).collect();
    put(
        "training_ppl",
        mean(&mlp_train.iter().map(|x| (-x).exp()).collect::<Vec<_>>()),
    );
    put(
        "training_log_ppl",
        mean(&mlp_train.iter().map(|x| -x).collect::<Vec<_>>()),
    );
    put("kl", p.mm(|i, t| p.rollout[i][t] - p.train[i][t]));
    put(
        "k3_kl",
        p.mm(|i, t| {
            let l = p.train[i][t] - p.rollout[i][t];
            l.exp() - l - 1.0
        }),
    );
    put(
        "rollout_ppl",
        mean(&mlp_roll.iter().map(|x| (-x).exp()).collect::<Vec<_>>()),
    );
    put(
        "rollout_log_ppl",
        mean(&mlp_roll.iter().map(|x| -x).collect::<Vec<_>>()),
    );
    let diff: Vec<f64> = mlp_roll
        .iter()
        .zip(&mlp_train)
        .map(|(r, t)| r - t)
        .collect();
    put("log_ppl_diff", mean(&diff));
    put(
        "log_ppl_abs_diff",
        mean(&diff.iter().map(|x| x.abs()).collect::<Vec<_>>()),
    );
    put("log_ppl_diff_max", max_of(diff.iter().copied()));
    put("log_ppl_diff_min", min_of(diff.iter().copied()));
    put(
        "ppl_ratio",
        mean(&diff.iter().map(|x| x.exp()).collect::<Vec<_>>()),
    );
    put(
        "chi2_token",
        p.mm(|i, t| (2.0 * p.log_ratio[i][t].clamp(-SAFETY_BOUND, SAFETY_BOUND)).exp()) - 1.0,
    );
    let chi2_seq: Vec<f64> = (0..b)
        .map(|i| {
            let s = p.row_sum(i, |t| p.log_ratio[i][t]);
            (2.0 * s.clamp(-SAFETY_BOUND, SAFETY_BOUND)).exp()
        })
        .collect();
    put("chi2_seq", mean(&chi2_seq) - 1.0);
}

fn prefixed(m: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    m.into_iter()
        .map(|(k, v)| (format!("rollout_corr/{k}"), v))
        .collect()
}

fn to_tensor(rows: &[Vec<f64>], like: &Tensor) -> Result<Tensor> {
    let r: Vec<Vec<f32>> = rows
        .iter()
        .map(|x| x.iter().map(|&v| v as f32).collect())
        .collect();
    Ok(checks::from_rows(&r, like)?.detach())
}

/// verl `compute_rollout_correction_and_rejection_mask` (ALGORITHMS.md §13 TIS / MIS /
/// IcePop; Yao, Liu et al. 2025 fengyao.notion.site/off-policy-rl; Liu, Li et al. 2025
/// "When Speed Kills Stability", richardli.xyz/rl-collapse):
///
/// - IS (`rollout_is`): `w_t = ρ_t` (token) or `Π_t ρ_t` (sequence, log-sum clamped to ±20),
///   then `min(w, C)` for a single threshold (TIS, sequence-level TIS) or `w·1[lo ≤ w ≤ hi]`
///   for `"lo_hi"` (IcePop); with `rollout_is_batch_normalize`, `w / mean(w)` (token level:
///   mean over valid tokens; sequence level: mean of the per-sequence weights over
///   non-empty sequences).
/// - Rejection (`rollout_rs`): every listed filter must pass (logical AND); sequence filters
///   reject whole sequences. See the module docs for the k1 orientation.
/// - Metrics: `rollout_corr/rollout_is_*`, `rollout_corr/rollout_rs_*`, and the off-policy
///   set (`kl`, `k3_kl`, `training_ppl`, `rollout_ppl`, `*_log_ppl`, `log_ppl_diff*`,
///   `ppl_ratio`, `chi2_token`, `chi2_seq`), computed on the input mask.
///
/// Errors if `mask` has no valid token (verl raises).
pub fn rollout_correction_and_rejection(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
    spec: &RolloutCorrectionSpec,
) -> Result<RolloutCorrectionOutput> {
    const F: &str = "rollout_correction_and_rejection";
    let p = prepare(F, train_log_probs, rollout_log_probs, mask)?;
    let mut metrics = BTreeMap::new();
    let weights = match spec.rollout_is {
        Some(level) => {
            if !(spec.is_upper > 0.0 && spec.is_upper.is_finite()) {
                return Err(RlError::invalid(
                    F,
                    "spec.is_upper",
                    format!("must be positive, got {}", spec.is_upper),
                ));
            }
            let w = is_weights(
                &p,
                level,
                spec.is_upper,
                spec.is_lower,
                spec.is_batch_normalize,
                &mut metrics,
            );
            Some(to_tensor(&w, train_log_probs)?)
        }
        None => None,
    };
    let filters: Vec<RsFilter> = spec.rs.iter().flatten().copied().collect();
    let new_mask = if filters.is_empty() {
        mask.clone()
    } else {
        let keep = rejection(&p, &filters, &mut metrics);
        let m: Vec<Vec<f64>> =
            p.m.iter()
                .zip(&keep)
                .map(|(mr, kr)| mr.iter().zip(kr).map(|(a, b)| a * b).collect())
                .collect();
        to_tensor(&m, mask)?
    };
    offpolicy(&p, &mut metrics);
    Ok(RolloutCorrectionOutput {
        weights,
        mask: new_mask,
        metrics: prefixed(metrics),
    })
}

/// The off-policy diagnostics alone, `rollout_corr/…` keys (verl
/// `compute_rollout_corr_metrics_from_logprobs`; ALGORITHMS.md §13 "Mismatch metrics").
pub fn rollout_corr_metrics(
    train_log_probs: &Tensor,
    rollout_log_probs: &Tensor,
    mask: &Tensor,
) -> Result<BTreeMap<String, f64>> {
    let p = prepare(
        "rollout_corr_metrics",
        train_log_probs,
        rollout_log_probs,
        mask,
    )?;
    let mut metrics = BTreeMap::new();
    offpolicy(&p, &mut metrics);
    Ok(prefixed(metrics))
}
