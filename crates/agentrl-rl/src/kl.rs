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

/// Per-token KL estimator of `KL[π_θ ‖ π_ref]` on samples from π_θ, with `r = π_ref/π_θ`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlEstimator {
    /// `k1 = −log r = log π_θ − log π_ref` (unbiased, high variance). verl `kl`.
    #[serde(alias = "kl")]
    K1,
    /// `k2 = ½ (log r)²` (biased, low variance). verl `mse`.
    #[serde(alias = "mse")]
    K2,
    /// `k3 = (r − 1) − log r`, clamped to ±10 (unbiased, low variance, ≥ 0). verl `low-var-kl`.
    #[serde(alias = "low-var-kl")]
    K3,
}

/// Per-token KL estimate `[B, T]`, differentiable in `log_probs` (ALGORITHMS.md §11; GRPO eq. 4
/// for k3, arXiv:2402.03300). `ref_log_probs` is treated as a constant.
pub fn kl_estimate(
    log_probs: &Tensor,
    ref_log_probs: &Tensor,
    estimator: KlEstimator,
) -> Result<Tensor> {
    const F: &str = "kl_estimate";
    let (b, n) = checks::dims2(F, "log_probs", log_probs)?;
    checks::same2(F, "ref_log_probs", ref_log_probs, b, n)?;
    // log r = log π_ref − log π_θ
    let log_r = ref_log_probs.detach().sub(log_probs)?;
    let kl = match estimator {
        KlEstimator::K1 => log_r.neg()?,
        KlEstimator::K2 => (log_r.sqr()? * 0.5)?,
        KlEstimator::K3 => {
            let log_r = log_r.clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)?;
            ((log_r.exp()? - 1.0)?.sub(&log_r)?).clamp(-K3_CLAMP, K3_CLAMP)?
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
