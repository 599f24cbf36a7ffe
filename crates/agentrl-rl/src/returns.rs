//! Returns and critics: discounted reward-to-go, GAE, masked whitening and the clipped value
//! loss (ALGORITHMS.md §1–§2).
//!
//! Data flow: per-token rewards (the outcome score on the last action token, plus an optional
//! KL penalty from [`crate::kl::apply_kl_to_rewards`]) → [`discounted_returns`] or, with a
//! critic, [`gae`] → [`masked_whiten`] → policy loss; the GAE returns feed [`value_loss`].
//!
//! **Observation holes.** In an agent episode the response interleaves policy tokens (mask 1)
//! with tool output (mask 0). The recursions here skip masked tokens and *bridge* across them:
//! the next valid token's return/value/advantage is carried through the hole, exactly as
//! verl's `compute_gae_advantage_return` does (ALGORITHMS.md §17). A step of discounting is
//! one *policy* token. Rewards placed on masked tokens are ignored (put the outcome reward on
//! an action token). Outputs are exactly 0 on masked tokens.
//!
//! The recursions are sequential in `T` and carry no gradient, so they run on host vectors and
//! the result is placed back on the input's device.

use candle_core::Tensor;

use crate::aggregation::{aggregate, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

fn check_discount(func: &'static str, arg: &'static str, v: f64) -> Result<()> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(RlError::invalid(
            func,
            arg,
            format!("must lie in [0, 1], got {v}"),
        ))
    }
}

/// Discounted reward-to-go `G_t = Σ_{k≥t} γ^{k−t} r_k` over policy tokens (ALGORITHMS.md §1;
/// Williams 1992, *Machine Learning* 8:229–256).
///
/// `token_rewards`, `mask`: `[B, T]`. Masked tokens are bridged (see the module docs); the
/// result is `[B, T]`, zero on masked tokens. With `γ = 1` and the outcome reward on the last
/// action token, every action token gets `G_t = R`.
pub fn discounted_returns(token_rewards: &Tensor, mask: &Tensor, gamma: f64) -> Result<Tensor> {
    const F: &str = "discounted_returns";
    check_discount(F, "gamma", gamma)?;
    let (b, n) = checks::dims2(F, "token_rewards", token_rewards)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let r = checks::finite_rows(F, "token_rewards", token_rewards)?;
    let gamma = gamma as f32;
    let mut out = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        let mut running = 0.0f32;
        for t in (0..n).rev() {
            if m[i][t] > 0.0 {
                running = r[i][t] + gamma * running;
                out[i][t] = running;
            }
        }
    }
    checks::from_rows(&out, token_rewards)
}

/// Output of [`gae`].
#[derive(Debug, Clone)]
pub struct GaeOutput {
    /// `Â_t` (not whitened; apply [`masked_whiten`] for PPO), `[B, T]`, 0 on masked tokens.
    pub advantages: Tensor,
    /// Critic regression targets `V̂_t = Â_t + V(s_t)`, `[B, T]`, 0 on masked tokens.
    pub returns: Tensor,
}

/// Generalised advantage estimation (ALGORITHMS.md §2; Schulman et al. 2015,
/// arXiv:1506.02438), bridging observation tokens like verl's `compute_gae_advantage_return`.
///
/// `δ_t = r_t + γ V(s_{t'}) − V(s_t)` with `t'` the next *valid* token (value 0 after the last),
/// `Â_t = δ_t + γλ Â_{t'}`, `V̂_t = Â_t + V(s_t)`. `λ = 1` gives `G_t − V(s_t)`, `λ = 0` one-step TD.
pub fn gae(
    token_rewards: &Tensor,
    values: &Tensor,
    mask: &Tensor,
    gamma: f64,
    lambda: f64,
) -> Result<GaeOutput> {
    const F: &str = "gae";
    check_discount(F, "gamma", gamma)?;
    check_discount(F, "lambda", lambda)?;
    let (b, n) = checks::dims2(F, "token_rewards", token_rewards)?;
    checks::same2(F, "values", values, b, n)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let r = checks::finite_rows(F, "token_rewards", token_rewards)?;
    let v = checks::finite_rows(F, "values", values)?;
    let (gamma, lambda) = (gamma as f32, lambda as f32);
    let mut adv = vec![vec![0.0f32; n]; b];
    let mut ret = vec![vec![0.0f32; n]; b];
    for i in 0..b {
        let (mut next_value, mut next_adv) = (0.0f32, 0.0f32);
        for t in (0..n).rev() {
            if m[i][t] > 0.0 {
                let delta = r[i][t] + gamma * next_value - v[i][t];
                next_adv = delta + gamma * lambda * next_adv;
                next_value = v[i][t];
                adv[i][t] = next_adv;
                ret[i][t] = next_adv + v[i][t];
            }
        }
    }
    Ok(GaeOutput {
        advantages: checks::from_rows(&adv, token_rewards)?,
        returns: checks::from_rows(&ret, token_rewards)?,
    })
}

