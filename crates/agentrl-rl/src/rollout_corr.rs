//! verl's rollout correction with verl's own configuration strings and metric names: IS
//! weights at token or sequence level (truncated, IcePop-masked, optionally batch-normalised),
//! divergence-based rejection filters (`token_k*`, `seq_sum_k*`, `seq_mean_k*`, `seq_max_k*`,
//! comma-combined), and the off-policy diagnostics (ALGORITHMS.md §13; verl
//! `trainer/ppo/rollout_corr_helper.py`, `docs/algo/rollout_corr_math.md`).
//!
//! Data flow: the trainer's `log π_train` (verl `old_log_probs`, or the current `log π_θ` in
//! bypass mode) and the engine's `log π_rollout`, both `[B, T]`, plus the loss mask →
//! [`rollout_correction_and_rejection`] → detached IS weights (`PolicyLossInputs::token_weights`),
//! a *modified mask* (rejected tokens set to 0: use it as the loss mask, so rejected tokens also
//! leave every denominator, as verl does) and `rollout_corr/…` metrics.
//!
//! `log ρ_t = log π_train − log π_rollout`. The rejection statistics are
//! `k1 = −log ρ`, `k2 = ½(log ρ)²`, `k3 = ρ − 1 − log ρ` (log ρ clamped to ±20).
//!
//! **Orientation of k1 bounds (verl's, on purpose).** A `k1` threshold `"lo_hi"` bounds
//! `exp(k1) = π_rollout/π_train` (per token for `token_k1`; for the sequence options the sum
//! or mean of k1 is compared with `[ln lo, ln hi]`). That is the *reciprocal* of the ratio
//! `ρ = π_train/π_rollout` that [`crate::mis_weights`] and the IS threshold below bound: with
//! `token_k1` at `"0.5_1.5"` a token is kept iff `1/1.5 ≤ ρ ≤ 2`. A single number `u` means
//! `"1/u_u"`, which is symmetric and so orientation-free.
//!
//! Differences from verl: none in value. Errors replace verl's exceptions (same conditions);
//! torch's `distributed_masked_mean` of the batch-normalisation (multi-rank) is not modelled:
//! pass the whole global batch to get the same factor.

use std::collections::BTreeMap;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::{Result, RlError};

/// Clamp of log-ratios before exponentiation (verl `SAFETY_BOUND`).
pub const SAFETY_BOUND: f64 = 20.0;

/// IS weight aggregation level (verl `rollout_is`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsLevel {
    /// Per-token weight `ρ_t`.
    Token,
    /// Per-sequence weight `Π_t ρ_t = exp(Σ_t log ρ_t)`, broadcast to the sequence's tokens
    /// (sequence-level truncated IS with a single threshold).
    Sequence,
}

/// One rejection statistic (verl `SUPPORTED_ROLLOUT_RS_OPTIONS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RsOption {
    /// Per-token `k1`, two-sided bounds (see the module docs for the orientation).
    TokenK1,
    /// Per-token `k2 ≤ upper`.
    TokenK2,
    /// Per-token `k3 ≤ upper`.
    TokenK3,
    /// `Σ_t k1`, two-sided (log-space bounds).
    SeqSumK1,
    /// `Σ_t k2 ≤ upper`.
    SeqSumK2,
    /// `Σ_t k3 ≤ upper`.
    SeqSumK3,
    /// `mean_t k1`, two-sided (log-space bounds).
    SeqMeanK1,
    /// `mean_t k2 ≤ upper`.
    SeqMeanK2,
    /// `mean_t k3 ≤ upper`.
    SeqMeanK3,
    /// `max_t k2 ≤ upper`.
    SeqMaxK2,
    /// `max_t k3 ≤ upper`.
    SeqMaxK3,
}

const ALL_RS: [RsOption; 11] = [
    RsOption::TokenK1,
    RsOption::TokenK2,
    RsOption::TokenK3,
    RsOption::SeqSumK1,
    RsOption::SeqSumK2,
    RsOption::SeqSumK3,
    RsOption::SeqMeanK1,
    RsOption::SeqMeanK2,
    RsOption::SeqMeanK3,
    RsOption::SeqMaxK2,
    RsOption::SeqMaxK3,
];

