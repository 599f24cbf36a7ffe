//! One policy update from one rollout batch: rewards → (rollout correction) → advantages →
//! epochs × minibatches of (forward, policy loss + KL + entropy (+ value loss), backward,
//! clip, AdamW).
//!
//! Sits between `Batch` (token tensors of the sampled episodes) and the optimizer. The
//! algorithm enters only through its resolved knobs ([`crate::algo`]): the advantage estimator
//! and the policy loss they name; KL (in reward or in loss), the entropy bonus, the critic, the
//! aggregation and verl's decoupled rollout correction are applied here with the same knobs,
//! the same way for every algorithm (ALGORITHMS.md §0, §2, §11, §12, §13, §17).
//!
//! Decoupled rollout correction (`rollout_is` / `rollout_rs` without `bypass_mode`) runs once
//! per batch, as in verl's trainer: after the old-log-prob pass, between the trainer's π_old
//! and the engine's π_rollout; its IS weights multiply every minibatch's per-token policy loss
//! and its rejected tokens leave the loss mask of the policy, KL, entropy and value terms. The
//! advantages are computed on the original mask, so a rejected episode's reward still counts
//! in its group's statistics, as verl's outcome estimators sum rewards over every position.
//!
//! The policy is scored through [`Policy::forward_at_for_update`]: a policy may run part of its
//! forward pass outside candle's graph (TinyAgent's trunk), and the backward pass it still owes
//! ([`agentrl_model::ForUpdate::complete`]) runs right after `loss.backward()`, before the gradients are
//! clipped, so clipping and AdamW see every variable's full gradient.

use std::collections::BTreeMap;

use agentrl_model::Policy;
use agentrl_rl::{
    apply_kl_to_rewards, compute_advantages_with, compute_policy_loss, entropy_bonus_loss, kl_loss,
    masked_mean_value, rollout_correction_and_rejection, sum_pi_squared, value_loss,
    AdvantageExtras, AdvantageInputs, AggScale, PolicyLoss, PolicyLossInputs,
};
use agentrl_rollout::{Batch, Episode};
use anyhow::Context;
use candle_core::{DType, Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::algo::{Algorithm, KlPlacement, Knobs};
use crate::optim::{clip_grad_norm, AdamW};

mod post_training;
mod score;

pub use post_training::{
    distill_update, dpo_update, supervised_update, DistillMetrics, DpoMetrics,
};
use score::{backward, scalar, score, Scored};
pub use score::{sequence_log_probs_of, token_log_probs_of};

/// Everything the update needs besides the batch.
pub struct UpdateSetup<'a> {
    /// The policy being trained (any [`Policy`]; an action grammar is part of the policy).
    pub policy: &'a dyn Policy,
    /// Frozen reference policy for the KL term (`None` when β = 0).
    pub reference: Option<&'a dyn Policy>,
    pub algorithm: Algorithm,
    pub knobs: &'a Knobs,
    /// Current β (fixed or from the adaptive controller).
    pub kl_coef: f64,
    /// Sampling temperature: the trainer scores `logits / T`, the distribution the engine
    /// sampled from, so on-policy ratios are 1.
    pub temperature: f64,
    pub lr: f64,
    pub grad_clip: f64,
    /// `L_max` of `seq-mean-token-sum-norm` (the action-token budget of an episode).
    pub max_len: f64,
    /// Score the batch with the trainer before the update even when the preset does not
    /// need it, to measure the engine/trainer mismatch (`rollout_corr/…`): set when the
    /// engine does not sample with the trainer's own weights (a server, a bf16 copy, stale
    /// rollouts, injected noise).
    pub measure_mismatch: bool,
}

/// Per-episode inputs that only some presets read, in batch order (all `None` by default).
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchExtras<'a> {
    /// ReMax: the reward of the greedy episode of each episode's task
    /// ([`Knobs::needs_greedy_baseline`]).
    pub reward_baselines: Option<&'a [f32]>,
    /// GDPO: `components[k][i]`, reward component `k` (`algorithm.gdpo_reward_keys`) of
    /// episode `i` ([`crate::algo::gdpo::reward_components`]).
    pub reward_components: Option<&'a [Vec<f32>]>,
}

