//! verl's bypass mode: the rollout correction applied *inside* the policy loss, against the
//! engine's log-probs, when the trainer skips the old-policy forward pass (ALGORITHMS.md §13
//! "bypass"; verl `docs/algo/rollout_corr_math.md`).
//!
//! Where it sits: the trainer passes `log π_rollout` as `old_log_probs`; this module asks
//! [`crate::rollout_correction`] for the IS weights and the rejection mask against the
//! *current* policy, then runs PPO clip ([`super::clip`]) or REINFORCE on the modified mask.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::clip::ppo_clip_loss;
use super::contract::{
    check, finish, token_ratio, verl_metrics, with_metrics, Checked, PolicyLossDiagnostics,
    PolicyLossInputs, PolicyLossOutput,
};
use crate::aggregation::{AggMode, AggScale};
use crate::error::Result;
use crate::rollout_correction::{rollout_correction_and_rejection, RolloutCorrectionSpec};

/// The surrogate of bypass mode (verl `rollout_correction.loss_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BypassLossType {
    /// PPO clip on `r = π_θ/π_rollout` (with verl's dual clip); IS weights are computed for
    /// the metrics but *not* applied (the ratio already is the IS correction).
    PpoClip,
    /// REINFORCE with explicit IS weights: `ℓ = −Â · w · log π_θ`.
    Reinforce,
}

/// verl's bypass mode (verl `compute_policy_loss_bypass_mode`, `docs/algo/rollout_corr_math.md`;
/// ALGORITHMS.md §13 "its bypass mode sets π_old = π_rollout"): the trainer skips the old-policy
/// forward pass and passes the engine's log-probs as `x.old_log_probs`. Inside the loss:
///
/// 1. IS weights and the rejection mask from [`rollout_correction_and_rejection`] with
///    `π_train = sg(π_θ)` (the *current* policy) and `π_rollout = x.old_log_probs`;
/// 2. the loss on the rejection-modified mask: `ppo_clip` = [`ppo_clip_loss`] with dual clip
///    `clip_ratio_c` (verl default 3.0) and no IS weights, or `reinforce` =
///    `−Â · sg(w) · log π_θ` (w = 1 without `rollout_is`).
///
/// `x.token_weights` is ignored (verl ignores `rollout_is_weights` here). Metrics: the
/// surrogate's plus every `rollout_corr/…` metric; `actor/ppo_kl` is `mean(log π_rollout −
/// log π_θ)` over the modified mask.
#[allow(clippy::too_many_arguments)]
pub fn bypass_mode_loss(
    x: &PolicyLossInputs<'_>,
    loss_type: BypassLossType,
    clip_low: f64,
    clip_high: f64,
    clip_ratio_c: f64,
    correction: &RolloutCorrectionSpec,
    agg: AggMode,
    scale: &AggScale,
) -> Result<PolicyLossOutput> {
    const F: &str = "bypass_mode_loss";
    check(F, x)?;
    let rc = rollout_correction_and_rejection(
        &x.log_probs.detach(),
        x.old_log_probs,
        x.mask,
        correction,
    )?;
    let masked = PolicyLossInputs {
        mask: &rc.mask,
        token_weights: None,
        ..*x
    };
    let mut out = match loss_type {
        BypassLossType::PpoClip => {
            let out = ppo_clip_loss(&masked, clip_low, clip_high, Some(clip_ratio_c), agg, scale)?;
            let d = out.diagnostics;
            let m = verl_metrics(d.clipfrac, d.approx_kl, d.dual_clipfrac);
            with_metrics(out, m)
        }
        BypassLossType::Reinforce => {
            let c: Checked = check(F, &masked)?;
            let ratio = token_ratio(x.log_probs, x.old_log_probs)?;
            let mut per_token = x.log_probs.mul(&x.advantages.detach())?.neg()?;
            if let Some(w) = &rc.weights {
                per_token = per_token.mul(w)?;
            }
            let out = finish(
                &masked,
                &c,
                per_token,
                &ratio,
                PolicyLossDiagnostics::default(),
                agg,
                scale,
            )?;
            let kl = out.diagnostics.approx_kl;
            with_metrics(
                out,
                BTreeMap::from([("actor/ppo_kl".to_string(), f64::from(kl))]),
            )
        }
    };
    out.metrics.extend(rc.metrics);
    Ok(out)
}