impl RsOption {
    /// verl's spelling.
    pub fn name(self) -> &'static str {
        match self {
            RsOption::TokenK1 => "token_k1",
            RsOption::TokenK2 => "token_k2",
            RsOption::TokenK3 => "token_k3",
            RsOption::SeqSumK1 => "seq_sum_k1",
            RsOption::SeqSumK2 => "seq_sum_k2",
            RsOption::SeqSumK3 => "seq_sum_k3",
            RsOption::SeqMeanK1 => "seq_mean_k1",
            RsOption::SeqMeanK2 => "seq_mean_k2",
            RsOption::SeqMeanK3 => "seq_mean_k3",
            RsOption::SeqMaxK2 => "seq_max_k2",
            RsOption::SeqMaxK3 => "seq_max_k3",
        }
    }

    /// Parses verl's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        ALL_RS.iter().copied().find(|o| o.name() == s)
    }

    fn is_k1(self) -> bool {
        matches!(
            self,
            RsOption::TokenK1 | RsOption::SeqSumK1 | RsOption::SeqMeanK1
        )
    }

    fn is_token(self) -> bool {
        matches!(
            self,
            RsOption::TokenK1 | RsOption::TokenK2 | RsOption::TokenK3
        )
    }
}

/// One parsed rejection filter: a statistic and its bounds (ratio space for k1, raw value
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RsFilter {
    /// The statistic.
    pub option: RsOption,
    /// k1 only: lower bound on `π_rollout/π_train` (verl orientation, see the module docs).
    pub lower: Option<f64>,
    /// Upper bound (k1: on `π_rollout/π_train`; k2/k3: on the divergence itself).
    pub upper: f64,
}

/// A threshold as verl's config spells it: a number, or a string such as `"2.0"`, `"0.5_2.0"`
/// or `"0.5_1.5,0.01"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ThresholdSpec {
    /// A plain number.
    Number(f64),
    /// A string specification.
    Text(String),
}

fn default_is_threshold() -> Option<ThresholdSpec> {
    Some(ThresholdSpec::Number(2.0))
}

/// verl's `algorithm.rollout_correction` block, field for field (verl
/// `RolloutCorrectionConfig`): what a trainer config deserialises.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutCorrectionConfig {
    /// `token`, `sequence`, or absent (no IS weights).
    #[serde(default)]
    pub rollout_is: Option<IsLevel>,
    /// A number `C` (truncate at C) or `"lo_hi"` (IcePop: zero outside `[lo, hi]`), on
    /// `ρ = π_train/π_rollout`. Default 2.0.
    #[serde(default = "default_is_threshold")]
    pub rollout_is_threshold: Option<ThresholdSpec>,
    /// Divide the weights by their batch mean (token level: over tokens; sequence level:
    /// over sequences).
    #[serde(default)]
    pub rollout_is_batch_normalize: bool,
    /// Comma-separated rejection options, e.g. `"token_k1,seq_mean_k3"`.
    #[serde(default)]
    pub rollout_rs: Option<String>,
    /// One threshold shared by every option or one per option, comma-separated; k1 options
    /// take `"lo_hi"` (bounds on `π_rollout/π_train`, verl's orientation) or one number `u`
    /// meaning `"1/u_u"`.
    #[serde(default)]
    pub rollout_rs_threshold: Option<ThresholdSpec>,
}

impl Default for RolloutCorrectionConfig {
    fn default() -> Self {
        RolloutCorrectionConfig {
            rollout_is: None,
            rollout_is_threshold: default_is_threshold(),
            rollout_is_batch_normalize: false,
            rollout_rs: None,
            rollout_rs_threshold: None,
        }
    }
}

