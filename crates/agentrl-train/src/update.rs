//! One policy update from one rollout batch: rewards → advantages → epochs × minibatches of
//! (forward, policy loss + KL + entropy (+ value loss), backward, clip, AdamW).
//!
//! Sits between `Batch` (token tensors of the sampled episodes) and the optimizer. The
//! algorithm enters only through its preset ([`crate::algo`]): the advantage estimator and the
//! policy loss; KL (in reward or in loss), the entropy bonus, the critic and the aggregation
//! are applied here with the preset's knobs, the same way for every algorithm
//! (ALGORITHMS.md §0, §2, §11, §12, §17).

use agentrl_model::Policy;
use agentrl_rl::{
    aggregate, apply_kl_to_rewards, compute_advantages_with, compute_policy_loss,
    entropy_bonus_loss, entropy_from_logits, kl_loss, masked_mean_value, token_log_probs,
    value_loss, AdvantageExtras, AdvantageInputs, AggMode, AggScale, PolicyLoss, PolicyLossInputs,
};
use agentrl_rollout::Batch;
use anyhow::Context;
use candle_core::{DType, Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::algo::{Algorithm, KlPlacement, Knobs};
use crate::optim::{clip_grad_norm, AdamW};

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
}

/// Per-episode inputs that only some presets read, in batch order (all `None` by default).
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchExtras<'a> {
    /// ReMax: the reward of the greedy episode of each episode's task
    /// ([`Algorithm::needs_greedy_baseline`]).
    pub reward_baselines: Option<&'a [f32]>,
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
}

/// Log-probs of `targets` under `logits / temperature`, the scaled logits and the values.
fn score(
    policy: &dyn Policy,
    ids: &Tensor,
    targets: &Tensor,
    temperature: f64,
) -> anyhow::Result<(Tensor, Tensor, Option<Tensor>)> {
    let out = policy.forward(ids).context("trainer forward")?;
    let logits = if temperature == 1.0 {
        out.logits
    } else {
        (out.logits / temperature)?
    };
    let logp = token_log_probs(&logits, targets)?;
    Ok((logp, logits, out.values))
}

/// Outcome rewards as `[B, T]` token rewards: `R_i` on the last action token of row `i`.
fn token_rewards(mask: &Tensor, rewards: &[f32]) -> anyhow::Result<Tensor> {
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
    // engine's sampling log-probs. Values for GAE come from the same pass.
    let needs_values = algorithm.uses_critic();
    let (old_log_probs, old_values) = if knobs.old_logprob_pass || needs_values {
        let (logp, _, values) = score(
            setup.policy,
            &batch.input_ids,
            &batch.targets,
            setup.temperature,
        )?;
        let logp = logp.detach();
        metrics.engine_logprob_gap =
            masked_mean_value(&(&logp - &batch.old_logprobs)?.abs()?, &batch.loss_mask)? as f64;
        let old = if knobs.old_logprob_pass {
            logp
        } else {
            batch.old_logprobs.clone()
        };
        let values = match (needs_values, values) {
            (true, None) => anyhow::bail!(
                "update: {algorithm} trains a critic, but the policy has no value head"
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
            let (logp, _, _) = score(
                reference,
                &batch.input_ids,
                &batch.targets,
                setup.temperature,
            )?;
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
            knobs.kl_estimator,
            setup.kl_coef,
        )?;
        rewards_bt = shaped;
        metrics.kl_ref = Some(kl as f64);
    }
    let group_ids = &batch.group_ids;
    let adv = compute_advantages_with(
        &algorithm.advantage_estimator(knobs),
        &AdvantageInputs {
            token_rewards: &rewards_bt,
            mask: &batch.loss_mask,
            group_ids: Some(group_ids),
            values: old_values.as_ref(),
        },
        &AdvantageExtras {
            reward_baselines: extras.reward_baselines,
            ..AdvantageExtras::default()
        },
    )
    .context("computing advantages")?;
    metrics.advantage_abs_mean =
        masked_mean_value(&adv.advantages.abs()?, &batch.loss_mask)? as f64;
    let mut policy_loss_kind = algorithm.policy_loss(knobs);

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
            let mask = pick(&batch.loss_mask)?;
            let old_lp = pick(&old_log_probs)?;
            let advantages = pick(&adv.advantages)?;
            // Each minibatch is its own optimizer step, so the aggregation counts its own
            // tokens and sequences; only L_max is fixed.
            let scale = AggScale {
                max_len: Some(setup.max_len),
                ..AggScale::default()
            };

            let (logp, logits, values) = score(setup.policy, &ids, &targets, setup.temperature)?;
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
                    token_weights: None,
                },
                knobs.agg,
                &scale,
            )
            .context("policy loss")?;
            let mut loss = pg.loss.clone();

            if let (Some(ref_lp), KlPlacement::InLoss) = (&ref_log_probs, knobs.kl_placement) {
                let (kl_term, kl) = kl_loss(
                    &logp,
                    &pick(ref_lp)?,
                    &mask,
                    knobs.kl_estimator,
                    setup.kl_coef,
                    knobs.agg,
                    &scale,
                )?;
                loss = (loss + kl_term)?;
                sums.kl_ref += kl as f64;
            }

            let entropy_value = if knobs.entropy_coef != 0.0 {
                let entropy = entropy_from_logits(&logits)?;
                let (bonus, h) =
                    entropy_bonus_loss(&entropy, &mask, knobs.entropy_coef, knobs.agg, &scale)?;
                loss = (loss + bonus)?;
                h
            } else {
                masked_mean_value(&entropy_from_logits(&logits.detach())?, &mask)?
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
                    knobs.agg,
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
            let mut grads = loss.backward().context("backward pass")?;
            let norm = clip_grad_norm(&mut grads, vars, setup.grad_clip)?;
            optimizer.step(&grads, setup.lr)?;

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
    Ok(metrics)
}