/// Diagnostics of one update, averaged over its optimizer steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateMetrics {
    pub loss: f64,
    pub policy_loss: f64,
    pub value_loss: f64,
    pub value_clipfrac: f64,
    /// Masked mean entropy of the policy on action tokens.
    pub entropy: f64,
    /// Masked mean KL estimate to the reference policy (only when β > 0).
    pub kl_ref: Option<f64>,
    /// k1 estimate of KL(π_old ‖ π_θ) from the policy loss.
    pub approx_kl: f64,
    pub clipfrac: f64,
    pub clipfrac_upper: f64,
    pub clipfrac_lower: f64,
    /// Share of tokens where the dual-clip bound was active (verl `pg_clipfrac_lower`).
    #[serde(default)]
    pub dual_clipfrac: f64,
    pub ratio_mean: f64,
    pub ratio_max: f64,
    /// Global gradient norm before clipping (mean over optimizer steps).
    pub grad_norm: f64,
    pub grad_norm_max: f64,
    pub advantage_abs_mean: f64,
    /// Mean |log π_engine − log π_trainer| on action tokens, before the update (engine/trainer
    /// mismatch; ~1e-7 in f32 for the local engine).
    pub engine_logprob_gap: f64,
    pub optimizer_steps: usize,
    /// verl's rollout-correction metrics under verl's names (`rollout_corr/rollout_is_mean`,
    /// `rollout_corr/rollout_rs_masked_fraction`, `rollout_corr/kl`, …): once per batch in
    /// decoupled mode, averaged over the optimizer steps in bypass mode. Empty without a
    /// correction.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rollout_corr: BTreeMap<String, f64>,
}

/// Outcome rewards as `[B, T]` token rewards: `R_i` on the last action token of row `i`.
// Public for the integration tests (tests/train/update.rs).
#[doc(hidden)]
pub fn token_rewards(mask: &Tensor, rewards: &[f32]) -> anyhow::Result<Tensor> {
    let rows = mask.to_vec2::<f32>()?;
    anyhow::ensure!(
        rows.len() == rewards.len(),
        "rollout batch: {} rows but {} rewards",
        rows.len(),
        rewards.len()
    );
    let t = rows.first().map_or(0, Vec::len);
    let mut out = vec![0f32; rows.len() * t];
    for (i, row) in rows.iter().enumerate() {
        if let Some(last) = row.iter().rposition(|&m| m > 0.0) {
            out[i * t + last] = rewards[i];
        }
    }
    Ok(Tensor::from_vec(out, (rows.len(), t), mask.device())?)
}

/// Runs the whole update on one rollout batch. `shuffle` orders the minibatches (derived from
/// `(seed, step)` by the caller, so a resumed run shuffles identically).
///
/// `batch.rewards` are the episodes' outcome rewards after any shaping.
pub fn update(
    setup: &UpdateSetup<'_>,
    optimizer: &mut AdamW,
    vars: &[Var],
    batch: &Batch,
    shuffle: &mut ChaCha8Rng,
) -> anyhow::Result<UpdateMetrics> {
    update_with(
        setup,
        &BatchExtras::default(),
        optimizer,
        vars,
        batch,
        shuffle,
    )
}