/// [`RolloutCorrectionConfig`] parsed and validated (`Copy`, so it can sit inside
/// [`crate::PolicyLoss`]); (de)serialises as the config.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RolloutCorrectionConfig", into = "RolloutCorrectionConfig")]
pub struct RolloutCorrectionSpec {
    /// IS level; `None` = no IS weights.
    pub rollout_is: Option<IsLevel>,
    /// Upper IS threshold (truncation cap, or IcePop's upper bound).
    pub is_upper: f64,
    /// IcePop lower bound; `None` = truncated IS.
    pub is_lower: Option<f64>,
    /// verl `rollout_is_batch_normalize`.
    pub is_batch_normalize: bool,
    /// Rejection filters in the order given (deduplicated); unused slots are `None`.
    pub rs: [Option<RsFilter>; 11],
}

impl Default for RolloutCorrectionSpec {
    /// No IS weights, no rejection (verl's defaults; `rollout_is_threshold` 2.0).
    fn default() -> Self {
        RolloutCorrectionSpec {
            rollout_is: None,
            is_upper: 2.0,
            is_lower: None,
            is_batch_normalize: false,
            rs: [None; 11],
        }
    }
}

fn bad(arg: &'static str, reason: impl Into<String>) -> RlError {
    RlError::invalid("RolloutCorrectionSpec", arg, reason)
}

fn spec_text(spec: &ThresholdSpec) -> String {
    match spec {
        ThresholdSpec::Number(x) => format!("{x:?}"),
        ThresholdSpec::Text(s) => s.clone(),
    }
}

fn num(arg: &'static str, s: &str) -> Result<f64> {
    s.trim()
        .parse::<f64>()
        .map_err(|_| bad(arg, format!("`{s}` is not a number")))
}

/// verl `_parse_rollout_is_threshold`: `(upper, lower)`.
fn parse_is_threshold(spec: &ThresholdSpec) -> Result<(f64, Option<f64>)> {
    const A: &str = "rollout_is_threshold";
    let (upper, lower) = match spec {
        ThresholdSpec::Number(x) => (*x, None),
        ThresholdSpec::Text(s) => {
            let s = s.trim();
            if s.is_empty() {
                return Err(bad(A, "must not be an empty string"));
            }
            match s.split_once('_') {
                Some((lo, hi)) => (num(A, hi)?, Some(num(A, lo)?)),
                None => (num(A, s)?, None),
            }
        }
    };
    if !(upper > 0.0 && upper.is_finite()) {
        return Err(bad(A, format!("upper bound must be positive, got {upper}")));
    }
    if let Some(lo) = lower {
        if !(lo > 0.0 && lo.is_finite()) {
            return Err(bad(A, format!("lower bound must be positive, got {lo}")));
        }
        if lo > upper {
            return Err(bad(A, format!("lower bound {lo} must be <= upper {upper}")));
        }
    }
    Ok((upper, lower))
}

