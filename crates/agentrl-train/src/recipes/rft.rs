//! Rejection-sampling fine-tuning (`agentrl rft`, ALGORITHMS.md §14: RFT / RAFT / STaR): the
//! policy samples, the verifier filters, the policy imitates what passed.
//!
//! Data flow of one round (one training step): the step's tasks (as RL picks them) →
//! `rft.samples_per_task` episodes each, sampled by the current policy as an RL step samples
//! ([`Trainer::sample_policy_episodes`]) → kept if the verifier accepts them on the HIDDEN
//! tests ([`agentrl_gym::Reward::solved`]; passing the public tests alone never counts, so a
//! policy that games them learns nothing from it) → distinct kept episodes (RFT keeps
//! distinct correct paths) → `rft.sft_steps` supervised updates at `sft.lr`
//! (`Trainer::supervised_update`, NLL on action tokens) → one metrics line with the
//! samples' rollout figures and `rft/acceptance_rate`. A round that accepts nothing updates
//! nothing. Everything around it is the RL recipe's (run directory, evaluations,
//! checkpoints, summary: [`run_recipe_session`]); sampling draws from `(seed, step, purpose)`,
//! so a resumed run goes on as an uninterrupted one would.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use agentrl_rollout::{Episode, TokenSource};

use crate::metrics::episode_records;
use crate::session::{run_recipe_session, SessionOptions, SessionOutcome, StepObserver};
use crate::step_record::StepRecord;
use crate::streams::stream;
use crate::trainer::Trainer;
use crate::update::UpdateMetrics;

/// Purpose of RFT's sampling stream (distinct from RL's and SFT's).
const STREAM_RFT_SAMPLES: u64 = 0x7266_7473;

/// Metric names of the RFT figures.
pub mod names {
    /// Share of the round's samples the verifier accepted (hidden tests).
    pub const ACCEPTANCE_RATE: &str = "rft/acceptance_rate";
    /// Accepted samples, and the distinct ones among them (what SFT trains on).
    pub const ACCEPTED: &str = "rft/accepted";
    pub const DISTINCT_ACCEPTED: &str = "rft/distinct_accepted";
    /// Tasks of the round with at least one accepted sample.
    pub const TASKS_WITH_ACCEPTED: &str = "rft/tasks_with_accepted";
}

/// The episodes the verifier accepts: those that pass the hidden tests.
pub fn accepted(episodes: &[Episode]) -> Vec<&Episode> {
    episodes.iter().filter(|e| e.reward.solved()).collect()
}

/// `episodes` without repeats of one task's action tokens (the first of each is kept).
pub fn distinct<'a>(episodes: &[&'a Episode]) -> Vec<&'a Episode> {
    let mut seen = HashSet::new();
    episodes
        .iter()
        .filter(|e| {
            let actions: Vec<u32> = e
                .tokens
                .iter()
                .zip(&e.sources)
                .filter(|(_, s)| **s == TokenSource::Action)
                .map(|(t, _)| *t)
                .collect();
            seen.insert((e.task_id.clone(), actions))
        })
        .copied()
        .collect()
}

/// One RFT round: sample, keep what the hidden tests accept, SFT on the distinct kept
/// episodes; returns the metrics record.
pub fn rft_step(trainer: &mut Trainer) -> anyhow::Result<StepRecord> {
    let started = Instant::now();
    let step = trainer.state.step;
    let task_ids = trainer.tasks_for_step(step);
    let mut rng = stream(trainer.config.train.seed, step as u64, STREAM_RFT_SAMPLES);
    let samples =
        trainer.sample_policy_episodes(&task_ids, trainer.config.rft.samples_per_task, &mut rng)?;
    let time_rollout_s = started.elapsed().as_secs_f64();
    let kept = accepted(&samples);
    let train_on: Vec<Episode> = distinct(&kept).into_iter().cloned().collect();
    let lr = trainer.config.sft.lr;
    let mut loss = None;
    for _ in 0..trainer.config.rft.sft_steps {
        if train_on.is_empty() {
            break;
        }
        loss = Some(trainer.supervised_update(&train_on, lr)?);
    }
    let time_step_s = started.elapsed().as_secs_f64();
    trainer.finish_step(samples.len(), time_step_s);
    if crate::every(trainer.state.step, trainer.config.train.episodes_every) {
        trainer.run.write_episodes(
            trainer.state.step,
            &episode_records(&samples, trainer.codec.as_ref(), None),
        )?;
    }
    let tasks_with_accepted: HashSet<&str> = kept.iter().map(|e| e.task_id.as_str()).collect();
    let mut recipe_metrics = BTreeMap::from([
        (
            names::ACCEPTANCE_RATE.to_string(),
            kept.len() as f64 / samples.len().max(1) as f64,
        ),
        (names::ACCEPTED.to_string(), kept.len() as f64),
        (names::DISTINCT_ACCEPTED.to_string(), train_on.len() as f64),
        (
            names::TASKS_WITH_ACCEPTED.to_string(),
            tasks_with_accepted.len() as f64,
        ),
    ]);
    if let Some(loss) = loss {
        recipe_metrics.insert(agentrl_run::metrics::names::SFT_LOSS.to_string(), loss);
    }
    Ok(StepRecord {
        step: trainer.state.step,
        lr,
        update: UpdateMetrics {
            loss: loss.unwrap_or(0.0),
            ..UpdateMetrics::default()
        },
        time_rollout_s,
        time_env_s: None,
        time_sync_s: None,
        time_update_s: time_step_s - time_rollout_s,
        time_step_s,
        recipe_metrics,
        ..StepRecord::sampled(&samples, step, trainer.config.rollout.max_turns)
    })
}

/// A whole RFT session (`agentrl rft`): untrained evaluation, `train.steps` rounds with the
/// session's checkpoints and periodic evaluations, trained evaluation, summary.
pub fn run_rft_session(
    trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
) -> anyhow::Result<SessionOutcome> {
    run_recipe_session(trainer, options, observer, &mut rft_step)
}
