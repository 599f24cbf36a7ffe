//! Reinforcement learning (`agentrl train`): the policy (TinyAgent or Qwen3) samples groups of
//! episodes in the BugFix gym, the verifier scores them, and an algorithm preset turns them
//! into an update, step after step.
//!
//! One step: pick `tasks_per_step` tasks (an epoch-wise permutation of the split derived from
//! `(seed, epoch)`) → sample a group of G episodes per task with the engine
//! ([`crate::sampler`], on the weights [`crate::engine_sync`] keeps) → rewards (+ DAPO
//! overlong shaping, dynamic sampling) → [`Batch`] → [`update_with`] → a [`StepRecord`]. With
//! `engine.async_rollouts`, the next step's episodes are sampled while this step's update
//! runs. The first `train.format_warmup_steps` steps are supervised steps on demonstrations.
//! Every random stream is derived from `(seed, step, purpose)` ([`crate::streams`]), so a
//! resumed run continues exactly where an uninterrupted one would be.
//!
//! Where it sits: a recipe on top of the trainer core ([`Trainer`]); the session
//! ([`crate::session::run_recipe_session`]) runs its steps with evaluations and checkpoints.

use std::time::Instant;

use agentrl_engine::{LogprobKind, SamplingParams};
use agentrl_model::Policy;
use agentrl_rollout::{Batch, EnvClock, Episode, Prefetched};
use agentrl_run::write_atomic_with;
use anyhow::{bail, Context};
use rand::seq::SliceRandom;

use crate::algo::{dapo, gdpo};
use crate::config::WarmupData;
use crate::demonstrations::{call_demonstrations, expert_demonstrations};
use crate::engine_sync::EngineWeights;
use crate::metrics::episode_records;
use crate::sampler::Sampler;
use crate::schedule::learning_rate;
use crate::session::{run_recipe_session, SessionOptions, SessionOutcome, StepObserver};
use crate::step_record::StepRecord;
use crate::streams::{stream, STREAM_GREEDY, STREAM_ROLLOUT, STREAM_SHUFFLE};
use crate::trainer::{sampler_of, Trainer, KL_REFERENCE_FILE};
use crate::update::{trainer_token_logprobs, update_with, BatchExtras, UpdateMetrics, UpdateSetup};

