//! The update on synthetic batches: every preset and every verl name trains with finite
//! losses, rollout correction weighs and rejects, and the update's helpers. The tensor tests
//! compute on 1 thread, like every module of this binary.

use agentrl_model::{TinyAgent, TinyConfig};
use agentrl_rl::AggMode;
use agentrl_rollout::Batch;
use agentrl_train::algo::{AdvEstimatorName, Algorithm, Knobs, PolicyLossName, ALL};
use agentrl_train::config::load_config;
use agentrl_train::optim::{AdamW, AdamWParams};
use agentrl_train::update::{
    split_even, token_log_probs_of, token_rewards, update_with, BatchExtras, UpdateMetrics,
    UpdateSetup,
};
use candle_core::{DType, Device, Tensor, Var};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

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

fn tiny() -> TinyConfig {
    TinyConfig {
        vocab_size: 40,
        d_model: 16,
        n_layers: 1,
        n_heads: 2,
        max_seq: 16,
        ..TinyConfig::for_vocab(40)
    }
}

/// `rollout` with the engine's log-probs replaced by the model's own plus `shift(row, t)`:
/// a sampler that is near the trainer, as a real engine is (the synthetic -1.5 is far from
/// it, which rejection filters would reject outright).
fn near_policy(
    model: &TinyAgent,
    rollout: &Batch,
    shift: impl Fn(usize, usize) -> f32,
) -> anyhow::Result<Batch> {
    let logp = token_log_probs_of(model, rollout)?;
    let mut rows = logp.to_vec2::<f32>()?;
    let mask = rollout.loss_mask.to_vec2::<f32>()?;
    for (i, row) in rows.iter_mut().enumerate() {
        for (t, x) in row.iter_mut().enumerate() {
            *x = if mask[i][t] > 0.0 {
                *x + shift(i, t)
            } else {
                0.0
            };
        }
    }
    let mut out = rollout.clone();
    out.old_logprobs = Tensor::new(rows, rollout.old_logprobs.device())?;
    Ok(out)
}

/// Two updates of a fresh TinyAgent with `knobs` (β = 0.05 KL to a frozen reference):
/// finite losses, a gradient, the expected number of optimizer steps, weights that moved.
/// Returns the last update's metrics.
fn two_updates(
    name: &str,
    knobs: &Knobs,
    shift: Option<&dyn Fn(usize, usize) -> f32>,
) -> anyhow::Result<UpdateMetrics> {
    let device = Device::Cpu;
    let model = TinyAgent::new(tiny(), 1, &device)?;
    let reference = TinyAgent::new(tiny(), 1, &device)?;
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
    let mut rollout = batch(&device, 40)?;
    if let Some(shift) = shift {
        rollout = near_policy(&model, &rollout, shift)?;
    }
    // ReMax's greedy baseline: a reward between the group's 0 and 1; GDPO's components:
    // the reward itself, then ones that disagree with it in group 1.
    let baselines = [0.5f32; 6];
    let components: Vec<Vec<f32>> = (0..knobs.gdpo_reward_keys.len())
        .map(|k| match k {
            0 => rollout.rewards.clone(),
            _ => vec![0.0, 0.0, 1.0, 0.0, 0.0, k as f32],
        })
        .collect();
    let extras = BatchExtras {
        reward_baselines: knobs.needs_greedy_baseline().then_some(&baselines[..]),
        reward_components: knobs.needs_reward_components().then_some(&components[..]),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut last = UpdateMetrics::default();
    for _ in 0..2 {
        let setup = UpdateSetup {
            policy: &model,
            reference: Some(&reference),
            algorithm: Algorithm::Grpo,
            knobs,
            kl_coef: 0.05,
            temperature: 1.0,
            lr: 1e-2,
            grad_clip: 1.0,
            max_len: 12.0,
            measure_mismatch: false,
        };
        let m = update_with(&setup, &extras, &mut opt, &vars, &rollout, &mut rng)?;
        assert!(
            m.loss.is_finite() && m.grad_norm.is_finite(),
            "{name}: {m:?}"
        );
        assert!(m.grad_norm > 0.0, "{name}: zero gradient");
        assert!(m.entropy > 0.0 && m.kl_ref.is_some(), "{name}: {m:?}");
        assert_eq!(
            m.optimizer_steps,
            knobs.epochs * knobs.minibatches,
            "{name}"
        );
        if knobs.uses_critic() {
            assert!(m.value_loss > 0.0, "{name}: {m:?}");
        }
        last = m;
    }
    let after = model.named_vars()[0].1.as_tensor().copy()?;
    let moved = (after - before)?.abs()?.sum_all()?.to_scalar::<f32>()?;
    assert!(moved > 0.0, "{name}: weights did not move");
    Ok(last)
}

/// Every preset runs two updates on a small batch (with KL and entropy switched on where
/// the preset allows), produces finite losses and moves the weights. The presets that
/// correct rollouts see engine log-probs near the trainer's, as a real engine gives.
#[test]
fn every_algorithm_updates_with_finite_loss() -> anyhow::Result<()> {
    agentrl_train::threads::apply(1)?;
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
        let near = |_: usize, t: usize| if t % 2 == 0 { 1e-3 } else { -1e-3 };
        let shift: Option<&dyn Fn(usize, usize) -> f32> =
            knobs.corrects_rollouts().then_some(&near);
        let m = two_updates(algorithm.as_str(), &knobs, shift)?;
        assert_eq!(
            m.rollout_corr.is_empty(),
            !knobs.corrects_rollouts(),
            "{algorithm}: {:?}",
            m.rollout_corr
        );
    }
    Ok(())
}

