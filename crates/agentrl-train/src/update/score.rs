//! Scoring a batch for an update: one forward pass of the policy at the loss positions only
//! ([`Policy::forward_at_for_update`]), the log-probs of the targets under `logits / T`, the
//! values, and the part of the backward pass the policy runs itself ([`backward`]).
//!
//! Where it sits: under every update of [`crate::update`] (RL, supervised, distillation,
//! DPO) and the scoring beside them (reference and teacher log-probs).

use agentrl_model::{ForUpdate, PendingGradients, Policy};
use agentrl_rl::{entropy_from_logits, token_log_probs};
use agentrl_rollout::Batch;
use anyhow::Context;
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor};

/// A forward pass scored at the loss positions only.
pub(super) struct Scored {
    /// `log π(targets)` under `logits / T`, `[B, T]`; 0 off the loss positions.
    pub(super) logp: Tensor,
    /// The scaled logits at the loss positions, `[1, N, V]`.
    pub(super) logits: Tensor,
    /// The entropy of `softmax(logits)` at the loss positions, `[1, N]`, where the pass that
    /// computed the log-probs gave it too (the fused CPU op); see [`Scored::entropy`].
    entropy: Option<Tensor>,
    /// Values `[B, T]` (0 off the loss positions), for a policy with a value head.
    pub(super) values: Option<Tensor>,
    /// The scored positions as flat indices into `[B, T]`.
    pub(super) positions: Tensor,
    pub(super) shape: (usize, usize),
    /// The part of the backward pass the policy runs itself ([`Policy::forward_at_for_update`]);
    /// dropped by the passes that take no gradient.
    pub(super) pending: Option<Box<dyn PendingGradients>>,
}

impl Scored {
    /// The entropy of the scored distribution at the loss positions, `[1, N]`, differentiable:
    /// the fused op's (computed beside the log-probs) or, off the CPU, candle's composed ops.
    pub(super) fn entropy(&self) -> anyhow::Result<Tensor> {
        Ok(match &self.entropy {
            Some(entropy) => entropy.clone(),
            None => entropy_from_logits(&self.logits)?,
        })
    }

    /// `[1, N]` (or `[N]`) values at the loss positions, as `[B, T]` with 0 elsewhere.
    pub(super) fn scatter(&self, at_positions: &Tensor) -> anyhow::Result<Tensor> {
        let (b, t) = self.shape;
        let flat = at_positions.flatten_all()?;
        let zeros = Tensor::zeros(b * t, flat.dtype(), flat.device())?;
        Ok(zeros
            .index_add(&self.positions, &flat, 0)?
            .reshape((b, t))?)
    }
}

/// `loss.backward()` and the part of the backward pass the policy runs itself: the full
/// gradient of every variable, ready for clipping.
pub(super) fn backward(
    loss: &Tensor,
    pending: Option<Box<dyn PendingGradients>>,
) -> anyhow::Result<GradStore> {
    let mut grads = loss.backward().context("backward pass")?;
    ForUpdate::complete(pending, &mut grads).context("backward pass (the policy's own part)")?;
    Ok(grads)
}

