//! DPO (`agentrl dpo`, ALGORITHMS.md §14; Rafailov et al. 2023): the policy learns to prefer
//! a verified episode of a task over a failed one, held near the start weights by `dpo.beta`.
//!
//! Data flow: once, at the first step, the start policy (fresh, or `--init RUN`'s weights)
//! samples `dpo.samples_per_task` episodes of every train task
//! ([`Trainer::sample_policy_episodes`]) → per task, each failed sample (hidden tests not
//! passed) becomes the rejected side of a pair whose chosen side is one of the task's
//! verified samples, or, where the policy solved none, one of the gym expert's
//! demonstrations of the task ([`crate::demonstrations::expert_demonstrations_for`]) → the frozen
//! reference's summed action-token log-probs of both sides, scored by those same start
//! weights before any update (no second model is kept) → the pool, written to
//! `RUN/dpo_pairs.jsonl` so a resumed run trains on the same pairs → each step, a slice of
//! `rollout.tasks_per_step x rollout.group_size` pairs (a fresh order per epoch) →
//! [`Trainer::dpo_update`] (`agentrl_rl::dpo_loss`) → `dpo/loss`, `dpo/margin`,
//! `dpo/reward_accuracy` in the metrics line. The pool is fixed (offline DPO on the start
//! policy's samples, as TRL's precomputed reference log-probs), so the reference is exact.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use agentrl_rollout::Episode;
use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::demonstrations::expert_demonstrations_for;
use crate::session::{run_recipe_session, SessionOptions, SessionOutcome, StepObserver};
use crate::step_record::StepRecord;
use crate::streams::{epoch_slice, stream, STREAM_DATA_ORDER};
use crate::trainer::Trainer;
use crate::update::{DpoMetrics, UpdateMetrics};

/// Purposes of DPO's random streams (distinct from the other recipes').
const STREAM_DPO_POOL: u64 = 0x6470_6f70;
const STREAM_DPO_EXPERT: u64 = 0x6470_6f65;
const STREAM_DPO_ORDER: u64 = 0x6470_6f6f;

/// The pool's file in the run directory.
pub const PAIRS_FILE: &str = "dpo_pairs.jsonl";

/// Metric names of the DPO figures.
pub mod names {
    pub const LOSS: &str = "dpo/loss";
    /// Mean implicit-reward margin `β[(log π − log π_ref)(chosen) − (…)(rejected)]`.
    pub const MARGIN: &str = "dpo/margin";
    pub const CHOSEN_REWARD: &str = "dpo/chosen_reward";
    pub const REJECTED_REWARD: &str = "dpo/rejected_reward";
    /// Share of the step's pairs whose implicit reward prefers the chosen episode.
    pub const REWARD_ACCURACY: &str = "dpo/reward_accuracy";
    /// Pairs in the pool, and the share whose chosen side the policy sampled itself.
    pub const POOL_PAIRS: &str = "dpo/pool_pairs";
    pub const POOL_POLICY_CHOSEN: &str = "dpo/pool_policy_chosen";
}

/// Where a pair's chosen episode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChosenFrom {
    /// A sample of the policy that passed the hidden tests.
    Policy,
    /// The gym's scripted expert (the policy solved none of the task's samples).
    Expert,
}

/// One preference pair of a task, with the reference's summed action-token log-probs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub chosen: Episode,
    pub rejected: Episode,
    pub chosen_from: ChosenFrom,
    pub ref_chosen: f32,
    pub ref_rejected: f32,
}