/// Every advantage estimator and every policy loss, selected by verl's name on a preset
/// that uses another, trains; so do every aggregation mode and KL type by verl's name.
#[test]
fn every_verl_name_trains_on_another_preset() -> anyhow::Result<()> {
    agentrl_train::threads::apply(1)?;
    for &adv_estimator in AdvEstimatorName::ALL {
        let knobs = Knobs {
            adv_estimator,
            value_coef: if adv_estimator == AdvEstimatorName::Gae {
                0.5
            } else {
                0.0
            },
            ..agentrl_train::algo::rloo::PRESET
        };
        two_updates(adv_estimator.as_str(), &knobs, None)?;
    }
    for &policy_loss in PolicyLossName::ALL {
        let knobs = Knobs {
            policy_loss,
            dual_clip_c: matches!(policy_loss, PolicyLossName::DppoTv | PolicyLossName::DppoKl)
                .then_some(20.0),
            minibatches: 2,
            ..agentrl_train::algo::grpo::PRESET
        };
        two_updates(policy_loss.as_str(), &knobs, None)?;
    }
    for name in [
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ] {
        let knobs = Knobs {
            loss_agg_mode: AggMode::deserialize(toml::Value::String(name.into()))?,
            ..agentrl_train::algo::grpo::PRESET
        };
        two_updates(name, &knobs, None)?;
    }
    for name in [
        "kl",
        "abs",
        "mse",
        "low_var_kl",
        "k1+",
        "k3+",
        "low_var_kl+",
        "abs+",
    ] {
        let knobs = Knobs {
            kl_loss_type: agentrl_rl::KlEstimator::deserialize(toml::Value::String(name.into()))?,
            ..agentrl_train::algo::grpo::PRESET
        };
        two_updates(name, &knobs, None)?;
    }
    Ok(())
}

