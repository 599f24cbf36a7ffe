//! verl's rollout-correction configuration, in verl's own strings: the `rollout_is` level and
//! threshold, the `rollout_rs` rejection options (`token_k*`, `seq_sum_k*`, `seq_mean_k*`,
//! `seq_max_k*`, comma-combined) and their thresholds, parsed into a checked
//! [`RolloutCorrectionSpec`] (verl `trainer/ppo/rollout_corr_helper.py`).
//!
//! Where it sits: the trainer's TOML (`[algorithm.rollout_correction]`) →
//! [`RolloutCorrectionConfig`] → [`RolloutCorrectionSpec`], built once per run and handed to
//! [`super::apply::rollout_correction_and_rejection`] at every step (and carried inside
//! the bypass-mode policy loss).
//!
//! **Orientation of k1 bounds (verl's, on purpose).** A `k1` threshold `"lo_hi"` bounds
//! `exp(k1) = π_rollout/π_train` (per token for `token_k1`; for the sequence options the sum
//! or mean of k1 is compared with `[ln lo, ln hi]`). That is the *reciprocal* of the ratio
//! `ρ = π_train/π_rollout` that [`super::weights::mis_weights`] and the IS threshold bound: with
//! `token_k1` at `"0.5_1.5"` a token is kept iff `1/1.5 ≤ ρ ≤ 2`. A single number `u` means
//! `"1/u_u"`, which is symmetric and so orientation-free.

use serde::{Deserialize, Serialize};

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

    pub(super) fn is_k1(self) -> bool {
        matches!(
            self,
            RsOption::TokenK1 | RsOption::SeqSumK1 | RsOption::SeqMeanK1
        )
    }

    pub(super) fn is_token(self) -> bool {
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
