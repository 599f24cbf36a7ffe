//! Loss aggregation: how a `[B, T]` per-token loss becomes one scalar.
//!
//! Sits at the end of every loss in this crate (policy, value, KL, entropy, SFT): the loss
//! functions produce a per-token tensor `ℓ`, and [`aggregate`] reduces it over the loss mask
//! `m` (1 = policy action token). The algorithms of ALGORITHMS.md differ mostly here, so the
//! mode is an explicit, closed enum whose serde names match verl's `loss_agg_mode`
//! (ALGORITHMS.md §0).
//!
//! **Gradient accumulation.** When an optimizer step is split into micro-batches, each
//! micro-batch must be normalised by the counts of the *whole step* (tokens for `token-mean`,
//! sequences for the `seq-mean-*` modes). Pass them in [`AggScale`]; the sum of the
//! micro-batch losses then equals the loss of the unsplit batch exactly.

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::Result;

/// How per-token losses are reduced to a scalar (ALGORITHMS.md §0, verl `agg_loss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AggMode {
    /// `Σ_i Σ_t m ℓ / Σ_i Σ_t m` — DAPO, CISPO, verl default.
    #[default]
    TokenMean,
    /// `(1/B) Σ_i Σ_t m ℓ` — REINFORCE / RLOO on the sequence log-prob.
    SeqMeanTokenSum,
    /// `(1/B) Σ_i [Σ_t m ℓ / Σ_t m]` — original GRPO, GSPO, DeepSeekMath PPO.
    SeqMeanTokenMean,
    /// `(1/B) Σ_i Σ_t m ℓ / L_max` — Dr. GRPO (constant normaliser `L_max`).
    SeqMeanTokenSumNorm,
}

/// Normalisers that override the ones counted from the (micro-)batch itself.
///
/// Leave a field `None` to count it from the batch being aggregated. Under gradient
/// accumulation, set `total_tokens` / `total_sequences` to the counts of the whole optimizer
/// step (see [`step_scale`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AggScale {
    /// Valid-token count of the whole optimizer step (`token-mean` denominator).
    pub total_tokens: Option<f64>,
    /// Number of sequences with at least one valid token in the whole optimizer step (`B` of
    /// the `seq-mean-*` modes).
    pub total_sequences: Option<f64>,
    /// `L_max` of `seq-mean-token-sum-norm` (the generation budget); defaults to the padded
    /// width `T` of the mask.
    pub max_len: Option<f64>,
}

/// Counts, over all micro-batch masks of one optimizer step, the totals that [`AggScale`]
/// needs so that summing the micro-batch losses reproduces the unsplit loss.
pub fn step_scale(masks: &[&Tensor], max_len: Option<f64>) -> Result<AggScale> {
    let mut tokens = 0.0f64;
    let mut sequences = 0.0f64;
    for mask in masks {
        let (b, n) = checks::dims2("step_scale", "masks[_]", mask)?;
        for row in checks::mask_rows("step_scale", mask, b, n)? {
            let count: f64 = row.iter().map(|&v| f64::from(v)).sum();
            tokens += count;
            if count > 0.0 {
                sequences += 1.0;
            }
        }
    }
    Ok(AggScale {
        total_tokens: Some(tokens),
        total_sequences: Some(sequences),
        max_len,
    })
}

/// Reduces a `[B, T]` per-token loss over a `[B, T]` 0/1 mask to a scalar (ALGORITHMS.md §0;
/// verl `core_algos.agg_loss`; Dr. GRPO arXiv:2503.20783 Listing 1 for the `-norm` mode).
///
/// Sequences whose mask is all zero (e.g. an overlong-filtered sample) count in no
/// denominator. Masked positions get exactly zero gradient, even if `per_token` is huge
/// there. An all-masked batch yields a zero loss (with zero gradient), not NaN.
pub fn aggregate(
    per_token: &Tensor,
    mask: &Tensor,
    mode: AggMode,
    scale: &AggScale,
) -> Result<Tensor> {
    const F: &str = "aggregate";
    let (b, n) = checks::dims2(F, "per_token", per_token)?;
    let mask_rows = checks::mask_rows(F, mask, b, n)?;
    let counts: Vec<f32> = mask_rows.iter().map(|r| r.iter().sum()).collect();
    let total_tokens = scale
        .total_tokens
        .unwrap_or_else(|| counts.iter().map(|&c| f64::from(c)).sum());
    let total_sequences = scale
        .total_sequences
        .unwrap_or_else(|| counts.iter().filter(|&&c| c > 0.0).count() as f64);
    // Where the mask is 0 the loss is replaced (not multiplied) so inf/NaN padding cannot leak.
    let zeros = per_token.zeros_like()?;
    let masked = mask.ne(0.0)?.where_cond(per_token, &zeros)?;
    let safe = |d: f64| if d > 0.0 { d } else { 1.0 };
    let loss = match mode {
        AggMode::TokenMean => (masked.sum_all()? / safe(total_tokens))?,
        AggMode::SeqMeanTokenSum => (masked.sum_all()? / safe(total_sequences))?,
        AggMode::SeqMeanTokenMean => {
            let inv_len: Vec<f32> = counts
                .iter()
                .map(|&c| if c > 0.0 { 1.0 / c } else { 0.0 })
                .collect();
            let per_seq = masked
                .sum_keepdim(1)?
                .mul(&checks::column(&inv_len, per_token)?)?;
            (per_seq.sum_all()? / safe(total_sequences))?
        }
        AggMode::SeqMeanTokenSumNorm => {
            let max_len = scale.max_len.unwrap_or(n as f64);
            if !(max_len > 0.0 && max_len.is_finite()) {
                return Err(crate::RlError::invalid(
                    F,
                    "scale.max_len",
                    format!("must be > 0, got {max_len}"),
                ));
            }
            (masked.sum_all()? / (safe(total_sequences) * max_len))?
        }
    };
    Ok(loss)
}

/// Masked mean of a `[B, T]` tensor over valid tokens, as a host f32 (diagnostics only, no
/// gradient). Returns 0 for an all-masked batch.
pub fn masked_mean_value(values: &Tensor, mask: &Tensor) -> Result<f32> {
    const F: &str = "masked_mean_value";
    let (b, n) = checks::dims2(F, "values", values)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let v = checks::rows(values)?;
    let (mut sum, mut count) = (0.0f64, 0.0f64);
    for (vr, mr) in v.iter().zip(&m) {
        for (&x, &w) in vr.iter().zip(mr) {
            if w > 0.0 {
                sum += f64::from(x);
                count += 1.0;
            }
        }
    }
    Ok(if count > 0.0 {
        (sum / count) as f32
    } else {
        0.0
    })
}