/// Masked variance of a `[B, T]` tensor over valid tokens, as a host `f64` (verl
/// `torch_functional.masked_var`): `mean = Σ m x / (Σ m + 1e-8)`, `var = Σ m (x − mean)² /
/// (Σ m + 1e-8)`, times the Bessel factor `n/(n − 1)` when `unbiased` (n = Σ m).
///
/// Errors (as verl raises) when `unbiased` and fewer than 2 tokens are valid; the biased
/// variance of an all-masked batch is 0.
pub fn masked_var(values: &Tensor, mask: &Tensor, unbiased: bool) -> Result<f64> {
    const F: &str = "masked_var";
    let (b, n) = checks::dims2(F, "values", values)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let v = checks::finite_rows(F, "values", values)?;
    let valid = || {
        v.iter()
            .zip(&m)
            .flat_map(|(vr, mr)| vr.iter().zip(mr).filter(|(_, &w)| w > 0.0))
            .map(|(&x, _)| f64::from(x))
    };
    let count = valid().count() as f64;
    if unbiased && count < 2.0 {
        return Err(RlError::Empty {
            func: F,
            what: format!(
                "the unbiased variance needs at least 2 valid tokens in `mask`, found {count}"
            ),
        });
    }
    let mean = valid().sum::<f64>() / (count + 1e-8);
    let var = valid().map(|x| (x - mean).powi(2)).sum::<f64>() / (count + 1e-8);
    Ok(if unbiased {
        var * count / (count - 1.0)
    } else {
        var
    })
}

/// Whitens `values` over valid tokens: `(x − mean) / sqrt(var + 1e-8)`, with the unbiased
/// (Bessel-corrected) masked variance (ALGORITHMS.md §2, §8; verl `masked_whiten`). With
/// `shift_mean = false` the mean is added back (scale only). Masked tokens are 0 in the output.
/// Needs at least 2 valid tokens. No gradient flows through the statistics (used on advantages).
pub fn masked_whiten(values: &Tensor, mask: &Tensor, shift_mean: bool) -> Result<Tensor> {
    const F: &str = "masked_whiten";
    let (b, n) = checks::dims2(F, "values", values)?;
    let m = checks::mask_rows(F, mask, b, n)?;
    let v = checks::finite_rows(F, "values", values)?;
    let mut count = 0.0f64;
    let mut sum = 0.0f64;
    for (vr, mr) in v.iter().zip(&m) {
        for (&x, &w) in vr.iter().zip(mr) {
            if w > 0.0 {
                sum += f64::from(x);
                count += 1.0;
            }
        }
    }
    if count < 2.0 {
        return Err(RlError::Empty {
            func: F,
            what: format!(
                "needs at least 2 valid tokens in `mask` to estimate a variance, found {count}"
            ),
        });
    }
    let mean = sum / count;
    let mut sq = 0.0f64;
    for (vr, mr) in v.iter().zip(&m) {
        for (&x, &w) in vr.iter().zip(mr) {
            if w > 0.0 {
                sq += (f64::from(x) - mean).powi(2);
            }
        }
    }
    let var = sq / count * count / (count - 1.0);
    let inv_std = 1.0 / (var + 1e-8).sqrt();
    let out: Vec<Vec<f32>> = v
        .iter()
        .zip(&m)
        .map(|(vr, mr)| {
            vr.iter()
                .zip(mr)
                .map(|(&x, &w)| {
                    if w > 0.0 {
                        let z = (f64::from(x) - mean) * inv_std;
                        (if shift_mean { z } else { z + mean }) as f32
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    checks::from_rows(&out, values)
}

/// Output of [`value_loss`].
#[derive(Debug, Clone)]
pub struct ValueLossOutput {
    /// Scalar, differentiable with respect to `values`.
    pub loss: Tensor,
    /// Share of valid tokens where the clipped branch is the larger error (verl `vf_clipfrac`).
    pub clipfrac: f32,
    /// Masked mean of the predicted values (diagnostic).
    pub value_mean: f32,
}

/// Clipped critic loss `½ · agg(max((V − V̂)², (clip(V, V_old ± ε_v) − V̂)²))` (ALGORITHMS.md §2;
/// verl `compute_value_loss`, from TRL PPO; PPO arXiv:1707.06347).
///
/// `values` (differentiable), `old_values`, `returns`, `mask`: `[B, T]`. `clip_eps` is `ε_v`
/// (verl `cliprange_value`, default 0.5).
pub fn value_loss(
    values: &Tensor,
    old_values: &Tensor,
    returns: &Tensor,
    mask: &Tensor,
    clip_eps: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<ValueLossOutput> {
    const F: &str = "value_loss";
    if !(clip_eps > 0.0 && clip_eps.is_finite()) {
        return Err(RlError::invalid(
            F,
            "clip_eps",
            format!("must be > 0, got {clip_eps}"),
        ));
    }
    let (b, n) = checks::dims2(F, "values", values)?;
    checks::same2(F, "old_values", old_values, b, n)?;
    checks::same2(F, "returns", returns, b, n)?;
    checks::mask_rows(F, mask, b, n)?;
    let old = old_values.detach();
    let target = returns.detach();
    let clipped = values
        .maximum(&(&old - clip_eps)?)?
        .minimum(&(&old + clip_eps)?)?;
    let err_unclipped = values.sub(&target)?.sqr()?;
    let err_clipped = clipped.sub(&target)?.sqr()?;
    let per_token = err_unclipped.maximum(&err_clipped)?;
    let loss = (aggregate(&per_token, mask, agg, scale)? * 0.5)?;
    let clip_active = err_clipped.gt(&err_unclipped)?.to_dtype(values.dtype())?;
    Ok(ValueLossOutput {
        loss,
        clipfrac: crate::aggregation::masked_mean_value(&clip_active, mask)?,
        value_mean: crate::aggregation::masked_mean_value(values, mask)?,
    })
}
