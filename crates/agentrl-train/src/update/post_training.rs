//! The post-training recipes' updates on episodes they bring: supervised NLL (SFT, RFT, a
//! format warm-up), on-policy distillation's reverse KL (ALGORITHMS.md §15), and DPO's
//! pairwise loss (§14). Each is one optimizer step: score, loss, backward (with the policy's
//! own part), clip, AdamW; the supervised one accumulates gradients over micro-batches.
//!
//! Where it sits: `crate::trainer` (its updates on given episodes) → here → the optimizer.

use agentrl_model::Policy;
use agentrl_rl::{aggregate, AggMode, AggScale};
use agentrl_rollout::Batch;
use anyhow::Context as _;
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use serde::{Deserialize, Serialize};

use super::score::{backward, scalar, score_batch};
use crate::optim::{clip_grad_norm, AdamW};

/// One supervised step: negative log-likelihood of the masked tokens (the action tokens of
/// demonstrations), `token-mean` aggregated over every micro-batch together, then one
/// backward per micro-batch (gradients summed, so only one micro-batch's activations live at
/// a time), gradient clipping and one optimizer step at `lr`. Each micro-batch's mean is
/// weighted by its share of the masked tokens, so the step equals one over the whole batch.
/// Returns the loss.
pub fn supervised_update(
    policy: &dyn Policy,
    optimizer: &mut AdamW,
    vars: &[Var],
    micro_batches: &[Batch],
    lr: f64,
    grad_clip: f64,
) -> anyhow::Result<f64> {
    let tokens: Vec<f64> = micro_batches
        .iter()
        .map(|batch| scalar(&batch.loss_mask.sum_all()?))
        .collect::<anyhow::Result<_>>()?;
    let total: f64 = tokens.iter().sum();
    anyhow::ensure!(
        total > 0.0,
        "supervised update: no demonstrated token to learn"
    );
    let mut loss_value = 0.0;
    let mut summed: Option<GradStore> = None;
    for (batch, &count) in micro_batches.iter().zip(&tokens) {
        if count == 0.0 {
            continue;
        }
        let scored = score_batch(policy, batch)?;
        let loss = (aggregate(
            &scored.logp.neg()?,
            &batch.loss_mask,
            AggMode::TokenMean,
            &AggScale::default(),
        )? * (count / total))?;
        loss_value += scalar(&loss)?;
        let grads = backward(&loss, scored.pending)?;
        summed = Some(match summed {
            None => grads,
            Some(previous) => add_grads(previous, grads, vars)?,
        });
    }
    anyhow::ensure!(
        loss_value.is_finite(),
        "supervised update: the loss is {loss_value}"
    );
    let mut grads = summed.context("supervised update: no micro-batch had a loss")?;
    clip_grad_norm(&mut grads, vars, grad_clip)?;
    optimizer.step(&grads, lr)?;
    Ok(loss_value)
}

/// `into + more` for every variable's gradient (gradient accumulation across micro-batches).
fn add_grads(mut into: GradStore, more: GradStore, vars: &[Var]) -> anyhow::Result<GradStore> {
    for var in vars {
        let tensor = var.as_tensor();
        if let Some(extra) = more.get(tensor) {
            let sum = match into.get(tensor) {
                Some(existing) => (existing + extra)?,
                None => extra.clone(),
            };
            into.insert(tensor, sum);
        }
    }
    Ok(into)
}

/// What one on-policy distillation update measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DistillMetrics {
    /// Mean per-token reverse KL estimate `log π_S − log π_T` over the student's sampled
    /// action tokens (the distillation loss; 0 when student and teacher agree).
    pub reverse_kl: f64,
    pub grad_norm: f64,
}