/// [`update`] with the per-episode inputs only some presets read.
pub fn update_with(
    setup: &UpdateSetup<'_>,
    extras: &BatchExtras<'_>,
    optimizer: &mut AdamW,
    vars: &[Var],
    batch: &Batch,
    shuffle: &mut ChaCha8Rng,
) -> anyhow::Result<UpdateMetrics> {
    let knobs = setup.knobs;
    let algorithm = setup.algorithm;
    let (b, _t) = batch.input_ids.dims2()?;
    anyhow::ensure!(b > 0, "update: empty rollout batch");
    let device: Device = batch.input_ids.device().clone();
    let mut metrics = UpdateMetrics::default();

    // π_old: the trainer's own log-probs before any update (old-log-prob pass), or the
    // engine's sampling log-probs. Values for GAE and Σπ² for OTB come from the same pass.
    let needs_values = knobs.uses_critic();
    let needs_sum_pi_squared = knobs.needs_sum_pi_squared();
    let mut old_sum_pi_squared = None;
    let (old_log_probs, old_values) =
        if knobs.old_logprob_pass || needs_values || needs_sum_pi_squared || setup.measure_mismatch
        {
            let scored = score(
                setup.policy,
                &batch.input_ids,
                &batch.targets,
                &batch.loss_mask,
                setup.temperature,
            )?;
            if needs_sum_pi_squared {
                let at_positions = sum_pi_squared(&scored.logits.detach())?;
                old_sum_pi_squared = Some(scored.scatter(&at_positions)?.detach());
            }
            let Scored { logp, values, .. } = scored;
            let logp = logp.detach();
            metrics.engine_logprob_gap =
                masked_mean_value(&(&logp - &batch.old_logprobs)?.abs()?, &batch.loss_mask)? as f64;
            if setup.measure_mismatch {
                // verl's off-policy diagnostics (`rollout_corr/kl`, `…/k3_kl`,
                // `…/log_ppl_abs_diff`, `…/chi2_token`, …) of the engine against the trainer.
                metrics.rollout_corr =
                    agentrl_rl::rollout_corr_metrics(&logp, &batch.old_logprobs, &batch.loss_mask)?;
            }
            let old = if knobs.old_logprob_pass {
                logp
            } else {
                batch.old_logprobs.clone()
            };
            let values = match (needs_values, values) {
                (true, None) => anyhow::bail!(
                    "update: {algorithm} uses adv_estimator = gae, which trains a critic, but the \
                 policy has no value head"
                ),
                (_, values) => values.map(|v| v.detach()),
            };
            (old, values)
        } else {
            (batch.old_logprobs.clone(), None)
        };

    // Reference log-probs for KL (frozen policy; no gradient).
    let ref_log_probs = match (setup.reference, setup.kl_coef > 0.0) {
        (Some(reference), true) => {
            let logp = score(
                reference,
                &batch.input_ids,
                &batch.targets,
                &batch.loss_mask,
                setup.temperature,
            )?
            .logp;
            Some(logp.detach())
        }
        (None, true) => anyhow::bail!("update: kl_coef > 0 but no reference policy was given"),
        _ => None,
    };

    // Rewards → (KL-shaped) token rewards → advantages.
    let mut rewards_bt = token_rewards(&batch.loss_mask, &batch.rewards)?;
    if let (Some(ref_lp), KlPlacement::InReward) = (&ref_log_probs, knobs.kl_placement) {
        let (shaped, kl) = apply_kl_to_rewards(
            &rewards_bt,
            &old_log_probs,
            ref_lp,
            &batch.loss_mask,
            knobs.kl_loss_type,
            setup.kl_coef,
        )?;
        rewards_bt = shaped;
        metrics.kl_ref = Some(kl as f64);
    }
    // verl's decoupled mode: IS weights and rejection between π_old and π_rollout, once.
    let (loss_mask, is_weights) = match knobs.rollout_correction()? {
        Some(spec) => {
            let rc = rollout_correction_and_rejection(
                &old_log_probs,
                &batch.old_logprobs,
                &batch.loss_mask,
                &spec,
            )
            .context("rollout correction (algorithm.rollout_is / rollout_rs)")?;
            metrics.rollout_corr = rc.metrics;
            (rc.mask, rc.weights)
        }
        None => (batch.loss_mask.clone(), None),
    };

    let group_ids = &batch.group_ids;
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
            token_rewards: &rewards_bt,
            mask: &batch.loss_mask,
            group_ids: Some(group_ids),
            values: old_values.as_ref(),
        },
        &AdvantageExtras {
            reward_baselines: extras.reward_baselines,
            reward_components: extras.reward_components,
            reward_weights: reward_weights.as_deref(),
            old_log_probs: Some(&old_log_probs),
            sum_pi_squared: old_sum_pi_squared.as_ref(),
            rollout_is_weights: is_weights.as_ref(),
        },
    )
    .with_context(|| {
        format!(
            "computing advantages (adv_estimator = {})",
            knobs.adv_estimator
        )
    })?;
    metrics.advantage_abs_mean = masked_mean_value(&adv.advantages.abs()?, &loss_mask)? as f64;
    let mut policy_loss_kind = knobs.policy_loss()?;

    // Epochs × minibatches, one optimizer step per minibatch.
    let mut order: Vec<u32> = (0..b as u32).collect();
    let minibatches = knobs.minibatches.min(b).max(1);
    let mut sums = Sums::default();
    for _epoch in 0..knobs.epochs {
        order.shuffle(shuffle);
        for chunk in split_even(&order, minibatches) {
            let idx = Tensor::new(chunk.as_slice(), &device)?;
            let pick = |t: &Tensor| t.index_select(&idx, 0);
            let ids = pick(&batch.input_ids)?;
            let targets = pick(&batch.targets)?;
            let mask = pick(&loss_mask)?;
            let token_weights = is_weights.as_ref().map(pick).transpose()?;
            let old_lp = pick(&old_log_probs)?;
            let advantages = pick(&adv.advantages)?;
            // Each minibatch is its own optimizer step, so the aggregation counts its own
            // tokens and sequences; only L_max is fixed.
            let scale = AggScale {
                max_len: Some(setup.max_len),
                ..AggScale::default()
            };

            let mut scored = score(setup.policy, &ids, &targets, &mask, setup.temperature)?;
            let logp = scored.logp.clone();
            let values = scored.values.clone();
            if let PolicyLoss::ClipCov { seed, .. } = &mut policy_loss_kind {
                // A fresh random pick of the covariance-selected tokens for every optimizer step.
                *seed = shuffle.random();
            }
            let pg = compute_policy_loss(
                &policy_loss_kind,
                &PolicyLossInputs {
                    log_probs: &logp,
                    old_log_probs: &old_lp,
                    advantages: &advantages,
                    mask: &mask,
                    token_weights: token_weights.as_ref(),
                },
                knobs.loss_agg_mode,
                &scale,
            )
            .with_context(|| {
                format!(
                    "policy loss ({})",
                    if knobs.bypass_mode {
                        "bypass_mode"
                    } else {
                        knobs.policy_loss.as_str()
                    }
                )
            })?;
            let mut loss = pg.loss.clone();

            if let (Some(ref_lp), KlPlacement::InLoss) = (&ref_log_probs, knobs.kl_placement) {
                let (kl_term, kl) = kl_loss(
                    &logp,
                    &pick(ref_lp)?,
                    &mask,
                    knobs.kl_loss_type,
                    setup.kl_coef,
                    knobs.loss_agg_mode,
                    &scale,
                )?;
                loss = (loss + kl_term)?;
                sums.kl_ref += kl as f64;
            }

            let entropy_value = if knobs.entropy_coef != 0.0 {
                let entropy = scored.scatter(&scored.entropy()?)?;
                let (bonus, h) = entropy_bonus_loss(
                    &entropy,
                    &mask,
                    knobs.entropy_coef,
                    knobs.loss_agg_mode,
                    &scale,
                )?;
                loss = (loss + bonus)?;
                h
            } else {
                let entropy = scored.entropy()?.detach();
                masked_mean_value(&scored.scatter(&entropy)?, &mask)?
            };

            if needs_values && knobs.value_coef != 0.0 {
                let returns = adv
                    .returns
                    .as_ref()
                    .context("the critic's advantage estimator returned no returns")?;
                let old_v = old_values
                    .as_ref()
                    .context("the critic needs the old-value pass")?;
                let values = values
                    .as_ref()
                    .context("the critic needs a policy with a value head")?;
                let vl = value_loss(
                    values,
                    &pick(old_v)?,
                    &pick(returns)?,
                    &mask,
                    knobs.value_clip,
                    knobs.loss_agg_mode,
                    &scale,
                )?;
                loss = (loss + (vl.loss.clone() * knobs.value_coef)?)?;
                sums.value_loss += scalar(&vl.loss)?;
                sums.value_clipfrac += vl.clipfrac as f64;
            }

            let loss_value = scalar(&loss)?;
            anyhow::ensure!(
                loss_value.is_finite(),
                "update: the loss is {loss_value} (policy loss {})",
                scalar(&pg.loss)?
            );
            let mut grads = backward(&loss, scored.pending.take())?;
            let norm = clip_grad_norm(&mut grads, vars, setup.grad_clip)?;
            optimizer.step(&grads, setup.lr)?;

            for (key, value) in &pg.metrics {
                if key.starts_with("rollout_corr/") {
                    *sums.rollout_corr.entry(key.clone()).or_insert(0.0) += value;
                }
            }
            let d = &pg.diagnostics;
            sums.steps += 1;
            sums.loss += loss_value;
            sums.policy_loss += scalar(&pg.loss)?;
            sums.entropy += entropy_value as f64;
            sums.approx_kl += d.approx_kl as f64;
            sums.clipfrac += d.clipfrac as f64;
            sums.clipfrac_upper += d.clipfrac_upper as f64;
            sums.clipfrac_lower += d.clipfrac_lower as f64;
            sums.dual_clipfrac += d.dual_clipfrac as f64;
            sums.ratio_mean += d.ratio_mean as f64;
            sums.ratio_max = sums.ratio_max.max(d.ratio_max as f64);
            sums.grad_norm += norm;
            sums.grad_norm_max = sums.grad_norm_max.max(norm);
        }
    }
    let n = sums.steps.max(1) as f64;
    metrics.loss = sums.loss / n;
    metrics.policy_loss = sums.policy_loss / n;
    metrics.value_loss = sums.value_loss / n;
    metrics.value_clipfrac = sums.value_clipfrac / n;
    metrics.entropy = sums.entropy / n;
    if knobs.kl_placement == KlPlacement::InLoss && ref_log_probs.is_some() {
        metrics.kl_ref = Some(sums.kl_ref / n);
    }
    metrics.approx_kl = sums.approx_kl / n;
    metrics.clipfrac = sums.clipfrac / n;
    metrics.clipfrac_upper = sums.clipfrac_upper / n;
    metrics.clipfrac_lower = sums.clipfrac_lower / n;
    metrics.dual_clipfrac = sums.dual_clipfrac / n;
    metrics.ratio_mean = sums.ratio_mean / n;
    metrics.ratio_max = sums.ratio_max;
    metrics.grad_norm = sums.grad_norm / n;
    metrics.grad_norm_max = sums.grad_norm_max;
    metrics.optimizer_steps = sums.steps;
    if !sums.rollout_corr.is_empty() {
        metrics.rollout_corr = sums
            .rollout_corr
            .into_iter()
            .map(|(k, v)| (k, v / n))
            .collect();
    }
    Ok(metrics)
}