/// verl `_parse_rollout_rs_thresholds` for already parsed, deduplicated options.
fn parse_rs(options: &[RsOption], spec: Option<&ThresholdSpec>) -> Result<Vec<RsFilter>> {
    const A: &str = "rollout_rs_threshold";
    let spec = spec.ok_or_else(|| bad(A, "must be provided when rollout_rs is set"))?;
    let raw: Vec<String> = match spec {
        ThresholdSpec::Number(_) => vec![spec_text(spec)],
        ThresholdSpec::Text(s) => s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect(),
    };
    if raw.is_empty() {
        return Err(bad(A, "must contain at least one threshold"));
    }
    if raw.len() != 1 && raw.len() != options.len() {
        return Err(bad(
            A,
            format!(
                "expects one threshold shared by all options or exactly {} (one per rollout_rs option), got {}",
                options.len(),
                raw.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(options.len());
    for (k, &option) in options.iter().enumerate() {
        let s = if raw.len() == 1 { &raw[0] } else { &raw[k] };
        if option.is_k1() {
            let (lower, upper) = match s.split_once('_') {
                Some((lo, hi)) => (num(A, lo)?, num(A, hi)?),
                None => {
                    let u = num(A, s)?;
                    (1.0 / u, u)
                }
            };
            if !(lower > 0.0 && upper > 0.0 && upper.is_finite()) {
                return Err(bad(
                    A,
                    format!(
                        "thresholds for `{}` must be positive, got `{s}`",
                        option.name()
                    ),
                ));
            }
            if lower > upper {
                return Err(bad(
                    A,
                    format!(
                        "thresholds for `{}` need lower <= upper, got `{s}`",
                        option.name()
                    ),
                ));
            }
            out.push(RsFilter {
                option,
                lower: Some(lower),
                upper,
            });
        } else {
            if s.contains('_') {
                return Err(bad(
                    A,
                    format!(
                        "`{}` takes a single upper bound without '_', got `{s}`",
                        option.name()
                    ),
                ));
            }
            let upper = num(A, s)?;
            if !(upper > 0.0 && upper.is_finite()) {
                return Err(bad(
                    A,
                    format!(
                        "threshold for `{}` must be positive, got `{s}`",
                        option.name()
                    ),
                ));
            }
            out.push(RsFilter {
                option,
                lower: None,
                upper,
            });
        }
    }
    Ok(out)
}

impl TryFrom<RolloutCorrectionConfig> for RolloutCorrectionSpec {
    type Error = RlError;

    fn try_from(c: RolloutCorrectionConfig) -> Result<Self> {
        let mut spec = RolloutCorrectionSpec {
            is_batch_normalize: c.rollout_is_batch_normalize,
            ..Default::default()
        };
        if let (Some(level), Some(th)) = (c.rollout_is, c.rollout_is_threshold.as_ref()) {
            let (upper, lower) = parse_is_threshold(th)?;
            spec.rollout_is = Some(level);
            spec.is_upper = upper;
            spec.is_lower = lower;
        }
        if let Some(rs) = c.rollout_rs.as_deref() {
            let mut options: Vec<RsOption> = Vec::new();
            for part in rs.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let o = RsOption::parse(part).ok_or_else(|| {
                    bad(
                        "rollout_rs",
                        format!(
                            "unknown option `{part}`; expected one of {:?}",
                            ALL_RS.map(RsOption::name)
                        ),
                    )
                })?;
                if !options.contains(&o) {
                    options.push(o);
                }
            }
            if options.is_empty() {
                return Err(bad("rollout_rs", "must contain at least one option"));
            }
            for (k, f) in parse_rs(&options, c.rollout_rs_threshold.as_ref())?
                .into_iter()
                .enumerate()
            {
                spec.rs[k] = Some(f);
            }
        }
        Ok(spec)
    }
}

impl From<RolloutCorrectionSpec> for RolloutCorrectionConfig {
    fn from(s: RolloutCorrectionSpec) -> Self {
        let filters: Vec<RsFilter> = s.rs.iter().flatten().copied().collect();
        RolloutCorrectionConfig {
            rollout_is: s.rollout_is,
            rollout_is_threshold: Some(match s.is_lower {
                Some(lo) => ThresholdSpec::Text(format!("{lo:?}_{:?}", s.is_upper)),
                None => ThresholdSpec::Number(s.is_upper),
            }),
            rollout_is_batch_normalize: s.is_batch_normalize,
            rollout_rs: (!filters.is_empty()).then(|| {
                filters
                    .iter()
                    .map(|f| f.option.name())
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            rollout_rs_threshold: (!filters.is_empty()).then(|| {
                ThresholdSpec::Text(
                    filters
                        .iter()
                        .map(|f| match f.lower {
                            Some(lo) => format!("{lo:?}_{:?}", f.upper),
                            None => format!("{:?}", f.upper),
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                )
            }),
        }
    }
}

impl RolloutCorrectionSpec {
    /// Parses verl's strings (same rules and errors as verl's parsers).
    pub fn from_config(c: &RolloutCorrectionConfig) -> Result<Self> {
        Self::try_from(c.clone())
    }
}

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
