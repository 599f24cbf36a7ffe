//! Policy losses: the step that turns advantages into the scalar the optimizer minimises
//! (task → episode → batch → advantages → **loss** → update).
//!
//! Input: trainer log-probs `log π_θ` (the only differentiable tensor), the proximal
//! `log π_old`, the advantages from [`crate::advantages`] and the loss mask, all `[B, T]`,
//! plus optional detached weights from [`crate::rollout_correction`]. Output: a scalar
//! reduced by [`crate::aggregation`] and diagnostics as plain numbers.
//!
//! [`compute_policy_loss`] is the single entry point a trainer selects by name with
//! [`PolicyLoss`] (verl `policy_loss.loss_mode`). The losses live by how they keep the new
//! policy near the old one:
//! - [`contract`]: what every loss takes and gives, and the shared checks and tail;
//! - [`clip`]: a clipped ratio (vanilla PG, PPO, dual clip, DAPO clip-higher, GSPO, CISPO,
//!   Clip-Cov, KL-Cov; ALGORITHMS.md §1, §3, §6, §9, §10, §12);
//! - [`trust_region`]: another bound (SAPO's soft gate, GMPO, DPPO, DRO) or none (GPG);
//! - [`bypass`]: verl's bypass mode, rollout correction inside the loss (§13).

pub mod bypass;
pub mod clip;
pub mod contract;
pub mod trust_region;

use serde::{Deserialize, Serialize};

use crate::aggregation::{AggMode, AggScale};
use crate::error::Result;

pub use bypass::{bypass_mode_loss, BypassLossType};
pub use clip::{
    cispo_loss, clip_cov_loss, gspo_loss, gspo_token_loss, kl_cov_loss, ppo_clip_loss,
    vanilla_pg_loss, ClipCovParams, GSPO_LOG_RATIO_MAX,
};
pub use contract::{
    token_ratio, PolicyLossDiagnostics, PolicyLossInputs, PolicyLossOutput, LOG_RATIO_CLAMP,
};
pub use trust_region::{dppo_loss, dro_loss, geo_mean_loss, gpg_loss, sapo_loss, DppoDivergence};

/// The policy losses a trainer can select by name (verl `policy_loss.loss_mode`).
///
/// `BypassMode` carries its parsed rollout-correction spec inline (a few hundred bytes) so the
/// enum stays `Copy`; it is built once per run, so the size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PolicyLoss {
    /// Importance-weighted policy gradient without clipping, `ℓ = −Â·r`.
    Vanilla,
    /// PPO clip; `clip_low ≠ clip_high` is DAPO clip-higher; `dual_clip = Some(c)` (c > 1)
    /// bounds the loss of negative-advantage tokens.
    PpoClip {
        /// ε_low: lower bound `1 − ε_low` of the ratio.
        clip_low: f64,
        /// ε_high: upper bound `1 + ε_high` of the ratio.
        clip_high: f64,
        /// Dual-clip constant `c > 1` (verl `clip_ratio_c`, default 3.0), or none.
        dual_clip: Option<f64>,
    },
    /// GSPO: one length-normalised sequence ratio per response, differentiated through.
    Gspo {
        /// Left clip (paper: 3e-4).
        clip_low: f64,
        /// Right clip (paper: 4e-4).
        clip_high: f64,
    },
    /// GSPO-token: `s_{i,t} = sg[s_i]·π_θ/sg[π_θ]`, for per-token advantages.
    GspoToken {
        /// Left clip.
        clip_low: f64,
        /// Right clip.
        clip_high: f64,
    },
    /// CISPO: clipped, detached IS weight times `Â·log π_θ`.
    Cispo {
        /// Lower bound `1 − ε_low^IS` of the weight (set large for "no lower bound").
        clip_low: f64,
        /// Upper bound `1 + ε_high^IS` of the weight.
        clip_high: f64,
    },
    /// Clip-Cov: PPO clip, plus `⌊r·N⌋` random tokens with `Cov ∈ [ω_low, ω_high]` whose
    /// PG term is dropped (no gradient). See [`clip_cov_loss`].
    ClipCov {
        /// ε_low of the PPO clip.
        clip_low: f64,
        /// ε_high of the PPO clip.
        clip_high: f64,
        /// r: share of valid tokens to drop (paper and verl: 2e-4).
        clip_cov_ratio: f64,
        /// ω_low: lower covariance bound (default 1).
        cov_low: f64,
        /// ω_high: upper covariance bound (default 5).
        cov_high: f64,
        /// Seed of the random pick among in-range tokens (vary it per step).
        seed: u64,
    },
    /// KL-Cov: importance-weighted PG, plus `β·|log π_θ − log π_old|` on the top `⌊k·N⌋`
    /// tokens by Cov. See [`kl_cov_loss`].
    KlCov {
        /// k: share of valid tokens penalised (paper 7B: 2e-3; verl default 2e-4).
        kl_cov_ratio: f64,
        /// β: coefficient of the `|log-ratio|` penalty (default 1).
        kl_coef: f64,
    },
    /// SAPO soft gate (verl `sapo`); always `seq-mean-token-mean`. See
    /// [`trust_region::sapo_loss`].
    #[serde(rename = "sapo")]
    Sapo {
        /// Gate temperature for `Â > 0` (verl `tau_pos`).
        tau_pos: f64,
        /// Gate temperature for `Â ≤ 0` (verl `tau_neg`).
        tau_neg: f64,
    },
    /// GMPO geometric-mean ratio (verl `geo_mean`); ignores the aggregation mode. See
    /// [`trust_region::geo_mean_loss`].
    #[serde(rename = "geo_mean", alias = "geo-mean", alias = "gmpo")]
    GeoMean {
        /// ε_low on the token log-ratio.
        clip_low: f64,
        /// ε_high on the token log-ratio.
        clip_high: f64,
    },
    /// DPPO with a total-variation trust region (verl `dppo_tv`). See [`trust_region::dppo_loss`].
    #[serde(rename = "dppo_tv", alias = "dppo-tv")]
    DppoTv {
        /// δ_low (verl `clip_ratio_low`).
        clip_low: f64,
        /// δ_high (verl `clip_ratio_high`).
        clip_high: f64,
        /// Truncation `c` of the detached IS ratio (verl `clip_ratio_c`, default 20).
        clip_ratio_c: f64,
    },
    /// DPPO with a binary-KL trust region (verl `dppo_kl`). See [`trust_region::dppo_loss`].
    #[serde(rename = "dppo_kl", alias = "dppo-kl")]
    DppoKl {
        /// δ_low (verl `clip_ratio_low`).
        clip_low: f64,
        /// δ_high (verl `clip_ratio_high`).
        clip_high: f64,
        /// Truncation `c` of the detached IS ratio (verl `clip_ratio_c`, default 20).
        clip_ratio_c: f64,
    },
    /// GPG: `−Â log π_θ` (verl `gpg`). See [`trust_region::gpg_loss`].
    #[serde(rename = "gpg")]
    Gpg,
    /// DRO quadratic log-ratio penalty (verl `dro`). See [`trust_region::dro_loss`].
    #[serde(rename = "dro")]
    Dro {
        /// β > 0 (verl `policy_loss.dro_beta`).
        dro_beta: f64,
    },
    /// verl bypass mode: rollout correction inside the loss, `old_log_probs` = rollout
    /// log-probs (verl `bypass_mode`). See [`bypass::bypass_mode_loss`].
    #[serde(rename = "bypass_mode", alias = "bypass-mode")]
    BypassMode {
        /// `ppo_clip` or `reinforce` (verl `rollout_correction.loss_type`).
        loss_type: BypassLossType,
        /// ε_low of `ppo_clip`.
        clip_low: f64,
        /// ε_high of `ppo_clip`.
        clip_high: f64,
        /// Dual-clip constant of `ppo_clip` (verl `clip_ratio_c`, default 3).
        clip_ratio_c: f64,
        /// verl's `rollout_correction` block (field names and strings as verl spells them).
        rollout_correction: crate::rollout_correction::RolloutCorrectionSpec,
    },
}