/// verl's decoupled mode on GRPO: token IS weights and the combined rejection
/// `token_k1,seq_mean_k3` with paired thresholds. Row 0's sampler is far from the trainer
/// (log ρ = ∓1.5), so both filters reject it; the others are within bounds.
#[test]
fn decoupled_rollout_correction_weighs_and_rejects() -> anyhow::Result<()> {
    agentrl_train::threads::apply(1)?;
    let knobs = Knobs {
        old_logprob_pass: true,
        rollout_is: Some(agentrl_rl::IsLevel::Token),
        rollout_rs: Some("token_k1,seq_mean_k3".into()),
        rollout_rs_threshold: Some(agentrl_rl::ThresholdSpec::Text("0.5_2.0,0.1".into())),
        ..agentrl_train::algo::grpo::PRESET
    };
    let shift = |row: usize, t: usize| {
        let size = if row == 0 { 1.5 } else { 0.05 };
        if t % 2 == 0 {
            size
        } else {
            -size
        }
    };
    let m = two_updates("decoupled", &knobs, Some(&shift))?;
    let masked = m.rollout_corr["rollout_corr/rollout_rs_masked_fraction"];
    assert!(masked > 0.0 && masked < 0.5, "{:?}", m.rollout_corr);
    assert!(
        m.rollout_corr.contains_key("rollout_corr/rollout_is_mean"),
        "{:?}",
        m.rollout_corr
    );
    // Bypass mode with the same options, both loss types, measured inside the loss.
    for loss_type in [
        agentrl_rl::BypassLossType::PpoClip,
        agentrl_rl::BypassLossType::Reinforce,
    ] {
        let bypass = Knobs {
            old_logprob_pass: false,
            bypass_mode: true,
            loss_type,
            ..knobs.clone()
        };
        let m = two_updates("bypass", &bypass, Some(&shift))?;
        assert!(
            m.rollout_corr["rollout_corr/rollout_rs_masked_fraction"] > 0.0,
            "{:?}",
            m.rollout_corr
        );
    }
    Ok(())
}

#[test]
fn outcome_reward_sits_on_the_last_action_token() -> anyhow::Result<()> {
    agentrl_train::threads::apply(1)?;
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

/// Rows `rows` of `batch` as a batch of their own.
fn rows_of(batch: &Batch, rows: &[u32]) -> anyhow::Result<Batch> {
    let idx = Tensor::new(rows, batch.input_ids.device())?;
    let pick = |t: &Tensor| t.index_select(&idx, 0);
    Ok(Batch {
        input_ids: pick(&batch.input_ids)?,
        targets: pick(&batch.targets)?,
        loss_mask: pick(&batch.loss_mask)?,
        old_logprobs: pick(&batch.old_logprobs)?,
        turn_ids: pick(&batch.turn_ids)?,
        rewards: rows.iter().map(|&r| batch.rewards[r as usize]).collect(),
        group_ids: rows.iter().map(|&r| batch.group_ids[r as usize]).collect(),
    })
}

#[test]
fn scoring_stops_at_the_last_action_token_and_changes_no_log_prob() -> anyhow::Result<()> {
    let device = Device::Cpu;
    let model = TinyAgent::new(tiny(), 1, &device)?;
    // Row 0 has an action token in the last column, so the whole batch is scored at full
    // width; rows 3..6 end 3 to 5 columns early, so scored alone the forward pass stops there.
    let whole_batch = batch(&device, 40)?;
    let whole = token_log_probs_of(&model, &whole_batch)?.to_vec2::<f32>()?;
    let short_rows = [3u32, 4, 5];
    let short = token_log_probs_of(&model, &rows_of(&whole_batch, &short_rows)?)?;
    assert_eq!(
        short.dims2()?,
        (3, 12),
        "the log-probs keep the batch's width"
    );
    for (k, row) in short.to_vec2::<f32>()?.iter().enumerate() {
        let want = &whole[short_rows[k] as usize];
        for (t, (a, b)) in row.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() < 1e-6,
                "row {}, column {t}: {a} vs {b}",
                short_rows[k]
            );
        }
    }

    // Columns past the last action token are never fed: a batch wider than the model's
    // context scores when its action tokens sit inside the context.
    let (b, t) = (2usize, tiny().max_seq + 6);
    let ids: Vec<u32> = (0..b * t).map(|i| (i as u32 * 3 + 1) % 40).collect();
    let mut mask = vec![0f32; b * t];
    mask[3..9].fill(1.0);
    mask[t + 2..t + 12].fill(1.0);
    let wide = Batch {
        input_ids: Tensor::from_vec(ids.clone(), (b, t), &device)?,
        targets: Tensor::from_vec(ids, (b, t), &device)?,
        loss_mask: Tensor::from_vec(mask, (b, t), &device)?,
        old_logprobs: Tensor::zeros((b, t), DType::F32, &device)?,
        turn_ids: Tensor::zeros((b, t), DType::U32, &device)?,
        rewards: vec![1.0, 0.0],
        group_ids: vec![0, 0],
    };
    let logp = token_log_probs_of(&model, &wide)?.to_vec2::<f32>()?;
    assert!(logp[1][11] < 0.0 && logp[1][12] == 0.0);
    Ok(())
}
