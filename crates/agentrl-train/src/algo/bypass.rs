//! verl's bypass mode (`algorithm.rollout_correction.bypass_mode = true`; ALGORITHMS.md §13
//! "bypass"; verl `docs/algo/rollout_corr_math.md`, `compute_policy_loss_bypass_mode`): two
//! policies instead of three. π_old *is* the engine's π_rollout, so no old-log-prob pass runs,
//! and the rollout correction happens inside the loss, against the current π_θ (detached):
//! IS weights and rejection filters from `rollout_is` / `rollout_rs`, then `loss_type`:
//! - `ppo_clip`: PPO clip on `r = π_θ/π_rollout`, dual clip at `dual_clip_c` (verl's 3 when
//!   unset); the ratio already is the IS correction, so IS weights are only measured;
//! - `reinforce`: `−Â·sg(w)·log π_θ` with the IS weights `w` (1 without `rollout_is`).
//!
//! Rejected tokens leave the loss's mask; the `rollout_corr/…` metrics are logged under verl's
//! names. Any preset turns it on with `algorithm.bypass_mode = true`; these two presets are
//! verl's `RolloutCorrectionConfig` factory presets of the same names, on GRPO's advantage:
//! - `bypass_ppo_clip_k3_rs`: PPO clip, sequences whose mean k3 divergence to the rollout
//!   policy exceeds 0.01 rejected;
//! - `bypass_pg_is`: REINFORCE with sequence-level truncated IS at 2.
//!
//! With the local engine, π_rollout and π_θ agree to ~1e-7 before the first optimizer step, so
//! the correction only bites on later minibatches and epochs, or with an engine whose numerics
//! differ (an HTTP engine in bf16).

use std::borrow::Cow;

use agentrl_rl::{BypassLossType, IsLevel, ThresholdSpec};

use super::{Findings, Knobs, BASE};

/// verl `RolloutCorrectionConfig.bypass_ppo_clip_k3_rs()`.
pub const PRESET_PPO_CLIP_K3_RS: Knobs = Knobs {
    bypass_mode: true,
    loss_type: BypassLossType::PpoClip,
    rollout_rs: Some(Cow::Borrowed("seq_mean_k3")),
    rollout_rs_threshold: Some(ThresholdSpec::Number(0.01)),
    ..BASE
};

/// verl `RolloutCorrectionConfig.bypass_pg_is()`.
pub const PRESET_PG_IS: Knobs = Knobs {
    bypass_mode: true,
    loss_type: BypassLossType::Reinforce,
    rollout_is: Some(IsLevel::Sequence),
    rollout_is_threshold: ThresholdSpec::Number(2.0),
    ..BASE
};

/// Checks of the rollout-correction knobs, on any preset (bypass or decoupled).
pub fn check(knobs: &Knobs, overridden: &[String], f: &mut Findings) {
    let set = |key: &str| overridden.iter().any(|o| o == key);
    if knobs.corrects_rollouts() || knobs.bypass_mode {
        if let Err(e) = knobs.correction_spec() {
            f.errors.push(e.to_string());
        }
    }
    if knobs.bypass_mode {
        if knobs.old_logprob_pass {
            f.errors.push(
                "algorithm.bypass_mode uses the engine's log-probs as π_old; \
                 algorithm.old_logprob_pass = true contradicts it (set one of them)"
                    .into(),
            );
        }
        if set("policy_loss") {
            f.warnings.push(format!(
                "algorithm.policy_loss = {} is replaced by bypass mode's loss_type = {} (as in \
                 verl, which sets loss_mode = bypass_mode)",
                knobs.policy_loss,
                serde_name(&knobs.loss_type)
            ));
        }
        if knobs.loss_type == BypassLossType::PpoClip && knobs.rollout_is.is_some() {
            f.warnings.push(
                "algorithm.rollout_is with bypass loss_type = ppo_clip: the IS weights are \
                 only measured, the PPO ratio is the correction (verl does the same)"
                    .into(),
            );
        }
    } else {
        if set("loss_type") {
            f.warnings.push(
                "algorithm.loss_type is bypass mode's loss; it is not read without \
                 algorithm.bypass_mode = true"
                    .into(),
            );
        }
        if knobs.corrects_rollouts() && !knobs.old_logprob_pass {
            f.errors.push(
                "algorithm.rollout_is / rollout_rs in decoupled mode compare the trainer's π_old \
                 with the engine's π_rollout: set algorithm.old_logprob_pass = true, or \
                 algorithm.bypass_mode = true"
                    .into(),
            );
        }
    }
    if knobs.rollout_rs.is_none()
        && knobs.rollout_rs_threshold.is_some()
        && set("rollout_rs_threshold")
    {
        f.warnings
            .push("algorithm.rollout_rs_threshold is set without algorithm.rollout_rs".into());
    }
}

fn serde_name(loss_type: &BypassLossType) -> &'static str {
    match loss_type {
        BypassLossType::PpoClip => "ppo_clip",
        BypassLossType::Reinforce => "reinforce",
    }
}