impl PolicyLoss {
    /// PPO with symmetric clip ε (ALGORITHMS.md §3, ε = 0.2 default).
    pub fn ppo(eps: f64) -> Self {
        PolicyLoss::PpoClip {
            clip_low: eps,
            clip_high: eps,
            dual_clip: None,
        }
    }
}

/// Dispatches on [`PolicyLoss`]: one call site for the trainer.
pub fn compute_policy_loss(
    loss: &PolicyLoss,
    x: &PolicyLossInputs<'_>,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    match *loss {
        PolicyLoss::Vanilla => vanilla_pg_loss(x, agg, scale),
        PolicyLoss::PpoClip {
            clip_low,
            clip_high,
            dual_clip,
        } => ppo_clip_loss(x, clip_low, clip_high, dual_clip, agg, scale),
        PolicyLoss::Gspo {
            clip_low,
            clip_high,
        } => gspo_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::GspoToken {
            clip_low,
            clip_high,
        } => gspo_token_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::Cispo {
            clip_low,
            clip_high,
        } => cispo_loss(x, clip_low, clip_high, agg, scale),
        PolicyLoss::ClipCov {
            clip_low,
            clip_high,
            clip_cov_ratio,
            cov_low,
            cov_high,
            seed,
        } => clip_cov_loss(
            x,
            ClipCovParams {
                clip_low,
                clip_high,
                clip_cov_ratio,
                cov_low,
                cov_high,
                seed,
            },
            agg,
            scale,
        ),
        PolicyLoss::KlCov {
            kl_cov_ratio,
            kl_coef,
        } => kl_cov_loss(x, kl_cov_ratio, kl_coef, agg, scale),
        PolicyLoss::Sapo { tau_pos, tau_neg } => sapo_loss(x, tau_pos, tau_neg, scale),
        PolicyLoss::GeoMean {
            clip_low,
            clip_high,
        } => geo_mean_loss(x, clip_low, clip_high),
        PolicyLoss::DppoTv {
            clip_low,
            clip_high,
            clip_ratio_c,
        } => dppo_loss(
            x,
            DppoDivergence::Tv,
            clip_low,
            clip_high,
            clip_ratio_c,
            agg,
            scale,
        ),
        PolicyLoss::DppoKl {
            clip_low,
            clip_high,
            clip_ratio_c,
        } => dppo_loss(
            x,
            DppoDivergence::BinaryKl,
            clip_low,
            clip_high,
            clip_ratio_c,
            agg,
            scale,
        ),
        PolicyLoss::Gpg => gpg_loss(x, agg, scale),
        PolicyLoss::Dro { dro_beta } => dro_loss(x, dro_beta, agg, scale),
        PolicyLoss::BypassMode {
            loss_type,
            clip_low,
            clip_high,
            clip_ratio_c,
            rollout_correction,
        } => bypass_mode_loss(
            x,
            loss_type,
            clip_low,
            clip_high,
            clip_ratio_c,
            &rollout_correction,
            agg,
            scale,
        ),
    }
}