/// The trainer's log-prob of every token of `episodes` under `policy`'s current weights at
/// `temperature` (what the old-log-prob pass of [`update_with`] scores), in episode order:
/// one value per token, 0 on prompt and observation tokens as in [`Episode::logprobs`].
///
/// Stored beside the engine's sampling log-probs in `episodes/step_N.jsonl`, so the episode
/// view shows engine/trainer mismatch token by token. Called before the update, it scores
/// with the weights a synchronous engine sampled with. One forward pass over all `episodes`,
/// like the old-log-prob pass; an episode too short to score (under 2 tokens) gets zeros.
pub fn trainer_token_logprobs(
    policy: &dyn Policy,
    episodes: &[Episode],
    pad: u32,
    device: &Device,
    temperature: f64,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut out: Vec<Vec<f32>> = episodes.iter().map(|e| vec![0.0; e.len()]).collect();
    let scorable: Vec<usize> = (0..episodes.len())
        .filter(|&i| episodes[i].len() >= 2)
        .collect();
    if scorable.is_empty() {
        return Ok(out);
    }
    let picked: Vec<Episode> = scorable.iter().map(|&i| episodes[i].clone()).collect();
    let batch = Batch::from_episodes(&picked, pad, device)
        .context("scoring the stored episodes with the trainer")?;
    let scored = score(
        policy,
        &batch.input_ids,
        &batch.targets,
        &batch.loss_mask,
        temperature,
    )
    .context("scoring the stored episodes with the trainer")?;
    let rows = scored
        .logp
        .detach()
        .to_dtype(DType::F32)?
        .to_vec2::<f32>()?;
    for (&i, row) in scorable.iter().zip(&rows) {
        // Column `t` predicts token `t + 1` (`Batch`'s alignment); off the loss mask it is 0.
        let n = out[i].len();
        out[i][1..].copy_from_slice(&row[..n - 1]);
    }
    Ok(out)
}

#[derive(Default)]
struct Sums {
    steps: usize,
    loss: f64,
    policy_loss: f64,
    value_loss: f64,
    value_clipfrac: f64,
    entropy: f64,
    kl_ref: f64,
    approx_kl: f64,
    clipfrac: f64,
    clipfrac_upper: f64,
    clipfrac_lower: f64,
    dual_clipfrac: f64,
    ratio_mean: f64,
    ratio_max: f64,
    grad_norm: f64,
    grad_norm_max: f64,
    /// Bypass mode's `rollout_corr/…` metrics, summed over optimizer steps.
    rollout_corr: BTreeMap<String, f64>,
}

/// Splits `items` into `parts` contiguous chunks whose sizes differ by at most one.
// Public for the integration tests (tests/train/update.rs).
#[doc(hidden)]
pub fn split_even(items: &[u32], parts: usize) -> Vec<Vec<u32>> {
    let (base, extra) = (items.len() / parts, items.len() % parts);
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for p in 0..parts {
        let len = base + usize::from(p < extra);
        out.push(items[start..start + len].to_vec());
        start += len;
    }
    out
}