/// Pairs of `samples` (of many tasks): each failed sample against one of its task's verified
/// samples in turn, or, for a task without one, one of `expert(task)`'s episodes in turn.
/// Reference log-probs are left 0 (see [`score_reference`]).
pub fn pair_up(
    samples: &[Episode],
    expert: &mut dyn FnMut(&str, usize) -> anyhow::Result<Vec<Episode>>,
) -> anyhow::Result<Vec<Pair>> {
    let mut by_task: BTreeMap<&str, (Vec<&Episode>, Vec<&Episode>)> = BTreeMap::new();
    for e in samples {
        let entry = by_task.entry(e.task_id.as_str()).or_default();
        if e.reward.solved() {
            entry.0.push(e);
        } else {
            entry.1.push(e);
        }
    }
    let mut pairs = Vec::new();
    for (task, (solved, failed)) in by_task {
        if failed.is_empty() {
            continue;
        }
        let (chosen, from): (Vec<Episode>, ChosenFrom) = if solved.is_empty() {
            let demos = expert(task, failed.len())?;
            anyhow::ensure!(
                demos.iter().all(|d| d.reward.solved()),
                "task {task}: an expert demonstration fails the hidden tests"
            );
            (demos, ChosenFrom::Expert)
        } else {
            (solved.into_iter().cloned().collect(), ChosenFrom::Policy)
        };
        anyhow::ensure!(!chosen.is_empty(), "task {task}: no chosen episode");
        for (i, rejected) in failed.into_iter().enumerate() {
            pairs.push(Pair {
                chosen: chosen[i % chosen.len()].clone(),
                rejected: rejected.clone(),
                chosen_from: from,
                ref_chosen: 0.0,
                ref_rejected: 0.0,
            });
        }
    }
    Ok(pairs)
}

/// Fills in the reference log-probs of `pairs` with the trainer's current weights (call it
/// before any update: those weights are the reference).
pub fn score_reference(trainer: &Trainer, pairs: &mut [Pair]) -> anyhow::Result<()> {
    let chosen: Vec<Episode> = pairs.iter().map(|p| p.chosen.clone()).collect();
    let rejected: Vec<Episode> = pairs.iter().map(|p| p.rejected.clone()).collect();
    let c = trainer.sequence_log_probs(&chosen)?;
    let r = trainer.sequence_log_probs(&rejected)?;
    for (pair, (c, r)) in pairs.iter_mut().zip(c.into_iter().zip(r)) {
        pair.ref_chosen = c;
        pair.ref_rejected = r;
    }
    Ok(())
}

/// The pool of a fresh run: the start policy's samples of every train task, paired up and
/// scored by the reference (the same weights).
pub fn build_pool(trainer: &mut Trainer) -> anyhow::Result<(Vec<Pair>, usize)> {
    let task_ids = trainer.train_task_ids().to_vec();
    let seed = trainer.config.train.seed;
    let mut rng = stream(seed, 0, STREAM_DPO_POOL);
    let samples =
        trainer.sample_policy_episodes(&task_ids, trainer.config.dpo.samples_per_task, &mut rng)?;
    let mut jobs = 0;
    let view = &*trainer;
    let mut pairs = pair_up(&samples, &mut |task, n| {
        let first = jobs;
        jobs += n;
        expert_demonstrations_for(
            view,
            &[task.to_string()],
            n,
            first,
            stream(seed, first as u64, STREAM_DPO_EXPERT),
        )
    })?;
    anyhow::ensure!(
        !pairs.is_empty(),
        "DPO: the start policy solved every one of its {} samples; no failed sample to pair",
        samples.len()
    );
    score_reference(trainer, &mut pairs)?;
    Ok((pairs, samples.len()))
}

/// Reads a pool written by [`write_pool`].
pub fn read_pool(path: &Path) -> anyhow::Result<Vec<Pair>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pairs = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Pair>(l)
                .with_context(|| format!("{} line {}: not a DPO pair", path.display(), i + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!pairs.is_empty(), "{}: no pairs", path.display());
    Ok(pairs)
}

/// Writes the pool as JSONL, one [`Pair`] per line.
pub fn write_pool(path: &Path, pairs: &[Pair]) -> anyhow::Result<()> {
    let mut text = String::new();
    for pair in pairs {
        text.push_str(&serde_json::to_string(pair)?);
        text.push('\n');
    }
    agentrl_run::write_atomic(path, text.as_bytes())
}

