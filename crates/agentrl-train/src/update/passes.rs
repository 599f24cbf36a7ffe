//! The phases of an update that run once per rollout batch, before the minibatch loop, in
//! verl's fit-loop order: the old-log-prob pass (π_old, values, Σπ²), the reference pass,
//! rewards with the KL penalty in them, the decoupled rollout correction, the advantages.
//! Each returns a type for what it hands on; [`super::update_with`] calls them in turn.
//!
//! Where it sits: `Batch` → here → `super::minibatch` (the losses of each optimizer step).

use std::collections::BTreeMap;

use agentrl_rl::{
    apply_kl_to_rewards, compute_advantages_with, masked_mean_value,
    rollout_correction_and_rejection, sum_pi_squared, AdvantageExtras, AdvantageInputs,
};
use agentrl_rollout::Batch;
use anyhow::Context;
use candle_core::Tensor;

use super::score::{score, Scored};
use super::{token_rewards, BatchExtras, UpdateSetup};
use crate::algo::{KlPlacement, Knobs};

/// What the old-log-prob pass hands on: π_old and what the same forward pass gives.
pub(super) struct OldPolicy {
    /// `log π_old` per token, `[B, T]`: the trainer's own (`old_logprob_pass`) or the engine's
    /// sampling log-probs.
    pub(super) log_probs: Tensor,
    /// The critic's values before the update, `[B, T]` (a policy with a value head).
    pub(super) values: Option<Tensor>,
    /// `Σ_a π(a)²` at each action token, `[B, T]` (OTB's estimator).
    pub(super) sum_pi_squared: Option<Tensor>,
    /// Mean |log π_engine − log π_trainer| on action tokens; `None` without a pass.
    pub(super) engine_logprob_gap: Option<f64>,
    /// verl's off-policy diagnostics of the engine against the trainer (`rollout_corr/kl`,
    /// …), when the setup asks to measure the mismatch; empty otherwise.
    pub(super) mismatch: BTreeMap<String, f64>,
}

/// π_old: the trainer's own log-probs before any update (old-log-prob pass), or the engine's
/// sampling log-probs. Values for GAE and Σπ² for OTB come from the same pass, which also
/// measures the engine/trainer gap; without a reader of any of them, no pass runs.
pub(super) fn old_policy_pass(setup: &UpdateSetup<'_>, batch: &Batch) -> anyhow::Result<OldPolicy> {
    let knobs = setup.knobs;
    let needs_values = knobs.uses_critic();
    let needs_sum_pi_squared = knobs.needs_sum_pi_squared();
    if !(knobs.old_logprob_pass || needs_values || needs_sum_pi_squared || setup.measure_mismatch) {
        return Ok(OldPolicy {
            log_probs: batch.old_logprobs.clone(),
            values: None,
            sum_pi_squared: None,
            engine_logprob_gap: None,
            mismatch: BTreeMap::new(),
        });
    }
    let scored = score(
        setup.policy,
        &batch.input_ids,
        &batch.targets,
        &batch.loss_mask,
        setup.temperature,
    )?;
    let sum_pi_squared = if needs_sum_pi_squared {
        let at_positions = sum_pi_squared(&scored.logits.detach())?;
        Some(scored.scatter(&at_positions)?.detach())
    } else {
        None
    };
    let Scored { logp, values, .. } = scored;
    let logp = logp.detach();
    let engine_logprob_gap =
        Some(masked_mean_value(&(&logp - &batch.old_logprobs)?.abs()?, &batch.loss_mask)? as f64);
    let mismatch = if setup.measure_mismatch {
        // verl's off-policy diagnostics (`rollout_corr/kl`, `…/k3_kl`,
        // `…/log_ppl_abs_diff`, `…/chi2_token`, …) of the engine against the trainer.
        agentrl_rl::rollout_corr_metrics(&logp, &batch.old_logprobs, &batch.loss_mask)?
    } else {
        BTreeMap::new()
    };
    let log_probs = if knobs.old_logprob_pass {
        logp
    } else {
        batch.old_logprobs.clone()
    };
    let values = match (needs_values, values) {
        (true, None) => anyhow::bail!(
            "update: {} uses adv_estimator = gae, which trains a critic, but the policy has no \
             value head",
            setup.algorithm
        ),
        (_, values) => values.map(|v| v.detach()),
    };
    Ok(OldPolicy {
        log_probs,
        values,
        sum_pi_squared,
        engine_logprob_gap,
        mismatch,
    })
}

/// The reference policy's log-probs for the KL term, `[B, T]` (frozen; no gradient), or
/// `None` when β = 0.
pub(super) fn reference_pass(
    setup: &UpdateSetup<'_>,
    batch: &Batch,
) -> anyhow::Result<Option<Tensor>> {
    match (setup.reference, setup.kl_coef > 0.0) {
        (Some(reference), true) => {
            let logp = score(
                reference,
                &batch.input_ids,
                &batch.targets,
                &batch.loss_mask,
                setup.temperature,
            )?
            .logp;
            Ok(Some(logp.detach()))
        }
        (None, true) => anyhow::bail!("update: kl_coef > 0 but no reference policy was given"),
        _ => Ok(None),
    }
}

