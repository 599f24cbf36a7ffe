//! Supervised fine-tuning (`agentrl sft`, ALGORITHMS.md §14): the policy learns to imitate
//! episodes, with the loss on their action tokens only (the batch's loss mask).
//!
//! Data flow of one step: demonstrations — fresh ones from the gym's scripted expert
//! (`agentrl_gym::expert`, run through the rollout driver by
//! `agentrl_rollout::demonstrate`: rendered, parsed and scored as sampled episodes are), or a
//! slice of a JSONL file of episodes (`sft.data`) — → [`agentrl_rollout::Batch`] →
//! [`crate::update::supervised_update`] (token-mean NLL) → metrics line. A step has the shape
//! of an RL step (`rollout.tasks_per_step` tasks x `rollout.group_size` episodes, so samples
//! compare one to one), and everything around it is the RL recipe's: the [`Trainer`] (policy,
//! optimizer, run directory), the session's evaluations, checkpoints and summary
//! ([`crate::session::run_recipe_session`]). As in RL, every random stream derives from
//! `(seed, step, purpose)`, so a resumed run goes on as an uninterrupted one would.

use std::path::Path;
use std::time::Instant;

use agentrl_rollout::Episode;
use anyhow::Context;

use crate::demonstrations::expert_demonstrations;
use crate::metrics::episode_records;
use crate::session::{run_recipe_session, SessionOptions, SessionOutcome, StepObserver};
use crate::step_record::StepRecord;
use crate::streams::{epoch_slice, STREAM_DATA_ORDER};
use crate::trainer::Trainer;
use crate::update::UpdateMetrics;

/// What an SFT step trains on.
pub enum SftData {
    /// Fresh demonstrations of the gym's expert each step.
    Expert,
    /// Episodes read from a file, visited in a fresh order each epoch.
    Episodes(Vec<Episode>),
}

impl SftData {
    /// The data a config names: `sft.data`'s episodes, else the expert.
    pub fn for_config(trainer: &Trainer) -> anyhow::Result<SftData> {
        match &trainer.config.sft.data {
            None => Ok(SftData::Expert),
            Some(path) => {
                let episodes = read_episodes(Path::new(path))?;
                let max_seq = trainer.config.model.max_seq;
                for (i, e) in episodes.iter().enumerate() {
                    anyhow::ensure!(
                        e.len() <= max_seq,
                        "{path}: episode {} (line {}) has {} tokens, over model.max_seq = {max_seq}",
                        e.task_id,
                        i + 1,
                        e.len()
                    );
                }
                Ok(SftData::Episodes(episodes))
            }
        }
    }
}

/// The episodes of a JSONL file, one [`Episode`] per line (extra fields are ignored, so a
/// run's `episodes/*.jsonl` reads too); each must have action tokens to learn from.
pub fn read_episodes(path: &Path) -> anyhow::Result<Vec<Episode>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut episodes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let episode: Episode = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not an episode", path.display(), i + 1))?;
        episode
            .validate()
            .with_context(|| format!("{} line {}", path.display(), i + 1))?;
        anyhow::ensure!(
            episode.action_tokens() > 0,
            "{} line {}: episode {} has no action tokens to learn from",
            path.display(),
            i + 1,
            episode.task_id
        );
        episodes.push(episode);
    }
    anyhow::ensure!(!episodes.is_empty(), "{}: no episodes", path.display());
    Ok(episodes)
}

/// Writes `episodes` as JSONL (the format [`read_episodes`] reads).
pub fn write_episodes(path: &Path, episodes: &[Episode]) -> anyhow::Result<()> {
    let mut text = String::new();
    for episode in episodes {
        text.push_str(&serde_json::to_string(episode)?);
        text.push('\n');
    }
    agentrl_run::write_atomic(path, text.as_bytes())
}

/// One SFT step on `data`: its episodes, one supervised update at `sft.lr`, the metrics
/// record. Like a format warm-up step, the record carries the loss (`actor/sft_loss`, the NLL
/// per action token) and no rollout figures: nothing was sampled, and the policy's solve rates
/// come from the session's evaluations.
pub fn sft_step(trainer: &mut Trainer, data: &SftData) -> anyhow::Result<StepRecord> {
    let started = Instant::now();
    let step = trainer.state.step;
    let episodes = match data {
        SftData::Expert => expert_demonstrations(trainer, step)?,
        SftData::Episodes(all) => {
            let per_step =
                trainer.config.rollout.tasks_per_step * trainer.config.rollout.group_size;
            let seed = trainer.config.train.seed;
            epoch_slice(all.len(), per_step, step, seed, STREAM_DATA_ORDER)
                .into_iter()
                .map(|i| all[i].clone())
                .collect()
        }
    };
    let time_rollout_s = started.elapsed().as_secs_f64();
    let lr = trainer.config.sft.lr;
    let loss = trainer.supervised_step(&episodes, lr)?;
    let every = trainer.config.train.episodes_every;
    if crate::every(trainer.state.step, every) {
        trainer.run.write_episodes(
            trainer.state.step,
            &episode_records(&episodes, trainer.codec.as_ref(), None),
        )?;
    }
    let n = episodes.len() as f64;
    let time_step_s = started.elapsed().as_secs_f64();
    Ok(StepRecord {
        step: trainer.state.step,
        lr,
        episodes: episodes.len(),
        episode_tokens: episodes.iter().map(|e| e.len() as f64).sum::<f64>() / n,
        action_tokens: episodes
            .iter()
            .map(|e| e.action_tokens() as f64)
            .sum::<f64>()
            / n,
        update: UpdateMetrics {
            loss,
            optimizer_steps: 1,
            ..UpdateMetrics::default()
        },
        time_rollout_s,
        time_env_s: None,
        time_sync_s: None,
        time_update_s: time_step_s - time_rollout_s,
        time_step_s,
        format_warmup_loss: Some(loss),
        ..StepRecord::default()
    })
}

/// A whole SFT session (`agentrl sft`): untrained evaluation, `train.steps` SFT steps with the
/// session's checkpoints and periodic evaluations, trained evaluation, summary.
pub fn run_sft_session(
    trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
) -> anyhow::Result<SessionOutcome> {
    let data = SftData::for_config(&trainer)?;
    run_recipe_session(trainer, options, observer, &mut |t| sft_step(t, &data))
}