/// Scores `targets` under `logits / temperature` where `mask > 0` only
/// ([`Policy::forward_at`]): nothing off the loss positions enters a loss, so a large
/// vocabulary is never projected there, and the forward pass ends at the last loss column. A
/// minibatch's rows are cut from a batch padded to its longest episode, and an episode ends
/// with an observation after its last action: without the cut, a GRPO minibatch of one
/// short episode ran the forward and backward passes over the longest one's length.
pub(super) fn score(
    policy: &dyn Policy,
    ids: &Tensor,
    targets: &Tensor,
    mask: &Tensor,
    temperature: f64,
) -> anyhow::Result<Scored> {
    let (b, t) = ids.dims2()?;
    let mask_values = mask.flatten_all()?.to_vec1::<f32>()?;
    let mut columns: Vec<(usize, usize)> = mask_values
        .iter()
        .enumerate()
        .filter(|(_, &m)| m > 0.0)
        .map(|(i, _)| (i / t.max(1), i % t.max(1)))
        .collect();
    if columns.is_empty() {
        // A batch without action tokens still runs (its losses are 0): score one position.
        columns.push((0, 0));
    }
    // The forward pass stops at the last scored column: a position depends only on those
    // before it, so the tokens after every row's last action token (a final observation,
    // the padding of rows shorter than the batch's longest) change no scored value.
    let width = columns.iter().map(|&(_, col)| col + 1).max().unwrap_or(1);
    let n = columns.len();
    let index = |stride: usize| -> candle_core::Result<Tensor> {
        let flat: Vec<u32> = columns
            .iter()
            .map(|&(row, col)| (row * stride + col) as u32)
            .collect();
        Tensor::from_vec(flat, n, ids.device())
    };
    let positions = index(t)?;
    let (forward_ids, forward_positions) = if width < t {
        (ids.narrow(1, 0, width)?.contiguous()?, index(width)?)
    } else {
        (ids.clone(), positions.clone())
    };
    let ForUpdate {
        output: out,
        pending,
    } = policy
        .forward_at_for_update(&forward_ids, &forward_positions)
        .context("trainer forward")?;
    let logits = if temperature == 1.0 {
        out.logits
    } else {
        (out.logits / temperature)?
    };
    let logits = logits.unsqueeze(0)?;
    let picked_targets = targets
        .flatten_all()?
        .index_select(&positions, 0)?
        .unsqueeze(0)?;
    let (logp_n, entropy) = if logits.device().is_cpu() && logits.dtype() == DType::F32 {
        let (logp, entropy) = agentrl_model::fused::log_prob_and_entropy(
            &logits.squeeze(0)?,
            &picked_targets.squeeze(0)?,
        )?;
        (logp.unsqueeze(0)?, Some(entropy.unsqueeze(0)?))
    } else {
        (token_log_probs(&logits, &picked_targets)?, None)
    };
    let mut scored = Scored {
        logp: logp_n.clone(),
        logits,
        entropy,
        values: None,
        positions,
        shape: (b, t),
        pending,
    };
    scored.logp = scored.scatter(&logp_n)?;
    if let Some(values) = out.values {
        scored.values = Some(scored.scatter(&values)?);
    }
    Ok(scored)
}

/// [`score`] of a whole batch's action tokens at temperature 1 (the supervised, distillation
/// and DPO updates, and the scoring beside them).
pub(super) fn score_batch(policy: &dyn Policy, batch: &Batch) -> anyhow::Result<Scored> {
    score(
        policy,
        &batch.input_ids,
        &batch.targets,
        &batch.loss_mask,
        1.0,
    )
}

/// Summed log-probs of each episode's action tokens, `log π(y|x) = Σ_t m_t log π(y_t|…)`
/// (ALGORITHMS.md §14; no length normalisation), `[B]`: the numbers an update computes (the
/// same forward pass), detached (a gradient through them would miss the part of the
/// backward pass a policy runs itself; the updates here score and complete it).
pub fn sequence_log_probs_of(policy: &dyn Policy, batch: &Batch) -> anyhow::Result<Tensor> {
    let logp = score_batch(policy, batch)?.logp;
    Ok(agentrl_rl::sequence_log_probs(&logp, &batch.loss_mask)?.detach())
}

/// `log π(target)` of each action token of `batch` under `policy` (temperature 1), `[B, T]`,
/// 0 off the loss mask; detached, like [`sequence_log_probs_of`].
pub fn token_log_probs_of(policy: &dyn Policy, batch: &Batch) -> anyhow::Result<Tensor> {
    Ok(score_batch(policy, batch)?.logp.detach())
}

/// A one-element tensor as an `f64`.
pub(super) fn scalar(t: &Tensor) -> anyhow::Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}
