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

/// One step's episodes, after reward shaping and dynamic sampling.
struct Rollouts {
    /// The episodes the update trains on, with their shaped rewards.
    kept: Vec<(Episode, f32)>,
    /// Every episode sampled this step, kept or not (the record and the episode file).
    all: Vec<Episode>,
    /// Groups dynamic sampling dropped (all rewards equal: no signal).
    groups_dropped: usize,
    /// Busy time of the environments of the episodes sampled ahead during the previous step.
    prefetched_env_seconds: f64,
}

/// The RL recipe's step, on the trainer core.
impl Trainer {
    /// One training step; returns its metrics record (also appended to `metrics.jsonl`).
    pub fn step(&mut self) -> anyhow::Result<StepRecord> {
        let warmup_steps = self.config.train.format_warmup_steps;
        if self.state.step < warmup_steps {
            return self.format_warmup_step();
        }
        if warmup_steps > 0 && self.state.step == warmup_steps {
            self.hand_over_to_rl()?;
        }
        let started = Instant::now();
        let step = self.state.step;

        // Rollouts: a group of episodes per task, shaped rewards, uninformative groups dropped.
        let rollouts = self.collect_rollouts(step)?;
        let baselines = self.greedy_baselines(step, &rollouts.kept)?;
        let rewards = rollouts.kept.iter().map(|(e, _)| &e.reward);
        let components = gdpo::reward_components(&self.knobs, rewards);
        let time_rollout_s = started.elapsed().as_secs_f64();
        let trainer_logprobs = self.trainer_logprobs_to_store(step, &rollouts.all)?;

        // The update, while the next step's episodes are sampled (asynchronous rollouts).
        let ahead = self.tasks_to_sample_ahead(step)?;
        let update_started = Instant::now();
        let lr = learning_rate(&self.config.optim, step, self.config.train.steps);
        let extras = BatchExtras {
            reward_baselines: baselines.as_deref(),
            reward_components: components.as_deref(),
        };
        let update = self.update_sampling_ahead(step, lr, &rollouts.kept, &extras, ahead)?;
        if let Some(kl) = update.kl_ref {
            self.kl.update(kl, 1)?;
        }
        let time_update_s = update_started.elapsed().as_secs_f64();

        // Bookkeeping: the state, the episode file, the record.
        self.state.step += 1;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        self.state.episodes_seen += rollouts.all.len() as u64;
        self.state.kl_coef = self.kl.value();
        let time_step_s = started.elapsed().as_secs_f64();
        self.state.train_seconds += time_step_s;
        if crate::every(self.state.step, self.config.train.episodes_every) {
            let logprobs = trainer_logprobs.as_deref();
            let records = episode_records(&rollouts.all, self.codec.as_ref(), logprobs);
            self.run.write_episodes(self.state.step, &records)?;
        }
        let remote = self.gym.take_counts();
        Ok(StepRecord {
            step: self.state.step,
            lr,
            groups_dropped: rollouts.groups_dropped,
            kl_coef: self.kl.value(),
            update,
            time_rollout_s,
            time_env_s: Some(self.env_clock.take_busy_seconds() + rollouts.prefetched_env_seconds),
            time_sync_s: Some(self.engine.take_seconds()),
            time_update_s,
            time_step_s,
            remote_failures: remote.map(|c| c.failures as f64),
            remote_retries: remote.map(|c| c.retries as f64),
            ..StepRecord::sampled(&rollouts.all, step, self.config.rollout.max_turns)
        })
    }
    /// The first RL step after a format warm-up: RL starts from the warmed-up weights with a
    /// fresh optimizer (see `AdamW::reset_moments`; a run resumed here does the same) and,
    /// with `train.format_warmup_kl_anchor`, with those weights as the KL reference.
    fn hand_over_to_rl(&mut self) -> anyhow::Result<()> {
        self.optimizer.reset_moments()?;
        if self.config.train.format_warmup_kl_anchor {
            self.anchor_reference_to_policy()?;
        }
        Ok(())
    }
    /// Step `step`'s episodes: the ones sampled ahead during the previous step's update if
    /// there are any, else a group per task of this step's tasks on freshly synced weights;
    /// then rewards (+ DAPO's overlong shaping) and dynamic sampling, refilled by extra rounds
    /// of fresh draws from the split while it drops groups.
    fn collect_rollouts(&mut self, step: usize) -> anyhow::Result<Rollouts> {
        let per_step = self.config.rollout.tasks_per_step;
        let group_size = self.config.rollout.group_size;
        let mut prefetched = self.prefetched.take().filter(|p| p.step == step as u64);
        if prefetched.is_none() {
            self.sync_engine_for(step as u64)?;
        }
        let mut rng = stream(self.config.train.seed, step as u64, STREAM_ROLLOUT);
        let mut out = Rollouts {
            kept: Vec::new(),
            all: Vec::new(),
            groups_dropped: 0,
            prefetched_env_seconds: 0.0,
        };
        for round in 0..dapo::sampling_rounds(&self.knobs) {
            let ahead = if round == 0 { prefetched.take() } else { None };
            let mut episodes = if let Some(ahead) = ahead {
                rng = ahead.rng;
                out.prefetched_env_seconds = ahead.env_seconds;
                ahead.episodes
            } else {
                let task_ids = if round == 0 {
                    self.tasks_for_step(step)
                } else {
                    // Fresh draws from the split for the refill rounds.
                    let mut ids = self.train_ids.clone();
                    ids.shuffle(&mut rng);
                    ids.truncate(per_step);
                    ids
                };
                let (sampling, shuffle) = (
                    &self.config.sampling,
                    self.config.rollout.shuffle_candidates,
                );
                self.sampler()
                    .sample(&task_ids, group_size, sampling, shuffle, &mut rng)?
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
            out.groups_dropped += dropped;
            for &i in &keep {
                out.kept.push((episodes[i].clone(), rewards[i]));
            }
            out.all.extend(episodes);
            if out.kept.len() >= per_step * group_size {
                break;
            }
        }
        Ok(out)
    }
    /// The trainer's log-probs of the episodes, when this step writes them to the episode
    /// file: scored before the update (with the weights a sync engine sampled with), they
    /// show the engine/trainer mismatch token by token in the episode view.
    fn trainer_logprobs_to_store(
        &self,
        step: usize,
        episodes: &[Episode],
    ) -> anyhow::Result<Option<Vec<Vec<f32>>>> {
        crate::every(step + 1, self.config.train.episodes_every)
            .then(|| {
                trainer_token_logprobs(
                    self.policy.as_ref(),
                    episodes,
                    self.codec.pad_id(),
                    &self.device,
                    self.config.sampling.temperature,
                )
            })
            .transpose()
    }
    /// With asynchronous rollouts, the tasks of the next step, whose episodes are sampled
    /// during this step's update on the engine's weights (synced first if they would be too
    /// stale); `None` without them or at the last step.
    fn tasks_to_sample_ahead(&mut self, step: usize) -> anyhow::Result<Option<Vec<String>>> {
        let next = step + 1;
        if !(self.engine.staleness_bound().allows_overlap() && next < self.config.train.steps) {
            return Ok(None);
        }
        self.sync_engine_for(next as u64)?;
        Ok(Some(self.tasks_for_step(next)))
    }
    /// The update on the kept episodes ([`update_with`]; none when every group was dropped),
    /// while a second thread samples the next step's episodes on `ahead`'s tasks (kept for
    /// the next step, [`Self::collect_rollouts`]).
    fn update_sampling_ahead(
        &mut self,
        step: usize,
        lr: f64,
        kept: &[(Episode, f32)],
        extras: &BatchExtras<'_>,
        ahead: Option<Vec<String>>,
    ) -> anyhow::Result<UpdateMetrics> {
        let action_budget = self.action_budget() as f64;
        // Field by field (the macro), so the update below may borrow the optimizer mutably.
        // The next step's environments are timed apart: that step reports them.
        let ahead_clock = EnvClock::new();
        let sampler = Sampler {
            env_clock: &ahead_clock,
            ..sampler_of!(self)
        };
        if ahead.is_some() && matches!(sampler.weights, EngineWeights::Trainer { .. }) {
            bail!("asynchronous rollouts need the engine's own weights (a copy or servers)");
        }
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
            measure_mismatch: self.config.engine.measure_mismatch
                || self.engine.has_own_weights()
                || self.config.engine.logprob_noise > 0.0
                || self.config.engine.logprobs != LogprobKind::TemperatureScaled,
        };
        let seed = self.config.train.seed;
        let (metrics, prefetched) = std::thread::scope(|scope| {
            let sampler = &sampler;
            let handle =
                ahead.map(|tasks| scope.spawn(move || sample_ahead(sampler, step + 1, &tasks)));
            let metrics = if kept.is_empty() {
                // Every group had equal rewards: no signal this step (DAPO would keep sampling).
                UpdateMetrics::default()
            } else {
                let episodes: Vec<Episode> = kept.iter().map(|(e, _)| e.clone()).collect();
                let mut batch = Batch::from_episodes(&episodes, self.codec.pad_id(), &self.device)?;
                batch.rewards = kept.iter().map(|(_, r)| *r).collect();
                let mut shuffle = stream(seed, step as u64, STREAM_SHUFFLE);
                update_with(
                    &setup,
                    extras,
                    &mut self.optimizer,
                    &self.vars,
                    &batch,
                    &mut shuffle,
                )?
            };
            let prefetched = match handle {
                Some(handle) => Some(handle.join().map_err(|_| {
                    anyhow::anyhow!("the rollout thread sampling step {} panicked", step + 1)
                })??),
                None => None,
            };
            anyhow::Ok((metrics, prefetched))
        })?;
        self.prefetched = prefetched;
        Ok(metrics)
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

/// Samples step `next`'s episodes of `tasks` from that step's own rollout stream (the draw
/// the step would make itself), timing their environments on the sampler's clock.
fn sample_ahead(
    sampler: &Sampler<'_>,
    next: usize,
    tasks: &[String],
) -> anyhow::Result<Prefetched> {
    let config = sampler.config;
    let mut rng = stream(config.train.seed, next as u64, STREAM_ROLLOUT);
    let episodes = sampler.sample(
        tasks,
        config.rollout.group_size,
        &config.sampling,
        config.rollout.shuffle_candidates,
        &mut rng,
    )?;
    Ok(Prefetched {
        step: next as u64,
        episodes,
        rng,
        env_seconds: sampler.env_clock.take_busy_seconds(),
    })
}
