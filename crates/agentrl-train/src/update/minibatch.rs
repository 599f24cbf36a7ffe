//! One optimizer step's losses: the rows of a minibatch ([`Minibatch`]), scored by the policy
//! and turned into policy loss + KL + entropy (+ value loss) ([`minibatch_loss`]), and the
//! running sums of their diagnostics over the update ([`MetricSums`]).
//!
//! Where it sits: inside the epochs × minibatches loop of [`super::update_with`], after the
//! once-per-batch phases (`super::passes`) and before backward, clipping and AdamW.

use std::collections::BTreeMap;

use agentrl_model::PendingGradients;
use agentrl_rl::{
    compute_policy_loss, entropy_bonus_loss, kl_loss, masked_mean_value, value_loss, AggScale,
    PolicyLoss, PolicyLossDiagnostics, PolicyLossInputs,
};
use agentrl_rollout::Batch;
use anyhow::Context;
use candle_core::Tensor;

use super::passes::{Advantages, Correction, OldPolicy};
use super::score::{scalar, score};
use super::{UpdateMetrics, UpdateSetup};

/// What the minibatches are cut from: the batch and what the phases before the loop handed on.
pub(super) struct LossInputs<'a> {
    pub(super) batch: &'a Batch,
    pub(super) old: &'a OldPolicy,
    /// The reference log-probs, where the KL term is in the loss (not in the reward).
    pub(super) reference_in_loss: Option<&'a Tensor>,
    pub(super) correction: &'a Correction,
    pub(super) advantages: &'a Advantages,
    /// Whether the critic is trained (a GAE preset with `value_coef ≠ 0`).
    pub(super) trains_critic: bool,
}

/// The critic's inputs of one minibatch.
pub(super) struct CriticTargets {
    old_values: Tensor,
    returns: Tensor,
}

/// The rows of one minibatch, of everything its losses read.
pub(super) struct Minibatch {
    ids: Tensor,
    targets: Tensor,
    /// The loss mask after rollout rejection.
    mask: Tensor,
    /// Decoupled rollout correction's IS weights on the per-token policy loss.
    token_weights: Option<Tensor>,
    old_log_probs: Tensor,
    advantages: Tensor,
    ref_log_probs: Option<Tensor>,
    critic: Option<CriticTargets>,
}

impl LossInputs<'_> {
    /// The minibatch of batch rows `rows`.
    pub(super) fn minibatch(&self, rows: &[u32]) -> anyhow::Result<Minibatch> {
        let idx = Tensor::new(rows, self.batch.input_ids.device())?;
        let pick = |t: &Tensor| t.index_select(&idx, 0);
        let critic = if self.trains_critic {
            let returns = self
                .advantages
                .returns
                .as_ref()
                .context("the critic's advantage estimator returned no returns")?;
            let old_values = self
                .old
                .values
                .as_ref()
                .context("the critic needs the old-value pass")?;
            Some(CriticTargets {
                old_values: pick(old_values)?,
                returns: pick(returns)?,
            })
        } else {
            None
        };
        Ok(Minibatch {
            ids: pick(&self.batch.input_ids)?,
            targets: pick(&self.batch.targets)?,
            mask: pick(&self.correction.loss_mask)?,
            token_weights: self.correction.is_weights.as_ref().map(pick).transpose()?,
            old_log_probs: pick(&self.old.log_probs)?,
            advantages: pick(&self.advantages.advantages)?,
            ref_log_probs: self.reference_in_loss.map(pick).transpose()?,
            critic,
        })
    }
}

/// One optimizer step's loss, ready for backward.
pub(super) struct MinibatchLoss {
    /// Policy loss + KL + entropy bonus (+ value_coef · value loss), a scalar.
    pub(super) loss: Tensor,
    /// The part of the backward pass the policy runs itself.
    pub(super) pending: Option<Box<dyn PendingGradients>>,
    pub(super) metrics: MinibatchMetrics,
}

/// The diagnostics of one optimizer step, before its gradient.
pub(super) struct MinibatchMetrics {
    loss: f64,
    policy_loss: f64,
    /// Masked mean entropy on action tokens.
    entropy: f64,
    /// KL to the reference (0 unless the KL term is in the loss).
    kl_ref: f64,
    /// The critic's loss and clip fraction (0 without a critic).
    value_loss: f64,
    value_clipfrac: f64,
    diagnostics: PolicyLossDiagnostics,
    /// Bypass mode's `rollout_corr/…` metrics of this step.
    rollout_corr: BTreeMap<String, f64>,
}

