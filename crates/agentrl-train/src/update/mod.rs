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
//! [`update_with`] reads as the loop body: each phase is a function handing on a type of its
//! own. `passes.rs` holds the once-per-batch phases (`OldPolicy`, `TokenRewards`,
//! `Correction`, `Advantages`), `minibatch.rs` one optimizer step's losses (`Minibatch`,
//! `MinibatchLoss`) and the diagnostics summed over the steps (`MetricSums`).
//!
//! The policy is scored through [`Policy::forward_at_for_update`]: a policy may run part of its
//! forward pass outside candle's graph (TinyAgent's trunk), and the backward pass it still owes
//! ([`agentrl_model::ForUpdate::complete`]) runs right after `loss.backward()`, before the gradients are
//! clipped, so clipping and AdamW see every variable's full gradient.

use std::collections::BTreeMap;

use agentrl_model::Policy;
use agentrl_rl::PolicyLoss;
use agentrl_rollout::{Batch, Episode};
use anyhow::Context;
use candle_core::{DType, Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::algo::{Algorithm, KlPlacement, Knobs};
use crate::optim::{clip_grad_norm, AdamW};

mod minibatch;
mod passes;
mod post_training;
mod score;

use minibatch::{minibatch_loss, LossInputs, MetricSums};
use passes::{advantages, decoupled_correction, old_policy_pass, reference_pass, rewards_with_kl};

pub use post_training::{
    distill_update, dpo_update, supervised_update, DistillMetrics, DpoMetrics,
};
use score::{backward, score};
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
    /// mismatch; ~1e-7 in f32 for the local engine). `None` where nothing scored the batch
    /// before the update (see `engine.measure_mismatch`): not measured, not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_logprob_gap: Option<f64>,
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
///
/// The phases, in verl's fit-loop order and CleanRL's loop shape: once per batch, the
/// old-log-prob pass, the reference pass, rewards (with KL), the decoupled rollout
/// correction and the advantages (`passes.rs`); then epochs × minibatches, each its own
/// optimizer step (`minibatch.rs`); then the means of the steps' diagnostics.
pub fn update_with(
    setup: &UpdateSetup<'_>,
    extras: &BatchExtras<'_>,
    optimizer: &mut AdamW,
    vars: &[Var],
    batch: &Batch,
    shuffle: &mut ChaCha8Rng,
) -> anyhow::Result<UpdateMetrics> {
    let knobs = setup.knobs;
    let (b, _t) = batch.input_ids.dims2()?;
    anyhow::ensure!(b > 0, "update: empty rollout batch");

    // Once per batch: π_old, the reference, rewards → advantages.
    let old = old_policy_pass(setup, batch)?;
    let reference = reference_pass(setup, batch)?;
    let rewards = rewards_with_kl(setup, batch, &old.log_probs, reference.as_ref())?;
    let correction = decoupled_correction(knobs, batch, &old.log_probs)?;
    let advantages = advantages(knobs, extras, batch, &rewards, &old, &correction)?;
    let mut policy_loss = knobs.policy_loss()?;
    let inputs = LossInputs {
        batch,
        old: &old,
        reference_in_loss: reference
            .as_ref()
            .filter(|_| knobs.kl_placement == KlPlacement::InLoss),
        correction: &correction,
        advantages: &advantages,
        trains_critic: knobs.uses_critic() && knobs.value_coef != 0.0,
    };

    // Epochs × minibatches, one optimizer step per minibatch.
    let mut order: Vec<u32> = (0..b as u32).collect();
    let minibatches = knobs.minibatches.min(b).max(1);
    let mut sums = MetricSums::default();
    for _epoch in 0..knobs.epochs {
        order.shuffle(shuffle);
        for rows in split_even(&order, minibatches) {
            let minibatch = inputs.minibatch(&rows)?;
            if let PolicyLoss::ClipCov { seed, .. } = &mut policy_loss {
                // A fresh random pick of the covariance-selected tokens for every step.
                *seed = shuffle.random();
            }
            let step = minibatch_loss(setup, &policy_loss, &minibatch)?;
            let mut grads = backward(&step.loss, step.pending)?;
            let grad_norm = clip_grad_norm(&mut grads, vars, setup.grad_clip)?;
            optimizer.step(&grads, setup.lr)?;
            sums.add(step.metrics, grad_norm);
        }
    }

    let kl_in_loss = inputs.reference_in_loss.is_some();
    let measured = UpdateMetrics {
        engine_logprob_gap: old.engine_logprob_gap,
        kl_ref: rewards.kl_ref,
        advantage_abs_mean: advantages.abs_mean,
        rollout_corr: correction.metrics.unwrap_or(old.mismatch),
        ..UpdateMetrics::default()
    };
    Ok(sums.finish(measured, kl_in_loss))
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
