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
use crate::error::{Result, RlError};

/// How per-token losses are reduced to a scalar (ALGORITHMS.md §0, verl `agg_loss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AggMode {
    /// `Σ_i Σ_t m ℓ / Σ_i Σ_t m` — DAPO, CISPO, verl default.
    #[default]
    TokenMean,
    /// `Σ_i Σ_t m ℓ` — no normaliser at all (verl `token-sum`): the loss of a micro-batch is
    /// its share of the step's token sum, so summing micro-batches gives the whole step's sum.
    TokenSum,
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
///
/// **verl's global-batch normalisation** (`agg_loss(..., dp_size, batch_num_tokens,
/// global_batch_size, loss_scale_factor)`, which every verl policy loss and
/// `compute_value_loss` forwards from `config.global_batch_info`) maps one to one:
/// `batch_num_tokens → total_tokens`, `global_batch_size → total_sequences`,
/// `loss_scale_factor → max_len`, `dp_size → dp_size`; see [`AggScale::verl`]. Each rank's
/// loss is multiplied by `dp_size` because DDP/FSDP *average* gradients over ranks, so the
/// reduced gradient is that of the global sum / global count. As in verl, `dp_size > 1`
/// without the global count of the mode's denominator is an error (a per-rank count would
/// silently weight ranks unequally).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AggScale {
    /// Valid-token count of the whole optimizer step (`token-mean` denominator).
    pub total_tokens: Option<f64>,
    /// Number of sequences with at least one valid token in the whole optimizer step (`B` of
    /// the `seq-mean-*` modes).
    pub total_sequences: Option<f64>,
    /// `L_max` of `seq-mean-token-sum-norm` (the generation budget, verl
    /// `loss_scale_factor`); defaults to the padded width `T` of the mask.
    pub max_len: Option<f64>,
    /// Data-parallel world size (verl `dp_size`); the loss is multiplied by it. `None` = 1.
    pub dp_size: Option<usize>,
}

impl AggScale {
    /// verl's `global_batch_info` spelled with verl's names (`agg_loss` arguments):
    /// `dp_size`, `batch_num_tokens` (valid tokens of the global mini-batch, all ranks),
    /// `global_batch_size` (sequences of the global mini-batch) and `loss_scale_factor`
    /// (`seq-mean-token-sum-norm` constant).
    pub fn verl(
        dp_size: usize,
        batch_num_tokens: Option<f64>,
        global_batch_size: Option<f64>,
        loss_scale_factor: Option<f64>,
    ) -> Self {
        AggScale {
            total_tokens: batch_num_tokens,
            total_sequences: global_batch_size,
            max_len: loss_scale_factor,
            dp_size: Some(dp_size),
        }
    }
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
        dp_size: None,
    })
}

/// Reduces a `[B, T]` per-token loss over a `[B, T]` 0/1 mask to a scalar (ALGORITHMS.md §0;
/// verl `core_algos.agg_loss`; Dr. GRPO arXiv:2503.20783 Listing 1 for the `-norm` mode).
///
/// Sequences whose mask is all zero (e.g. an overlong-filtered sample) count in no
/// denominator. Masked positions get exactly zero gradient, even if `per_token` is huge
/// there. An all-masked batch yields a zero loss (with zero gradient), not NaN (verl: NaN
/// for `token-mean`).
///
/// Every mode is multiplied by `scale.dp_size` (verl global-batch normalisation, see
/// [`AggScale`]): `token-mean` `dp·Σmℓ/N_tok`, `token-sum` `dp·Σmℓ`, `seq-mean-token-sum`
/// `dp·Σ_iΣ_t mℓ/B`, `seq-mean-token-sum-norm` the same `/L_max`, `seq-mean-token-mean`
/// `dp·Σ_i(Σ_t mℓ/Σ_t m)/B`.
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
    let dp = scale.dp_size.unwrap_or(1);
    if dp == 0 {
        return Err(RlError::invalid(F, "scale.dp_size", "must be >= 1"));
    }
    if dp > 1 {
        let missing = match mode {
            AggMode::TokenMean if scale.total_tokens.is_none() => {
                Some(("scale.total_tokens", "batch_num_tokens"))
            }
            AggMode::SeqMeanTokenSum | AggMode::SeqMeanTokenSumNorm | AggMode::SeqMeanTokenMean
                if scale.total_sequences.is_none() =>
            {
                Some(("scale.total_sequences", "global_batch_size"))
            }
            _ => None,
        };
        if let Some((arg, verl_name)) = missing {
            return Err(RlError::invalid(
                F,
                arg,
                format!("the global count (verl `{verl_name}`) is required when dp_size > 1"),
            ));
        }
    }
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
        AggMode::TokenSum => masked.sum_all()?,
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
                return Err(RlError::invalid(
                    F,
                    "scale.max_len",
                    format!("must be > 0, got {max_len}"),
                ));
            }
            (masked.sum_all()? / (safe(total_sequences) * max_len))?
        }
    };
    Ok(if dp > 1 { (loss * dp as f64)? } else { loss })
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