/// Scores the minibatch with the policy and sums its losses: the preset's policy loss, the
/// KL term (KL in loss), the entropy bonus (or the entropy as a diagnostic) and the clipped
/// value loss, in that order. Each minibatch is its own optimizer step, so the aggregation
/// counts its own tokens and sequences; only `L_max` is fixed.
pub(super) fn minibatch_loss(
    setup: &UpdateSetup<'_>,
    policy_loss: &PolicyLoss,
    mb: &Minibatch,
) -> anyhow::Result<MinibatchLoss> {
    let knobs = setup.knobs;
    let scale = AggScale {
        max_len: Some(setup.max_len),
        ..AggScale::default()
    };
    let mut scored = score(
        setup.policy,
        &mb.ids,
        &mb.targets,
        &mb.mask,
        setup.temperature,
    )?;
    let pg = compute_policy_loss(
        policy_loss,
        &PolicyLossInputs {
            log_probs: &scored.logp,
            old_log_probs: &mb.old_log_probs,
            advantages: &mb.advantages,
            mask: &mb.mask,
            token_weights: mb.token_weights.as_ref(),
        },
        knobs.loss_agg_mode,
        &scale,
    )
    .with_context(|| {
        let name = if knobs.bypass_mode {
            "bypass_mode"
        } else {
            knobs.policy_loss.as_str()
        };
        format!("policy loss ({name})")
    })?;
    let mut loss = pg.loss.clone();

    let mut kl_ref = 0.0;
    if let Some(ref_lp) = &mb.ref_log_probs {
        let (kl_term, kl) = kl_loss(
            &scored.logp,
            ref_lp,
            &mb.mask,
            knobs.kl_loss_type,
            setup.kl_coef,
            knobs.loss_agg_mode,
            &scale,
        )?;
        loss = (loss + kl_term)?;
        kl_ref = kl as f64;
    }

    let entropy = if knobs.entropy_coef != 0.0 {
        let entropy = scored.scatter(&scored.entropy()?)?;
        let (bonus, h) = entropy_bonus_loss(
            &entropy,
            &mb.mask,
            knobs.entropy_coef,
            knobs.loss_agg_mode,
            &scale,
        )?;
        loss = (loss + bonus)?;
        h
    } else {
        let entropy = scored.entropy()?.detach();
        masked_mean_value(&scored.scatter(&entropy)?, &mb.mask)?
    };

    let (mut value_loss_value, mut value_clipfrac) = (0.0, 0.0);
    if let Some(critic) = &mb.critic {
        let values = scored
            .values
            .as_ref()
            .context("the critic needs a policy with a value head")?;
        let vl = value_loss(
            values,
            &critic.old_values,
            &critic.returns,
            &mb.mask,
            knobs.value_clip,
            knobs.loss_agg_mode,
            &scale,
        )?;
        loss = (loss + (vl.loss.clone() * knobs.value_coef)?)?;
        value_loss_value = scalar(&vl.loss)?;
        value_clipfrac = vl.clipfrac as f64;
    }

    let loss_value = scalar(&loss)?;
    let policy_loss_value = scalar(&pg.loss)?;
    anyhow::ensure!(
        loss_value.is_finite(),
        "update: the loss is {loss_value} (policy loss {policy_loss_value})"
    );
    let rollout_corr = pg
        .metrics
        .into_iter()
        .filter(|(key, _)| key.starts_with("rollout_corr/"))
        .collect();
    Ok(MinibatchLoss {
        loss,
        pending: scored.pending.take(),
        metrics: MinibatchMetrics {
            loss: loss_value,
            policy_loss: policy_loss_value,
            entropy: entropy as f64,
            kl_ref,
            value_loss: value_loss_value,
            value_clipfrac,
            diagnostics: pg.diagnostics,
            rollout_corr,
        },
    })
}

/// The sums of every optimizer step's diagnostics over one update (maxima for the maxima),
/// averaged into [`UpdateMetrics`] at the end.
#[derive(Default)]
pub(super) struct MetricSums {
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

impl MetricSums {
    /// Adds one optimizer step: its diagnostics and its gradient norm before clipping.
    pub(super) fn add(&mut self, step: MinibatchMetrics, grad_norm: f64) {
        for (key, value) in step.rollout_corr {
            *self.rollout_corr.entry(key).or_insert(0.0) += value;
        }
        let d = &step.diagnostics;
        self.steps += 1;
        self.loss += step.loss;
        self.policy_loss += step.policy_loss;
        self.value_loss += step.value_loss;
        self.value_clipfrac += step.value_clipfrac;
        self.entropy += step.entropy;
        self.kl_ref += step.kl_ref;
        self.approx_kl += d.approx_kl as f64;
        self.clipfrac += d.clipfrac as f64;
        self.clipfrac_upper += d.clipfrac_upper as f64;
        self.clipfrac_lower += d.clipfrac_lower as f64;
        self.dual_clipfrac += d.dual_clipfrac as f64;
        self.ratio_mean += d.ratio_mean as f64;
        self.ratio_max = self.ratio_max.max(d.ratio_max as f64);
        self.grad_norm += grad_norm;
        self.grad_norm_max = self.grad_norm_max.max(grad_norm);
    }

    /// The means over the optimizer steps, written into `metrics` (which holds what the
    /// phases before the loop measured). `kl_in_loss`: the KL term was in the loss, so its
    /// mean is the update's `kl_ref`. Bypass mode's `rollout_corr/…` means replace the
    /// batch's.
    pub(super) fn finish(self, mut metrics: UpdateMetrics, kl_in_loss: bool) -> UpdateMetrics {
        let n = self.steps.max(1) as f64;
        metrics.loss = self.loss / n;
        metrics.policy_loss = self.policy_loss / n;
        metrics.value_loss = self.value_loss / n;
        metrics.value_clipfrac = self.value_clipfrac / n;
        metrics.entropy = self.entropy / n;
        if kl_in_loss {
            metrics.kl_ref = Some(self.kl_ref / n);
        }
        metrics.approx_kl = self.approx_kl / n;
        metrics.clipfrac = self.clipfrac / n;
        metrics.clipfrac_upper = self.clipfrac_upper / n;
        metrics.clipfrac_lower = self.clipfrac_lower / n;
        metrics.dual_clipfrac = self.dual_clipfrac / n;
        metrics.ratio_mean = self.ratio_mean / n;
        metrics.ratio_max = self.ratio_max;
        metrics.grad_norm = self.grad_norm / n;
        metrics.grad_norm_max = self.grad_norm_max;
        metrics.optimizer_steps = self.steps;
        if !self.rollout_corr.is_empty() {
            metrics.rollout_corr = self
                .rollout_corr
                .into_iter()
                .map(|(k, v)| (k, v / n))
                .collect();
        }
        metrics
    }
}