/// The rewards the advantages are computed from.
pub(super) struct TokenRewards {
    /// `[B, T]`: each episode's outcome reward on its last action token, minus β·KL per token
    /// where the KL penalty is in the reward.
    pub(super) rewards: Tensor,
    /// The masked mean KL to the reference that the penalty used (KL in reward only).
    pub(super) kl_ref: Option<f64>,
}

/// Outcome rewards → token rewards, with the KL penalty to the reference in them when the
/// preset places KL in the reward (`reference` is `None` when β = 0).
pub(super) fn rewards_with_kl(
    setup: &UpdateSetup<'_>,
    batch: &Batch,
    old_log_probs: &Tensor,
    reference: Option<&Tensor>,
) -> anyhow::Result<TokenRewards> {
    let knobs = setup.knobs;
    let rewards = token_rewards(&batch.loss_mask, &batch.rewards)?;
    match (reference, knobs.kl_placement) {
        (Some(ref_lp), KlPlacement::InReward) => {
            let (shaped, kl) = apply_kl_to_rewards(
                &rewards,
                old_log_probs,
                ref_lp,
                &batch.loss_mask,
                knobs.kl_loss_type,
                setup.kl_coef,
            )?;
            Ok(TokenRewards {
                rewards: shaped,
                kl_ref: Some(kl as f64),
            })
        }
        _ => Ok(TokenRewards {
            rewards,
            kl_ref: None,
        }),
    }
}

/// verl's decoupled rollout correction, applied once per batch.
pub(super) struct Correction {
    /// The loss mask of every loss term: the batch's, less the rejected tokens.
    pub(super) loss_mask: Tensor,
    /// IS weights between π_old and π_rollout, `[B, T]` (`rollout_is`).
    pub(super) is_weights: Option<Tensor>,
    /// verl's `rollout_corr/…` metrics of the correction; `None` without one.
    pub(super) metrics: Option<BTreeMap<String, f64>>,
}

/// verl's decoupled mode: IS weights and rejection between π_old and π_rollout, once per
/// batch (`algorithm.rollout_is` / `rollout_rs` without `bypass_mode`). Without a correction
/// the batch's loss mask passes through.
pub(super) fn decoupled_correction(
    knobs: &Knobs,
    batch: &Batch,
    old_log_probs: &Tensor,
) -> anyhow::Result<Correction> {
    Ok(match knobs.rollout_correction()? {
        Some(spec) => {
            let rc = rollout_correction_and_rejection(
                old_log_probs,
                &batch.old_logprobs,
                &batch.loss_mask,
                &spec,
            )
            .context("rollout correction (algorithm.rollout_is / rollout_rs)")?;
            Correction {
                loss_mask: rc.mask,
                is_weights: rc.weights,
                metrics: Some(rc.metrics),
            }
        }
        None => Correction {
            loss_mask: batch.loss_mask.clone(),
            is_weights: None,
            metrics: None,
        },
    })
}

/// What the advantage estimator hands to the losses.
pub(super) struct Advantages {
    /// `[B, T]`, 0 off the loss mask.
    pub(super) advantages: Tensor,
    /// The critic's targets, `[B, T]` (GAE only).
    pub(super) returns: Option<Tensor>,
    /// Masked mean |Â| on the corrected loss mask (a diagnostic).
    pub(super) abs_mean: f64,
}

/// The preset's advantage estimator on the token rewards. It sees the batch's original mask,
/// so a rejected episode's reward still counts in its group's statistics (verl's outcome
/// estimators sum rewards over every position); the IS weights reach the estimators that
/// read them.
pub(super) fn advantages(
    knobs: &Knobs,
    extras: &BatchExtras<'_>,
    batch: &Batch,
    rewards: &TokenRewards,
    old: &OldPolicy,
    correction: &Correction,
) -> anyhow::Result<Advantages> {
    let reward_weights: Option<Vec<f32>> = knobs
        .gdpo_reward_weights
        .as_ref()
        .map(|w| w.iter().map(|&x| x as f32).collect());
    anyhow::ensure!(
        !knobs.needs_reward_components() || extras.reward_components.is_some(),
        "update: adv_estimator = gdpo needs the episodes' reward components"
    );
    let adv = compute_advantages_with(
        &knobs.advantage_estimator(),
        &AdvantageInputs {
            token_rewards: &rewards.rewards,
            mask: &batch.loss_mask,
            group_ids: Some(&batch.group_ids),
            values: old.values.as_ref(),
        },
        &AdvantageExtras {
            reward_baselines: extras.reward_baselines,
            reward_components: extras.reward_components,
            reward_weights: reward_weights.as_deref(),
            old_log_probs: Some(&old.log_probs),
            sum_pi_squared: old.sum_pi_squared.as_ref(),
            rollout_is_weights: correction.is_weights.as_ref(),
        },
    )
    .with_context(|| {
        format!(
            "computing advantages (adv_estimator = {})",
            knobs.adv_estimator
        )
    })?;
    let abs_mean = masked_mean_value(&adv.advantages.abs()?, &correction.loss_mask)? as f64;
    Ok(Advantages {
        advantages: adv.advantages,
        returns: adv.returns,
        abs_mean,
    })
}