/// One on-policy distillation step (ALGORITHMS.md §15, tinker-cookbook): advantages
/// `A_t = −coef · (log π_S − log π_T)` on the student's own action tokens
/// (`agentrl_rl::distill_advantages`, detached, no future sum) into the on-policy
/// importance-sampling policy gradient `−Σ_t m_t A_t · π_S/sg(π_S) / Σ_t m_t`, whose value is
/// 0 and whose gradient is `−A_t ∇ log π_S`. `teacher_logp` is `[B, T]` (0 off the mask).
#[allow(clippy::too_many_arguments)]
pub fn distill_update(
    policy: &dyn Policy,
    optimizer: &mut AdamW,
    vars: &[Var],
    batch: &Batch,
    teacher_logp: &Tensor,
    coef: f64,
    lr: f64,
    grad_clip: f64,
    dry_run: bool,
) -> anyhow::Result<DistillMetrics> {
    let scored = score_batch(policy, batch)?;
    let logp = scored.logp;
    let mask = &batch.loss_mask;
    let kl = agentrl_rl::reverse_kl_per_token(&logp.detach(), teacher_logp)?;
    let reverse_kl = scalar(&aggregate(
        &kl,
        mask,
        AggMode::TokenMean,
        &AggScale::default(),
    )?)?;
    anyhow::ensure!(
        reverse_kl.is_finite(),
        "distillation update: the reverse KL is {reverse_kl}"
    );
    let mut grad_norm = 0.0;
    if !dry_run {
        let advantages = agentrl_rl::distill_advantages(&logp, teacher_logp, mask, coef)?;
        let ratio = logp.sub(&logp.detach())?.exp()?;
        let surrogate = advantages.mul(&ratio)?.neg()?;
        let loss = aggregate(&surrogate, mask, AggMode::TokenMean, &AggScale::default())?;
        let mut grads = backward(&loss, scored.pending)?;
        grad_norm = clip_grad_norm(&mut grads, vars, grad_clip)?;
        optimizer.step(&grads, lr)?;
    }
    Ok(DistillMetrics {
        reverse_kl,
        grad_norm,
    })
}

/// What one DPO update measured (`agentrl_rl::DpoOutput`, as numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DpoMetrics {
    pub loss: f64,
    /// Mean `β(log π − log π_ref)` of the chosen minus that of the rejected episodes.
    pub margin: f64,
    pub chosen_reward: f64,
    pub rejected_reward: f64,
    /// Share of pairs whose implicit reward prefers the chosen episode.
    pub reward_accuracy: f64,
    pub grad_norm: f64,
}

/// One DPO step (`agentrl_rl::dpo_loss`) on `pairs`, a batch of the `P` chosen episodes then
/// the `P` rejected ones (row `i` against row `P + i`), with the frozen reference's summed
/// log-probs of the same rows in `reference` (`2P` values, computed once from the start
/// weights). `dry_run` measures without updating.
#[allow(clippy::too_many_arguments)]
pub fn dpo_update(
    policy: &dyn Policy,
    optimizer: &mut AdamW,
    vars: &[Var],
    pairs: &Batch,
    reference: &[f32],
    beta: f64,
    lr: f64,
    grad_clip: f64,
    dry_run: bool,
) -> anyhow::Result<DpoMetrics> {
    let rows = pairs.group_ids.len();
    anyhow::ensure!(
        rows >= 2 && rows % 2 == 0 && reference.len() == rows,
        "DPO update: {rows} rows and {} reference log-probs; want 2P of each (P chosen, P rejected)",
        reference.len()
    );
    let p = rows / 2;
    let scored = score_batch(policy, pairs)?;
    let logp = agentrl_rl::sequence_log_probs(&scored.logp, &pairs.loss_mask)?;
    let reference = Tensor::from_slice(reference, rows, logp.device())?.to_dtype(logp.dtype())?;
    let out = agentrl_rl::dpo_loss(
        &logp.narrow(0, 0, p)?,
        &logp.narrow(0, p, p)?,
        &reference.narrow(0, 0, p)?,
        &reference.narrow(0, p, p)?,
        beta,
    )?;
    let loss = scalar(&out.loss)?;
    anyhow::ensure!(loss.is_finite(), "DPO update: the loss is {loss}");
    let mut grad_norm = 0.0;
    if !dry_run {
        let mut grads = backward(&out.loss, scored.pending)?;
        grad_norm = clip_grad_norm(&mut grads, vars, grad_clip)?;
        optimizer.step(&grads, lr)?;
    }
    Ok(DpoMetrics {
        loss,
        margin: f64::from(out.margin),
        chosen_reward: f64::from(out.chosen_reward),
        rejected_reward: f64::from(out.rejected_reward),
        reward_accuracy: f64::from(out.reward_accuracy),
        grad_norm,
    })
}