/// The RL recipe's step, on the trainer core.
impl Trainer {
    /// One training step; returns its metrics record (also appended to `metrics.jsonl`).
    pub fn step(&mut self) -> anyhow::Result<StepRecord> {
        let warmup_steps = self.config.train.format_warmup_steps;
        if self.state.step < warmup_steps {
            return self.format_warmup_step();
        }
        if warmup_steps > 0 && self.state.step == warmup_steps {
            // RL starts from the warmed-up weights with a fresh optimizer: see
            // `AdamW::reset_moments`. A run resumed here does the same.
            self.optimizer.reset_moments()?;
            if self.config.train.format_warmup_kl_anchor {
                self.anchor_reference_to_policy()?;
            }
        }
        let started = Instant::now();
        let step = self.state.step;
        let seed = self.config.train.seed;
        let group_size = self.config.rollout.group_size;
        let per_step = self.config.rollout.tasks_per_step;
        let shuffle_candidates = self.config.rollout.shuffle_candidates;
        // Episodes sampled during the previous step's update (asynchronous rollouts).
        let mut prefetched = self.prefetched.take().filter(|p| p.step == step as u64);
        let mut prefetched_env_seconds = 0.0;
        if prefetched.is_none() {
            self.sync_engine_for(step as u64)?;
        }

        // Rollouts, refilled by extra rounds when dynamic sampling drops groups.
        let mut rollout_rng = stream(seed, step as u64, STREAM_ROLLOUT);
        let mut kept: Vec<(Episode, f32)> = Vec::new();
        let mut all: Vec<Episode> = Vec::new();
        let mut groups_dropped = 0;
        let sampling = self.config.sampling.clone();
        for round in 0..dapo::sampling_rounds(&self.knobs) {
            let ahead = if round == 0 { prefetched.take() } else { None };
            let mut episodes = if let Some(ahead) = ahead {
                rollout_rng = ahead.rng;
                prefetched_env_seconds = ahead.env_seconds;
                ahead.episodes
            } else {
                let task_ids = if round == 0 {
                    self.tasks_for_step(step)
                } else {
                    // Fresh draws from the split for the refill rounds.
                    let mut ids = self.train_ids.clone();
                    ids.shuffle(&mut rollout_rng);
                    ids.truncate(per_step);
                    ids
                };
                self.sampler().sample(
                    &task_ids,
                    group_size,
                    &sampling,
                    shuffle_candidates,
                    &mut rollout_rng,
                )?
            };
            for ep in &mut episodes {
                // Unique group ids across rounds.
                ep.group_id += (round * per_step) as u32;
            }
            let mut rewards: Vec<f32> = episodes.iter().map(|e| e.reward.score).collect();
            let lens: Vec<usize> = episodes.iter().map(Episode::action_tokens).collect();
            dapo::shape_rewards(&self.knobs, &mut rewards, &lens, self.action_budget())?;
            let groups: Vec<usize> = episodes.iter().map(|e| e.group_id as usize).collect();
            let (keep, dropped) = dapo::keep_informative_groups(&self.knobs, &rewards, &groups)?;
            groups_dropped += dropped;
            for &i in &keep {
                kept.push((episodes[i].clone(), rewards[i]));
            }
            all.extend(episodes);
            if kept.len() >= per_step * group_size {
                break;
            }
        }
        let baselines = self.greedy_baselines(step, &kept)?;
        let components = gdpo::reward_components(&self.knobs, kept.iter().map(|(e, _)| &e.reward));
        let time_rollout_s = started.elapsed().as_secs_f64();
        // The trainer's log-probs of the episodes written this step, before the update (the
        // weights a sync engine sampled with): the episode view's engine/trainer mismatch.
        let every = self.config.train.episodes_every;
        let trainer_logprobs = crate::every(step + 1, every)
            .then(|| {
                trainer_token_logprobs(
                    self.policy.as_ref(),
                    &all,
                    self.codec.pad_id(),
                    &self.device,
                    sampling.temperature,
                )
            })
            .transpose()?;

        // Asynchronous rollouts: the next step's episodes are sampled on the engine's weights
        // (synced first if they would be too stale) while this step's update runs.
        let next = step + 1;
        let sample_ahead =
            self.engine.staleness_bound().allows_overlap() && next < self.config.train.steps;
        let next_tasks = if sample_ahead {
            self.sync_engine_for(next as u64)?;
            self.tasks_for_step(next)
        } else {
            Vec::new()
        };
        let action_budget = self.action_budget() as f64;

        let update_started = Instant::now();
        let lr = learning_rate(&self.config.optim, step, self.config.train.steps);
        // Field by field (the macro), so the update below may borrow the optimizer mutably.
        // The next step's environments are timed apart: that step reports them.
        let ahead_clock = EnvClock::new();
        let sampler = Sampler {
            env_clock: &ahead_clock,
            ..sampler_of!(self)
        };
        if sample_ahead && matches!(sampler.weights, EngineWeights::Trainer { .. }) {
            bail!("asynchronous rollouts need the engine's own weights (a copy or servers)");
        }
        let (update_metrics, ahead) = std::thread::scope(|scope| {
            let ahead = sample_ahead.then(|| {
                let sampling = &sampling;
                let sampler = &sampler;
                let next_tasks = &next_tasks;
                let ahead_clock = &ahead_clock;
                scope.spawn(move || -> anyhow::Result<Prefetched> {
                    let mut rng = stream(seed, next as u64, STREAM_ROLLOUT);
                    let episodes = sampler.sample(
                        next_tasks,
                        group_size,
                        sampling,
                        shuffle_candidates,
                        &mut rng,
                    )?;
                    Ok(Prefetched {
                        step: next as u64,
                        episodes,
                        rng,
                        env_seconds: ahead_clock.take_busy_seconds(),
                    })
                })
            });
            let update_metrics = if kept.is_empty() {
                // Every group had equal rewards: no signal this step (DAPO would keep sampling).
                UpdateMetrics::default()
            } else {
                let episodes: Vec<Episode> = kept.iter().map(|(e, _)| e.clone()).collect();
                let mut batch = Batch::from_episodes(&episodes, self.codec.pad_id(), &self.device)?;
                batch.rewards = kept.iter().map(|(_, r)| *r).collect();
                let setup = UpdateSetup {
                    policy: self.policy.as_ref(),
                    reference: self.reference.as_deref().map(|r| r as &dyn Policy),
                    algorithm: self.algorithm,
                    knobs: &self.knobs,
                    kl_coef: self.kl.value(),
                    temperature: self.config.sampling.temperature,
                    lr,
                    grad_clip: self.config.optim.grad_clip,
                    max_len: action_budget,
                    measure_mismatch: self.engine.has_own_weights()
                        || self.config.engine.logprob_noise > 0.0
                        || self.config.engine.logprobs != LogprobKind::TemperatureScaled,
                };
                let extras = BatchExtras {
                    reward_baselines: baselines.as_deref(),
                    reward_components: components.as_deref(),
                };
                let mut shuffle = stream(seed, step as u64, STREAM_SHUFFLE);
                update_with(
                    &setup,
                    &extras,
                    &mut self.optimizer,
                    &self.vars,
                    &batch,
                    &mut shuffle,
                )?
            };
            let ahead = match ahead {
                Some(handle) => Some(handle.join().map_err(|_| {
                    anyhow::anyhow!("the rollout thread sampling step {next} panicked")
                })??),
                None => None,
            };
            anyhow::Ok((update_metrics, ahead))
        })?;
        self.prefetched = ahead;
        if let Some(kl) = update_metrics.kl_ref {
            self.kl.update(kl, 1)?;
        }
        let time_update_s = update_started.elapsed().as_secs_f64();

        self.state.step += 1;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        self.state.episodes_seen += all.len() as u64;
        self.state.kl_coef = self.kl.value();
        let time_step_s = started.elapsed().as_secs_f64();
        self.state.train_seconds += time_step_s;

        if crate::every(self.state.step, every) {
            let records = episode_records(&all, self.codec.as_ref(), trainer_logprobs.as_deref());
            self.run.write_episodes(self.state.step, &records)?;
        }
        let remote = self.gym.take_counts();
        let record = StepRecord {
            step: self.state.step,
            lr,
            groups_dropped,
            kl_coef: self.kl.value(),
            update: update_metrics,
            time_rollout_s,
            time_env_s: Some(self.env_clock.take_busy_seconds() + prefetched_env_seconds),
            time_sync_s: Some(self.engine.take_seconds()),
            time_update_s,
            time_step_s,
            remote_failures: remote.map(|c| c.failures as f64),
            remote_retries: remote.map(|c| c.retries as f64),
            ..StepRecord::sampled(&all, step, self.config.rollout.max_turns)
        };
        Ok(record)
    }
    /// ReMax's baselines ([`Knobs::needs_greedy_baseline`]): for each kept episode, the
    /// reward (shaped as the training rewards are) of one greedy (temperature 0) episode of its
    /// task, sampled with the current policy from its own stream; `None` for other presets.
    fn greedy_baselines(
        &self,
        step: usize,
        kept: &[(Episode, f32)],
    ) -> anyhow::Result<Option<Vec<f32>>> {
        if !self.knobs.needs_greedy_baseline() || kept.is_empty() {
            return Ok(None);
        }
        let mut tasks: Vec<String> = Vec::new();
        for (e, _) in kept {
            if !tasks.contains(&e.task_id) {
                tasks.push(e.task_id.clone());
            }
        }
        let greedy = SamplingParams {
            temperature: 0.0,
            ..self.config.sampling.clone()
        };
        let mut rng = stream(self.config.train.seed, step as u64, STREAM_GREEDY);
        let shuffle = self.config.rollout.shuffle_candidates;
        let runs = self
            .sampler()
            .sample(&tasks, 1, &greedy, shuffle, &mut rng)?;
        let mut rewards: Vec<f32> = runs.iter().map(|e| e.reward.score).collect();
        let lens: Vec<usize> = runs.iter().map(Episode::action_tokens).collect();
        dapo::shape_rewards(&self.knobs, &mut rewards, &lens, self.action_budget())?;
        let of_task = |id: &String| tasks.iter().position(|t| t == id).map(|i| rewards[i]);
        Ok(Some(
            kept.iter()
                .filter_map(|(e, _)| of_task(&e.task_id))
                .collect(),
        ))
    }
    /// `train.format_warmup_kl_anchor`: the current (warmed-up) weights become the KL
    /// reference. They are written to the run's [`KL_REFERENCE_FILE`] first, so a run resumed
    /// past the hand-over anchors to the same weights ([`Self::load_newest_checkpoint`]).
    fn anchor_reference_to_policy(&mut self) -> anyhow::Result<()> {
        let Some(reference) = &self.reference else {
            bail!(
                "train.format_warmup_kl_anchor = true, but the algorithm keeps no KL reference \
                 (algorithm.kl_coef = 0)"
            );
        };
        let path = self.run.root.join(KL_REFERENCE_FILE);
        write_atomic_with(&path, |tmp| self.policy.save(tmp))?;
        reference
            .load(&path)
            .with_context(|| format!("loading {} as the KL reference", path.display()))
    }
    /// A format warm-up step (see `train.format_warmup_steps`): one SFT step
    /// ([`Self::supervised_step`]) on the demonstrations `train.format_warmup_data` names.
    fn format_warmup_step(&mut self) -> anyhow::Result<StepRecord> {
        let started = Instant::now();
        let step = self.state.step;
        let lr = self.config.train.format_warmup_lr;
        let episodes = match self.config.train.format_warmup_data {
            WarmupData::Calls => call_demonstrations(self, step)?,
            WarmupData::Expert => expert_demonstrations(self, step)?,
        };
        let loss = self.supervised_step(&episodes, lr)?;
        let time_step_s = started.elapsed().as_secs_f64();
        // A warm-up step samples no episodes: its rollout figures stay 0.
        Ok(StepRecord {
            step: self.state.step,
            lr,
            kl_coef: self.kl.value(),
            update: UpdateMetrics {
                loss,
                optimizer_steps: 1,
                ..UpdateMetrics::default()
            },
            time_env_s: None,
            time_sync_s: None,
            time_update_s: time_step_s,
            time_step_s,
            format_warmup_loss: Some(loss),
            ..StepRecord::default()
        })
    }
}

/// Trains until `train.steps` (or the stop threshold, or [`SessionOptions::stop`]) with RL
/// steps ([`Trainer::step`]), checkpointing as configured.
pub fn run_rl_session(
    trainer: Trainer,
    options: &SessionOptions,
) -> anyhow::Result<SessionOutcome> {
    run_rl_session_observed(trainer, options, &mut |_, _| Ok(()))
}

/// [`run_rl_session`], calling `observer` after each step's metrics line is written.
pub fn run_rl_session_observed(
    trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
) -> anyhow::Result<SessionOutcome> {
    run_recipe_session(trainer, options, observer, &mut Trainer::step)
}
