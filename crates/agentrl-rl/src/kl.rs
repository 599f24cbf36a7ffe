//! KL estimators k1/k2/k3 (as a reward penalty or a loss term) and the KL controllers
//! (ALGORITHMS.md §11; Schulman, "Approximating KL Divergence", 2020).
//!
//! Data flow: trainer (or old) log-probs and reference log-probs, `[B, T]` →
//! [`kl_estimate`] per token → either [`apply_kl_to_rewards`] (detached, `r_t −= β·kl_t`, before
//! advantages: PPO-RLHF, RLOO, REINFORCE++) or [`kl_loss`] (differentiated, aggregated with the
//! policy loss: GRPO). β comes from a [`KlController`].

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::aggregation::{aggregate, masked_mean_value, AggMode, AggScale};
use crate::checks;
use crate::error::{Result, RlError};

/// Clamp of `log π_ref − log π_θ` before exponentiation (verl).
pub const KL_LOG_RATIO_CLAMP: f64 = 20.0;
/// Low-variance clamp of the k3 value (verl `low_var_kl` clamps to ±10).
pub const K3_CLAMP: f64 = 10.0;

/// Per-token KL estimator of `KL[π_θ ‖ π_ref]` on samples from π_θ, with `r = π_ref/π_θ`
/// (verl `kl_penalty` / `kl_loss_type`; every verl spelling is accepted).
///
/// The `+` variants are verl's straight-through estimators: the *value* of the base
/// estimator with the *gradient* of `k2 = ½(log π_θ − log π_ref)²`, i.e.
/// `k2 − sg(k2) + sg(base)`. Differentiating k1 or k3 gives a biased KL gradient (ALGORITHMS.md
/// §11, Tang & Munos arXiv:2506.09477), while `E[∇k2] = ∇KL(π_θ‖π_ref)`; `k2+` equals `k2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlEstimator {
    /// `k1 = −log r = log π_θ − log π_ref` (unbiased, high variance). verl `kl` / `k1`.
    #[serde(alias = "kl")]
    K1,
    /// `k2 = ½ (log r)²` (biased, low variance). verl `mse` / `k2`.
    #[serde(alias = "mse")]
    K2,
    /// `k3 = (r − 1) − log r`, log r clamped to ±20 and the value to ±10 (unbiased, low
    /// variance, ≥ 0). verl `low_var_kl` / `k3`.
    #[serde(alias = "low-var-kl", alias = "low_var_kl")]
    K3,
    /// `|log π_θ − log π_ref|` (verl `abs`); its gradient at 0 is 0, as in torch.
    Abs,
    /// k1 value, k2 gradient (verl `k1+` / `kl+`).
    #[serde(rename = "k1+", alias = "kl+")]
    K1Plus,
    /// k2 value and gradient (verl `k2+` / `mse+`; identical to [`KlEstimator::K2`]).
    #[serde(rename = "k2+", alias = "mse+")]
    K2Plus,
    /// k3 value, k2 gradient (verl `k3+` / `low_var_kl+`).
    #[serde(rename = "k3+", alias = "low_var_kl+", alias = "low-var-kl+")]
    K3Plus,
    /// |k1| value, k2 gradient (verl `abs+`).
    #[serde(rename = "abs+")]
    AbsPlus,
}

/// `x · sg(sign x)`: `|x|` whose subgradient at 0 is 0 as in torch (candle's `abs` gives 1).
pub(crate) fn abs_torch(x: &Tensor) -> Result<Tensor> {
    let sign = x
        .gt(0.0)?
        .to_dtype(x.dtype())?
        .sub(&x.lt(0.0)?.to_dtype(x.dtype())?)?
        .detach();
    Ok(x.mul(&sign)?)
}

/// Per-token KL estimate `[B, T]`, differentiable in `log_probs` (ALGORITHMS.md §11; GRPO eq. 4
/// for k3, arXiv:2402.03300; verl `core_algos.kl_penalty` / `kl_penalty_forward`).
/// `ref_log_probs` is treated as a constant.
pub fn kl_estimate(
    log_probs: &Tensor,
    ref_log_probs: &Tensor,
    estimator: KlEstimator,
) -> Result<Tensor> {
    const F: &str = "kl_estimate";
    let (b, n) = checks::dims2(F, "log_probs", log_probs)?;
    checks::same2(F, "ref_log_probs", ref_log_probs, b, n)?;
    let base = |est: KlEstimator| -> Result<Tensor> {
        // log r = log π_ref − log π_θ
        let log_r = ref_log_probs.detach().sub(log_probs)?;
        Ok(match est {
            KlEstimator::K1 | KlEstimator::K1Plus => log_r.neg()?,
            KlEstimator::K2 | KlEstimator::K2Plus => (log_r.sqr()? * 0.5)?,
            KlEstimator::K3 | KlEstimator::K3Plus => {
                let log_r = log_r.clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)?;
                ((log_r.exp()? - 1.0)?.sub(&log_r)?).clamp(-K3_CLAMP, K3_CLAMP)?
            }
            KlEstimator::Abs | KlEstimator::AbsPlus => abs_torch(&log_r)?,
        })
    };
    let kl = match estimator {
        KlEstimator::K1 | KlEstimator::K2 | KlEstimator::K3 | KlEstimator::Abs => base(estimator)?,
        KlEstimator::K1Plus | KlEstimator::K2Plus | KlEstimator::K3Plus | KlEstimator::AbsPlus => {
            let forward = base(estimator)?.detach();
            let k2 = (log_probs.sub(&ref_log_probs.detach())?.sqr()? * 0.5)?;
            k2.sub(&k2.detach())?.add(&forward)?
        }
    };
    Ok(kl)
}

