//! Token log-probabilities and entropy from logits, and the entropy bonus
//! (ALGORITHMS.md §12; PPO arXiv:1707.06347 `c_2 H`; Cui et al. 2025, arXiv:2505.22617).
//!
//! Data flow: policy logits `[B, T, V]` → [`token_log_probs`] (the `log π_θ` every loss reads)
//! and [`entropy_from_logits`] `[B, T]` → [`entropy_bonus_loss`] added to the policy loss, and
//! the masked mean entropy as a diagnostic (entropy collapse).
//!
//! Only differentiable candle ops are used (`candle_nn::ops::log_softmax` is composed of
//! `max/sub/exp/sum/log`; the fused `softmax_last_dim` is avoided: it has no backward pass).

use candle_core::{DType, Tensor, D};

use crate::aggregation::{aggregate, masked_mean_value, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

fn dims3(func: &'static str, logits: &Tensor) -> Result<(usize, usize, usize)> {
    match logits.dims() {
        [b, t, v] if *v > 0 => Ok((*b, *t, *v)),
        other => Err(RlError::Shape {
            func,
            arg: "logits",
            got: other.to_vec(),
            expected: "[B, T, V] with V > 0".into(),
        }),
    }
}

/// Per-token entropy `H_t = −Σ_v π(v) log π(v)` of the softmax of `logits` `[B, T, V]` →
/// `[B, T]`, differentiable (ALGORITHMS.md §12).
pub fn entropy_from_logits(logits: &Tensor) -> Result<Tensor> {
    dims3("entropy_from_logits", logits)?;
    let log_p = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    Ok(log_p.exp()?.mul(&log_p)?.sum(D::Minus1)?.neg()?)
}

/// `Σ_v π(v)²` of the softmax of `logits` `[B, T, V]` → `[B, T]`, computed as
/// `exp(logsumexp(2z) − 2·logsumexp(z))` (verl `torch_functional.calculate_sum_pi_squared_from_logits`),
/// the collision probability that the optimal token baseline's path-variance proxy
/// `‖s_t‖² = 1 − 2π_t + Σπ²` needs ([`crate::optimal_token_baseline_advantages`]).
/// Differentiable, though the estimators only read it as a constant.
pub fn sum_pi_squared(logits: &Tensor) -> Result<Tensor> {
    dims3("sum_pi_squared", logits)?;
    let lse = |z: &Tensor| -> Result<Tensor> {
        let max = z.max_keepdim(D::Minus1)?.detach();
        Ok(z.broadcast_sub(&max)?
            .exp()?
            .sum(D::Minus1)?
            .log()?
            .add(&max.squeeze(D::Minus1)?)?)
    };
    let two = (logits * 2.0)?;
    Ok((lse(&two)? - (lse(logits)? * 2.0)?)?.exp()?)
}

/// `log π(target_t)` for each position: logits `[B, T, V]`, targets `[B, T]` (u32 token ids)
/// → `[B, T]`, differentiable (gather has a correct backward in candle).
pub fn token_log_probs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    const F: &str = "token_log_probs";
    let (b, t, v) = dims3(F, logits)?;
    checks::same2(F, "targets", targets, b, t)?;
    let ids = targets.to_dtype(DType::U32)?;
    let max_id = ids.flatten_all()?.max(0)?.to_scalar::<u32>().unwrap_or(0);
    if b * t > 0 && max_id as usize >= v {
        return Err(RlError::invalid(
            F,
            "targets",
            format!("token id {max_id} is out of range for vocabulary size {v}"),
        ));
    }
    let log_p = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    Ok(log_p
        .gather(&ids.unsqueeze(D::Minus1)?.contiguous()?, D::Minus1)?
        .squeeze(D::Minus1)?)
}

/// Entropy bonus as a loss term: `−c_H · agg(H_t)` (ALGORITHMS.md §12: `loss = L_PG − c_H·agg(H)`).
/// Returns the scalar loss and the masked mean entropy (diagnostic).
pub fn entropy_bonus_loss(
    entropy: &Tensor,
    mask: &Tensor,
    coef: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<(Tensor, f32)> {
    if !coef.is_finite() {
        return Err(RlError::invalid(
            "entropy_bonus_loss",
            "coef",
            format!("must be finite, got {coef}"),
        ));
    }
    let loss = (aggregate(entropy, mask, agg, scale)? * (-coef))?;
    Ok((loss, masked_mean_value(entropy, mask)?))
}