/// One supervised step: negative log-likelihood of the masked tokens (the action tokens of
/// demonstrations), `token-mean` aggregated, then backward, gradient clipping and one
/// optimizer step at `lr`. Returns the loss.
pub fn supervised_update(
    policy: &dyn Policy,
    optimizer: &mut AdamW,
    vars: &[Var],
    batch: &Batch,
    lr: f64,
    grad_clip: f64,
) -> anyhow::Result<f64> {
    let (logp, _, _) = score(policy, &batch.input_ids, &batch.targets, 1.0)?;
    let loss = aggregate(
        &logp.neg()?,
        &batch.loss_mask,
        AggMode::TokenMean,
        &AggScale::default(),
    )?;
    let loss_value = scalar(&loss)?;
    anyhow::ensure!(
        loss_value.is_finite(),
        "supervised update: the loss is {loss_value}"
    );
    let mut grads = loss.backward().context("backward pass")?;
    clip_grad_norm(&mut grads, vars, grad_clip)?;
    optimizer.step(&grads, lr)?;
    Ok(loss_value)
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
}

fn scalar(t: &Tensor) -> anyhow::Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// Splits `items` into `parts` contiguous chunks whose sizes differ by at most one.
fn split_even(items: &[u32], parts: usize) -> Vec<Vec<u32>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::ALL;
    use crate::config::load_config;
    use crate::optim::AdamWParams;
    use agentrl_model::{TinyAgent, TinyConfig};
    use rand::SeedableRng;

    /// A synthetic rollout batch: 2 groups × 3 episodes, prompt/observation holes in the mask,
    /// padding at the end of short rows, unequal rewards within groups.
    fn batch(device: &Device, vocab: u32) -> anyhow::Result<Batch> {
        let (b, t) = (6usize, 12usize);
        let ids: Vec<u32> = (0..b * t).map(|i| (i as u32 * 7 + 3) % vocab).collect();
        let targets: Vec<u32> = (0..b * t).map(|i| (i as u32 * 5 + 1) % vocab).collect();
        let mut mask = vec![0f32; b * t];
        for row in 0..b {
            let len = t - row; // padding on later rows
            for col in 2..len {
                // tokens 5..7 are an observation inside the episode
                if !(5..7).contains(&col) {
                    mask[row * t + col] = 1.0;
                }
            }
        }
        let sampling: Vec<f32> = mask
            .iter()
            .map(|&m| if m > 0.0 { -1.5 } else { 0.0 })
            .collect();
        Ok(Batch {
            input_ids: Tensor::from_vec(ids, (b, t), device)?,
            targets: Tensor::from_vec(targets, (b, t), device)?,
            loss_mask: Tensor::from_vec(mask, (b, t), device)?,
            old_logprobs: Tensor::from_vec(sampling, (b, t), device)?,
            turn_ids: Tensor::zeros((b, t), DType::U32, device)?,
            rewards: vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
            group_ids: vec![0, 0, 0, 1, 1, 1],
        })
    }

    /// Every preset runs two updates on a small batch (with KL and entropy switched on where
    /// the preset allows), produces finite losses and moves the weights.
    #[test]
    fn every_algorithm_updates_with_finite_loss() -> anyhow::Result<()> {
        let device = Device::Cpu;
        let cfg = TinyConfig {
            vocab_size: 40,
            d_model: 16,
            n_layers: 1,
            n_heads: 2,
            max_seq: 16,
            ..TinyConfig::for_vocab(40)
        };
        for algorithm in ALL {
            let config = load_config(
                None,
                &[
                    format!("algorithm.name={}", algorithm.as_str()),
                    "algorithm.kl_coef=0.05".into(),
                    "algorithm.entropy_coef=0.01".into(),
                ],
            )?;
            let knobs = config.algorithm.knobs.clone();
            let model = TinyAgent::new(cfg.clone(), 1, &device)?;
            let reference = TinyAgent::new(cfg.clone(), 1, &device)?;
            let named = model.named_vars();
            let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
            let before = model.named_vars()[0].1.as_tensor().copy()?;
            let mut opt = AdamW::new(
                named,
                AdamWParams {
                    beta1: 0.9,
                    beta2: 0.99,
                    eps: 1e-8,
                    weight_decay: 0.0,
                },
            )?;
            let rollout = batch(&device, 40)?;
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            for _ in 0..2 {
                let setup = UpdateSetup {
                    policy: &model,
                    reference: Some(&reference),
                    algorithm,
                    knobs: &knobs,
                    kl_coef: 0.05,
                    temperature: 1.0,
                    lr: 1e-2,
                    grad_clip: 1.0,
                    max_len: 12.0,
                };
                // ReMax's greedy baseline: a reward between the group's 0 and 1.
                let baselines = [0.5f32; 6];
                let extras = BatchExtras {
                    reward_baselines: algorithm.needs_greedy_baseline().then_some(&baselines[..]),
                };
                let m = update_with(&setup, &extras, &mut opt, &vars, &rollout, &mut rng)?;
                assert!(
                    m.loss.is_finite() && m.grad_norm.is_finite(),
                    "{algorithm}: {m:?}"
                );
                assert!(m.grad_norm > 0.0, "{algorithm}: zero gradient");
                assert!(m.entropy > 0.0 && m.kl_ref.is_some(), "{algorithm}: {m:?}");
                assert_eq!(
                    m.optimizer_steps,
                    knobs.epochs * knobs.minibatches,
                    "{algorithm}"
                );
                if algorithm.uses_critic() {
                    assert!(m.value_loss > 0.0, "{algorithm}: {m:?}");
                }
            }
            let after = model.named_vars()[0].1.as_tensor().copy()?;
            let moved = (after - before)?.abs()?.sum_all()?.to_scalar::<f32>()?;
            assert!(moved > 0.0, "{algorithm}: weights did not move");
        }
        Ok(())
    }

    #[test]
    fn outcome_reward_sits_on_the_last_action_token() -> anyhow::Result<()> {
        let mask = Tensor::new(
            &[[0f32, 1., 1., 0., 1., 0.], [0., 0., 1., 1., 0., 0.]],
            &Device::Cpu,
        )?;
        let r = token_rewards(&mask, &[2.0, -1.0])?.to_vec2::<f32>()?;
        assert_eq!(
            r,
            vec![vec![0., 0., 0., 0., 2., 0.], vec![0., 0., 0., -1., 0., 0.]]
        );
        Ok(())
    }

    #[test]
    fn minibatches_split_evenly() {
        let items: Vec<u32> = (0..7).collect();
        let parts = split_even(&items, 3);
        assert_eq!(parts, vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]);
    }
}