/// The recipe's figures of one update, under their metric names.
pub fn dpo_metrics(m: &DpoMetrics) -> BTreeMap<String, f64> {
    BTreeMap::from([
        (names::LOSS.to_string(), m.loss),
        (names::MARGIN.to_string(), m.margin),
        (names::CHOSEN_REWARD.to_string(), m.chosen_reward),
        (names::REJECTED_REWARD.to_string(), m.rejected_reward),
        (names::REWARD_ACCURACY.to_string(), m.reward_accuracy),
    ])
}

/// One DPO step on the step's slice of `pool`; `sampled` episodes (the pool's, on the first
/// step) count as this step's.
pub fn dpo_step(
    trainer: &mut Trainer,
    pool: &[Pair],
    sampled: usize,
) -> anyhow::Result<StepRecord> {
    let started = Instant::now();
    let step = trainer.state.step;
    let per_step = trainer.config.rollout.tasks_per_step * trainer.config.rollout.group_size;
    let seed = trainer.config.train.seed ^ STREAM_DPO_ORDER;
    let picked: Vec<&Pair> = epoch_slice(
        pool.len(),
        per_step.min(pool.len()),
        step,
        seed,
        STREAM_DATA_ORDER,
    )
    .into_iter()
    .map(|i| &pool[i])
    .collect();
    let chosen: Vec<Episode> = picked.iter().map(|p| p.chosen.clone()).collect();
    let rejected: Vec<Episode> = picked.iter().map(|p| p.rejected.clone()).collect();
    let reference: Vec<f32> = picked
        .iter()
        .map(|p| p.ref_chosen)
        .chain(picked.iter().map(|p| p.ref_rejected))
        .collect();
    let lr = trainer.config.dpo.lr;
    let m = trainer.dpo_update(&chosen, &rejected, &reference, lr, false)?;
    let time_step_s = started.elapsed().as_secs_f64();
    trainer.finish_step(sampled, time_step_s);
    let mut recipe_metrics = dpo_metrics(&m);
    recipe_metrics.insert(names::POOL_PAIRS.to_string(), pool.len() as f64);
    recipe_metrics.insert(
        names::POOL_POLICY_CHOSEN.to_string(),
        pool.iter()
            .filter(|p| p.chosen_from == ChosenFrom::Policy)
            .count() as f64
            / pool.len() as f64,
    );
    Ok(StepRecord {
        step: trainer.state.step,
        lr,
        update: UpdateMetrics {
            loss: m.loss,
            grad_norm: m.grad_norm,
            ..UpdateMetrics::default()
        },
        time_env_s: None,
        time_sync_s: None,
        time_update_s: time_step_s,
        time_step_s,
        recipe_metrics,
        ..StepRecord::default()
    })
}

/// A whole DPO session (`agentrl dpo`): the pool (built and saved on a fresh run, read back
/// on a resumed one), untrained evaluation, `train.steps` DPO steps with the session's
/// checkpoints and periodic evaluations, trained evaluation, summary.
pub fn run_dpo_session(
    mut trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
) -> anyhow::Result<SessionOutcome> {
    let path = trainer.run.root.join(PAIRS_FILE);
    let (pool, mut sampled) = if path.exists() {
        (read_pool(&path)?, 0)
    } else {
        anyhow::ensure!(
            trainer.state.step == 0,
            "DPO: {} is missing, and the run is at step {}: its reference pairs are lost",
            path.display(),
            trainer.state.step
        );
        let (pool, sampled) = build_pool(&mut trainer)?;
        write_pool(&path, &pool)?;
        (pool, sampled)
    };
    run_recipe_session(trainer, options, observer, &mut |t| {
        let record = dpo_step(t, &pool, sampled);
        sampled = 0;
        record
    })
}