/// KL as a loss term (GRPO, ALGORITHMS.md §4 eq. 3–4): `β · agg(kl_t)`, differentiable.
/// Returns the scalar loss (already multiplied by β) and the masked mean KL (diagnostic).
pub fn kl_loss(
    log_probs: &Tensor,
    ref_log_probs: &Tensor,
    mask: &Tensor,
    estimator: KlEstimator,
    beta: f64,
    agg: AggMode,
    scale: &AggScale,
) -> Result<(Tensor, f32)> {
    if !(beta >= 0.0 && beta.is_finite()) {
        return Err(RlError::invalid(
            "kl_loss",
            "beta",
            format!("must be finite and >= 0, got {beta}"),
        ));
    }
    let kl = kl_estimate(log_probs, ref_log_probs, estimator)?;
    let loss = (aggregate(&kl, mask, agg, scale)? * beta)?;
    Ok((loss, masked_mean_value(&kl, mask)?))
}

/// KL in the reward (ALGORITHMS.md §2 DeepSeekMath eq. 2 / InstructGPT, §7 RLOO eq. 3, §8
/// REINFORCE++): `r_t − β · kl_t` on valid tokens, detached. `log_probs` is the sampling
/// (old) policy. Returns the shaped `[B, T]` rewards and the masked mean KL (for a
/// [`KlController`]).
pub fn apply_kl_to_rewards(
    token_rewards: &Tensor,
    log_probs: &Tensor,
    ref_log_probs: &Tensor,
    mask: &Tensor,
    estimator: KlEstimator,
    beta: f64,
) -> Result<(Tensor, f32)> {
    const F: &str = "apply_kl_to_rewards";
    if !(beta >= 0.0 && beta.is_finite()) {
        return Err(RlError::invalid(
            F,
            "beta",
            format!("must be finite and >= 0, got {beta}"),
        ));
    }
    let (b, n) = checks::dims2(F, "token_rewards", token_rewards)?;
    checks::same2(F, "log_probs", log_probs, b, n)?;
    checks::mask_rows(F, mask, b, n)?;
    let kl = kl_estimate(&log_probs.detach(), ref_log_probs, estimator)?;
    let zeros = kl.zeros_like()?;
    let kl = mask.ne(0.0)?.where_cond(&kl, &zeros)?;
    let shaped = token_rewards.detach().sub(&(kl.clone() * beta)?)?;
    Ok((shaped, masked_mean_value(&kl, mask)?))
}

/// Adaptive KL coefficient (ALGORITHMS.md §11; Ziegler et al. 2019, arXiv:1909.08593; verl
/// `AdaptiveKLController`): `β ← β · (1 + clip(KL/target − 1, ±0.2) · n_steps / horizon)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveKlController {
    /// Current β.
    pub value: f64,
    /// Target KL (verl default 0.1).
    pub target: f64,
    /// Horizon in steps (verl default 10000).
    pub horizon: f64,
}

impl AdaptiveKlController {
    /// Creates a controller; `target` and `horizon` must be > 0.
    pub fn new(init: f64, target: f64, horizon: f64) -> Result<Self> {
        const F: &str = "AdaptiveKlController::new";
        if !(init >= 0.0 && init.is_finite()) {
            return Err(RlError::invalid(
                F,
                "init",
                format!("must be finite and >= 0, got {init}"),
            ));
        }
        if !(target > 0.0 && target.is_finite()) {
            return Err(RlError::invalid(
                F,
                "target",
                format!("must be > 0, got {target}"),
            ));
        }
        if !(horizon > 0.0 && horizon.is_finite()) {
            return Err(RlError::invalid(
                F,
                "horizon",
                format!("must be > 0, got {horizon}"),
            ));
        }
        Ok(Self {
            value: init,
            target,
            horizon,
        })
    }

    /// Updates β from the KL measured over the last `n_steps` steps; returns the new β.
    pub fn update(&mut self, current_kl: f64, n_steps: usize) -> Result<f64> {
        if !current_kl.is_finite() {
            return Err(RlError::NonFinite {
                func: "AdaptiveKlController::update",
                arg: "current_kl",
                index: 0,
                value: current_kl,
            });
        }
        let error = (current_kl / self.target - 1.0).clamp(-0.2, 0.2);
        self.value *= 1.0 + error * n_steps as f64 / self.horizon;
        Ok(self.value)
    }
}

/// The KL coefficient schedule selected by config (verl `kl_ctrl.type`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum KlController {
    /// Constant β.
    Fixed {
        /// β.
        coef: f64,
    },
    /// Adaptive β, see [`AdaptiveKlController`].
    Adaptive(AdaptiveKlController),
}

impl KlController {
    /// Current β.
    pub fn value(&self) -> f64 {
        match self {
            KlController::Fixed { coef } => *coef,
            KlController::Adaptive(c) => c.value,
        }
    }

    /// Feeds the measured KL; a fixed controller ignores it. Returns the new β.
    pub fn update(&mut self, current_kl: f64, n_steps: usize) -> Result<f64> {
        match self {
            KlController::Fixed { coef } => Ok(*coef),
            KlController::Adaptive(c) => c.update(current_kl, n_steps),
        }
    }
}
