//! The training loop: TinyAgent, the BugFix gym and an algorithm preset, step after step, with
//! metrics, sampled episodes and checkpoints in the run directory.
//!
//! One step: pick `tasks_per_step` tasks (an epoch-wise permutation of the split derived from
//! `(seed, epoch)`) → sample a group of G episodes per task with the local engine →
//! rewards (+ DAPO overlong shaping, dynamic sampling) → [`Batch`] → [`update`] → metrics line.
//! Every random stream is derived from `(seed, step, purpose)`, so the step counter is the whole
//! RNG state and a resumed run continues exactly where an uninterrupted one would be.

use std::sync::Arc;
use std::time::Instant;

use agentrl_chat::tiny::grammar::bias_table;
use agentrl_chat::tiny::{TinyCodec, MAX_CANDIDATES, TOOL_NAMES};
use agentrl_engine::{Engine, LocalEngine, SamplingParams, WeightSync};
use agentrl_gym::sandbox::Executor;
use agentrl_gym::{Action, BugFixEnv, EnvConfig, OutcomeCache, Split, TaskSet, ToolCall};
use agentrl_model::{ConstrainedPolicy, LogitBias, Policy, TinyAgent, TinyConfig};
use agentrl_rl::KlController;
use agentrl_rollout::{
    evaluate_split, run_groups_bounded, Batch, Episode, EvalReport, LiveBound, RolloutLimits,
    ShuffledCandidates, TokenSource,
};
use agentrl_run::{write_atomic_with, RunDir, TrainState};
use anyhow::{bail, Context};
use candle_core::{Device, Var};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::algo::{dapo, Algorithm, Knobs};
use crate::config::{apply_resume_overrides, parse_config_file, Config, ConfigChange};
use crate::metrics::{episode_records, metric_line, RolloutStats};
use crate::optim::{AdamW, AdamWParams};
use crate::schedule::learning_rate;
use crate::update::{supervised_update, update_with, BatchExtras, UpdateMetrics, UpdateSetup};

/// TinyAgent behind its action grammar: the policy the RL recipe trains.
pub type TinyPolicy = ConstrainedPolicy<TinyAgent>;

/// Purposes of the derived random streams (any distinct constants).
const STREAM_TASKS: u64 = 0x7461_736b;
const STREAM_ROLLOUT: u64 = 0x726f_6c6c;
const STREAM_SHUFFLE: u64 = 0x7368_7566;
const STREAM_EVAL: u64 = 0x6576_616c;
const STREAM_WARMUP: u64 = 0x7761_726d;
const STREAM_GREEDY: u64 = 0x6772_6479;

/// Most episodes alive at once in one rollout (each holds a gym workspace on disk and a KV
/// cache): larger steps and evaluations are sampled in chunks of whole groups.
pub const MAX_LIVE_EPISODES: usize = 256;

/// A generator for one purpose at one step: SplitMix64 over `(seed, step, purpose)`.
pub fn stream(seed: u64, step: u64, purpose: u64) -> ChaCha8Rng {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    ChaCha8Rng::seed_from_u64(mix(mix(mix(seed) ^ step) ^ purpose))
}

/// What one training step measured; [`crate::metrics::metric_line`] names it for
/// `metrics.jsonl` and TensorBoard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Steps completed after this one (1-based).
    pub step: usize,
    pub lr: f64,
    pub episodes: usize,
    /// Mean training reward (after shaping) of the step's episodes.
    pub reward: f64,
    pub hidden_solve_rate: f64,
    pub public_solve_rate: f64,
    pub hacking_rate: f64,
    /// Malformed or rejected actions over all actions.
    pub format_error_rate: f64,
    pub episode_tokens: f64,
    pub action_tokens: f64,
    pub turns: f64,
    pub truncated_rate: f64,
    /// Groups dropped by dynamic sampling (DAPO), over all sampling rounds.
    pub groups_dropped: usize,
    pub kl_coef: f64,
    /// Reward spread, tampering, submits, lengths, staleness (`crate::metrics`).
    #[serde(flatten)]
    pub rollout: RolloutStats,
    #[serde(flatten)]
    pub update: UpdateMetrics,
    pub time_rollout_s: f64,
    pub time_update_s: f64,
    pub time_step_s: f64,
    /// Loss of a format warm-up step (`train.format_warmup_steps`); such steps sample no
    /// episodes, so their rollout figures are 0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format_warmup_loss: Option<f64>,
    /// Periodic evaluation on the train split, when it ran at this step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub eval: Option<EvalReport>,
}

/// Everything a run holds in memory.
pub struct Trainer {
    pub config: Config,
    pub algorithm: Algorithm,
    pub knobs: Knobs,
    pub device: Device,
    /// TinyAgent behind the action grammar (`model.action_vocab`).
    pub policy: TinyPolicy,
    reference: Option<TinyPolicy>,
    optimizer: AdamW,
    vars: Vec<Var>,
    pub codec: TinyCodec,
    tasks: Arc<TaskSet>,
    train_ids: Vec<String>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    kl: KlController,
    pub state: TrainState,
    pub run: RunDir,
}

impl Trainer {
    /// A fresh run: validates the config (sizes, the machine's memory, the tasks), applies
    /// its thread count, then creates the run directory (locked for the trainer's life) and
    /// writes the resolved config into it. Nothing is created for a config that cannot run.
    /// Warnings from validation are returned for the caller to show.
    pub fn create(config: Config) -> anyhow::Result<(Self, Vec<String>)> {
        let mut warnings = config.validated()?;
        let tasks = checked_tasks(&config)?;
        warnings.extend(check_memory(&config)?);
        crate::threads::apply(config.threads())?;
        let run = RunDir::create(
            std::path::Path::new(&config.train.runs_root),
            config.train.run_name.as_deref(),
        )?;
        run.write_config(&config.to_toml()?)?;
        let trainer = Self::build(config, run, tasks)?;
        Ok((trainer, warnings))
    }

    /// Continues the run in `path` from its newest loadable checkpoint (or from scratch if it
    /// has none), with the config stored in the run and the `overrides` (`--set`) that a
    /// resume may change ([`crate::config::RESUMABLE_KEYS`]), each recorded in the run's
    /// `config_changes.jsonl`. Takes the run's lock; refuses a finished run unless
    /// `train.steps` is raised, and a config whose `train.steps` is below the checkpoint.
    pub fn resume(path: &std::path::Path, overrides: &[String]) -> anyhow::Result<Self> {
        let run = RunDir::open_for_writing(path)?;
        let config_path = run.config_path();
        let stored = parse_config_file(&config_path)?;
        let (config, changes) = apply_resume_overrides(&stored, &config_path, overrides)?;
        config
            .validated()
            .with_context(|| format!("the config of {}", config_path.display()))?;
        let tasks = checked_tasks(&config)?;
        check_memory(&config)?;
        crate::threads::apply(config.threads())?;
        let mut trainer = Self::build(config, run, tasks)?;
        trainer.load_newest_checkpoint()?;
        let (step, steps) = (trainer.state.step, trainer.config.train.steps);
        if step > steps {
            bail!(
                "{}: train.steps = {steps} is below the checkpoint's step {step}; raise it \
                 (`--set train.steps=N`, N >= {step})",
                config_path.display()
            );
        }
        if step == steps {
            bail!(
                "{} is finished ({step} of {steps} steps); nothing to resume. Extend it with \
                 `agentrl train --resume {} --set train.steps=N` (N > {step}), or evaluate it \
                 with `agentrl eval --run {}`",
                trainer.run.root.display(),
                trainer.run.root.display(),
                trainer.run.root.display()
            );
        }
        if !changes.is_empty() {
            let changes: Vec<ConfigChange> = changes
                .into_iter()
                .map(|c| ConfigChange { at_step: step, ..c })
                .collect();
            trainer
                .run
                .change_config(&changes, &trainer.config.to_toml()?)?;
        }
        trainer.run.truncate_metrics_after(step)?;
        Ok(trainer)
    }

    /// Opens the run in `path` to evaluate it: its newest loadable checkpoint (or the
    /// untrained policy if it has none), read-only: no lock taken and no training file
    /// touched, so it is safe on a live run.
    pub fn open_for_eval(path: &std::path::Path) -> anyhow::Result<Self> {
        let run = RunDir::open(path)?;
        let config_path = run.config_path();
        let config = parse_config_file(&config_path)?;
        config
            .validated()
            .with_context(|| format!("the config of {}", config_path.display()))?;
        let tasks = checked_tasks(&config)?;
        crate::threads::apply(config.threads())?;
        let mut trainer = Self::build(config, run, tasks)?;
        trainer.load_newest_checkpoint()?;
        Ok(trainer)
    }

    /// Loads the newest checkpoint whose files load (finite weights of the right shapes, an
    /// optimizer state that matches), falling back to older ones past a torn or corrupt
    /// file; fails, naming each, when checkpoints exist but none loads.
    fn load_newest_checkpoint(&mut self) -> anyhow::Result<()> {
        let candidates = self.run.checkpoints()?;
        let mut failures = Vec::new();
        for (paths, state) in candidates {
            if state.seed != self.config.train.seed {
                failures.push(format!(
                    "{}: seed {} is not the run's train.seed = {}",
                    paths.state.display(),
                    state.seed,
                    self.config.train.seed
                ));
                continue;
            }
            let loaded = self
                .policy
                .load(&paths.model)
                .with_context(|| format!("loading {}", paths.model.display()))
                .and_then(|()| {
                    self.optimizer
                        .load(&paths.optimizer)
                        .with_context(|| format!("loading {}", paths.optimizer.display()))
                });
            match loaded {
                Ok(()) => {
                    if !failures.is_empty() {
                        tracing::warn!(
                            "fell back to {}: {}",
                            paths.dir.display(),
                            failures.join("; ")
                        );
                    }
                    self.kl = kl_controller(&self.knobs, state.kl_coef)?;
                    self.state = state;
                    return Ok(());
                }
                Err(err) => failures.push(format!("{err:#}")),
            }
        }
        if !failures.is_empty() {
            bail!(
                "no checkpoint of {} loads:\n  - {}",
                self.run.root.display(),
                failures.join("\n  - ")
            );
        }
        Ok(())
    }

    fn build(config: Config, run: RunDir, tasks: TaskSet) -> anyhow::Result<Self> {
        let algorithm = config.algorithm.name;
        let knobs = config.algorithm.knobs.clone();
        // TinyAgent trains on the CPU: at its size, a GPU round trip per decoding step costs
        // more than the step.
        let device = Device::Cpu;
        let codec = tiny_codec(config.rollout.max_action_tokens);
        let model_cfg = tiny_config(&config, &codec);
        let seed = config.train.seed;
        let grammar = |codec: &TinyCodec| -> anyhow::Result<Option<LogitBias>> {
            bias_table(codec, config.model.action_vocab)?
                .map(|table| LogitBias::new(table, codec.vocab().len(), &device))
                .transpose()
                .map_err(anyhow::Error::from)
        };
        let policy = ConstrainedPolicy::new(
            TinyAgent::new(model_cfg.clone(), seed, &device)?,
            grammar(&codec)?,
        );
        // The reference is the initial policy: the same seed gives the same weights.
        let reference = if knobs.kl_coef > 0.0 || knobs.kl_target.is_some() {
            Some(ConstrainedPolicy::new(
                TinyAgent::new(model_cfg, seed, &device)?,
                grammar(&codec)?,
            ))
        } else {
            None
        };
        let named = policy.trainable_vars();
        let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
        let optimizer = AdamW::new(
            named,
            AdamWParams {
                beta1: config.optim.beta1,
                beta2: config.optim.beta2,
                eps: config.optim.eps,
                weight_decay: config.optim.weight_decay,
            },
        )?;
        let tasks = Arc::new(tasks);
        let split = parse_split(&config.rollout.split)?;
        let train_ids: Vec<String> = tasks
            .split_checked(split)?
            .iter()
            .map(|t| t.id.clone())
            .collect();
        if train_ids.is_empty() {
            bail!("rollout.split = {:?} has no tasks", config.rollout.split);
        }
        let kl = kl_controller(&knobs, knobs.kl_coef)?;
        let state = TrainState {
            step: 0,
            seed,
            threads: config.threads(),
            kl_coef: knobs.kl_coef,
            optimizer_steps: 0,
            episodes_seen: 0,
            train_seconds: 0.0,
        };
        Ok(Self {
            algorithm,
            knobs,
            device,
            policy,
            reference,
            optimizer,
            vars,
            codec,
            tasks,
            train_ids,
            executor: agentrl_gym::sandbox::default_executor()
                .context("starting the gym's sandbox executor")?,
            cache: OutcomeCache::new(),
            kl,
            state,
            run,
            config,
        })
    }

    /// The TinyAgent inside the policy.
    pub fn model(&self) -> &TinyAgent {
        self.policy.inner()
    }

    /// Number of tasks in `split` (0 for a task folder without that split).
    pub fn split_len(&self, split: Split) -> usize {
        self.tasks.split(split).len()
    }

    /// Tasks of training step `step`: consecutive slices of per-epoch permutations of the
    /// training split.
    pub fn tasks_for_step(&self, step: usize) -> Vec<String> {
        let n = self.train_ids.len();
        let per_step = self.config.rollout.tasks_per_step;
        (0..per_step)
            .map(|i| {
                let position = step * per_step + i;
                let epoch = position / n;
                let mut order: Vec<usize> = (0..n).collect();
                order.shuffle(&mut stream(
                    self.config.train.seed,
                    epoch as u64,
                    STREAM_TASKS,
                ));
                self.train_ids[order[position % n]].clone()
            })
            .collect()
    }

    fn env_config(&self) -> EnvConfig {
        EnvConfig {
            max_turns: self.config.rollout.max_turns as u32,
            reward: self.config.reward.clone(),
            ..EnvConfig::default()
        }
    }

    fn rollout_limits(&self) -> RolloutLimits {
        RolloutLimits {
            max_episode_tokens: self.config.model.max_seq,
            env_threads: self.config.threads().max(2),
        }
    }

    fn envs(&self, count: usize) -> Vec<BugFixEnv> {
        let config = self.env_config();
        (0..count)
            .map(|_| {
                BugFixEnv::new(
                    self.tasks.clone(),
                    self.executor.clone(),
                    self.cache.clone(),
                    config.clone(),
                )
            })
            .collect()
    }

    /// Samples `group_size` episodes of each task with the current policy through the local
    /// engine; with `shuffle_candidates`, each episode sees the task's candidates in a fresh
    /// order (training only, see `agentrl_rollout::shuffle`).
    ///
    /// At most [`MAX_LIVE_EPISODES`] episodes (workspaces, KV caches) live at once: larger
    /// requests are sampled in chunks of whole groups, a group larger than the bound in
    /// pieces. Requests within the bound (the default run) are sampled in one go.
    fn sample(
        &self,
        task_ids: &[String],
        group_size: usize,
        sampling: &SamplingParams,
        shuffle_candidates: bool,
        rng: &mut ChaCha8Rng,
    ) -> anyhow::Result<Vec<Episode>> {
        let mut engine = LocalEngine::new(&self.policy);
        engine.sync_weights(&WeightSync::Shared {
            version: self.state.step as u64,
        })?;
        let mut make_envs =
            |n: usize, rng: &mut ChaCha8Rng| -> Vec<ShuffledCandidates<BugFixEnv>> {
                self.envs(n)
                    .into_iter()
                    .map(|env| {
                        if shuffle_candidates {
                            ShuffledCandidates::new(env, rng.random())
                        } else {
                            ShuffledCandidates::unshuffled(env)
                        }
                    })
                    .collect()
            };
        run_groups_bounded(
            &mut engine,
            &self.codec,
            sampling,
            &self.rollout_limits(),
            &mut make_envs,
            task_ids,
            group_size,
            LiveBound {
                max_episodes: MAX_LIVE_EPISODES,
                max_tasks: usize::MAX,
            },
            rng,
        )
    }

    /// The action-token budget of one episode (`L_max` of DAPO's overlong shaping and of
    /// Dr. GRPO's normaliser).
    fn action_budget(&self) -> usize {
        self.config.rollout.max_turns * self.config.rollout.max_action_tokens
    }

    /// One training step; returns its metrics record (also appended to `metrics.jsonl`).
    pub fn step(&mut self) -> anyhow::Result<StepRecord> {
        if self.state.step < self.config.train.format_warmup_steps {
            return self.format_warmup_step();
        }
        let started = Instant::now();
        let step = self.state.step;
        let seed = self.config.train.seed;
        let group_size = self.config.rollout.group_size;
        let per_step = self.config.rollout.tasks_per_step;

        // Rollouts, refilled by extra rounds when dynamic sampling drops groups.
        let mut rollout_rng = stream(seed, step as u64, STREAM_ROLLOUT);
        let mut kept: Vec<(Episode, f32)> = Vec::new();
        let mut all: Vec<Episode> = Vec::new();
        let mut groups_dropped = 0;
        let sampling = self.config.sampling.clone();
        for round in 0..dapo::sampling_rounds(&self.knobs) {
            let task_ids = if round == 0 {
                self.tasks_for_step(step)
            } else {
                // Fresh draws from the split for the refill rounds.
                let mut ids = self.train_ids.clone();
                ids.shuffle(&mut rollout_rng);
                ids.truncate(per_step);
                ids
            };
            let mut episodes = self.sample(
                &task_ids,
                group_size,
                &sampling,
                self.config.rollout.shuffle_candidates,
                &mut rollout_rng,
            )?;
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
        let time_rollout_s = started.elapsed().as_secs_f64();

        let update_started = Instant::now();
        let lr = learning_rate(&self.config.optim, step, self.config.train.steps);
        let update_metrics = if kept.is_empty() {
            // Every group had equal rewards: no signal this step (DAPO would keep sampling).
            UpdateMetrics::default()
        } else {
            let episodes: Vec<Episode> = kept.iter().map(|(e, _)| e.clone()).collect();
            let mut batch =
                Batch::from_episodes(&episodes, self.codec.vocab().pad_id(), &self.device)?;
            batch.rewards = kept.iter().map(|(_, r)| *r).collect();
            let setup = UpdateSetup {
                policy: &self.policy,
                reference: self.reference.as_ref().map(|r| r as &dyn Policy),
                algorithm: self.algorithm,
                knobs: &self.knobs,
                kl_coef: self.kl.value(),
                temperature: self.config.sampling.temperature,
                lr,
                grad_clip: self.config.optim.grad_clip,
                max_len: self.action_budget() as f64,
            };
            let extras = BatchExtras {
                reward_baselines: baselines.as_deref(),
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

        let every = self.config.train.episodes_every;
        if crate::every(self.state.step, every) {
            self.run
                .write_episodes(self.state.step, &episode_records(&all, &self.codec))?;
        }
        let n = all.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Episode) -> f64| all.iter().map(f).sum::<f64>() / n;
        let actions: u64 = all.iter().map(|e| u64::from(e.turns)).sum();
        let errors: u64 = all.iter().map(|e| u64::from(e.format_errors)).sum();
        let record = StepRecord {
            step: self.state.step,
            lr,
            episodes: all.len(),
            reward: mean(&|e| f64::from(e.reward.score)),
            hidden_solve_rate: mean(&|e| f64::from(u8::from(e.reward.solved()))),
            public_solve_rate: mean(&|e| f64::from(u8::from(e.reward.public_passed_all()))),
            hacking_rate: mean(&|e| f64::from(u8::from(e.reward.hacked()))),
            format_error_rate: if actions == 0 {
                0.0
            } else {
                errors as f64 / actions as f64
            },
            episode_tokens: mean(&|e| e.len() as f64),
            action_tokens: mean(&|e| e.action_tokens() as f64),
            turns: mean(&|e| f64::from(e.turns)),
            truncated_rate: mean(&|e| f64::from(u8::from(e.truncated))),
            groups_dropped,
            kl_coef: self.kl.value(),
            rollout: RolloutStats::of(&all, step as u64, self.config.rollout.max_turns),
            update: update_metrics,
            time_rollout_s,
            time_update_s,
            time_step_s,
            format_warmup_loss: None,
            eval: None,
        };
        Ok(record)
    }

    /// ReMax's baselines ([`Algorithm::needs_greedy_baseline`]): for each kept episode, the
    /// reward (shaped as the training rewards are) of one greedy (temperature 0) episode of its
    /// task, sampled with the current policy from its own stream; `None` for other presets.
    fn greedy_baselines(
        &self,
        step: usize,
        kept: &[(Episode, f32)],
    ) -> anyhow::Result<Option<Vec<f32>>> {
        if !self.algorithm.needs_greedy_baseline() || kept.is_empty() {
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
        let runs = self.sample(&tasks, 1, &greedy, shuffle, &mut rng)?;
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

    /// Demonstrations for a format warm-up step: for each task of the step, `group_size`
    /// episodes of the task prompt followed by one well-formed call with a uniformly random
    /// tool (and, for `edit`, a random candidate the task lists).
    fn format_demonstrations(&self, step: usize) -> anyhow::Result<Vec<Episode>> {
        let mut rng = stream(self.config.train.seed, step as u64, STREAM_WARMUP);
        let mut episodes = Vec::new();
        for (group, task_id) in self.tasks_for_step(step).iter().enumerate() {
            let task = self.tasks.get(task_id)?;
            let prompt = self.codec.prompt_ids(&task.observation());
            let listed = task.candidates.len().min(MAX_CANDIDATES);
            for _ in 0..self.config.rollout.group_size {
                let name = TOOL_NAMES[rng.random_range(0..TOOL_NAMES.len())];
                let arguments = if name == "edit" && listed > 0 {
                    serde_json::json!({ "candidate": rng.random_range(0..listed) })
                } else {
                    serde_json::json!({})
                };
                let call = ToolCall {
                    name: name.to_string(),
                    arguments,
                };
                let action = self
                    .codec
                    .encode_call(&call)
                    .with_context(|| format!("format warm-up: cannot encode {call:?}"))?;
                let mut episode = Episode::new(&task.id, group as u32);
                for &t in &prompt {
                    episode.push(t, TokenSource::Prompt, 0.0);
                }
                episode.turns = 1;
                for &t in &action {
                    episode.push(t, TokenSource::Action, 0.0);
                }
                episode.actions.push(Action::Call(call));
                episodes.push(episode);
            }
        }
        Ok(episodes)
    }

    /// A format warm-up step (see `train.format_warmup_steps`).
    fn format_warmup_step(&mut self) -> anyhow::Result<StepRecord> {
        let started = Instant::now();
        let step = self.state.step;
        let lr = self.config.train.format_warmup_lr;
        let episodes = self.format_demonstrations(step)?;
        let batch = Batch::from_episodes(&episodes, self.codec.vocab().pad_id(), &self.device)?;
        let loss = supervised_update(
            &self.policy,
            &mut self.optimizer,
            &self.vars,
            &batch,
            lr,
            self.config.optim.grad_clip,
        )?;
        self.state.step += 1;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        let time_step_s = started.elapsed().as_secs_f64();
        self.state.train_seconds += time_step_s;
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
            time_update_s: time_step_s,
            time_step_s,
            format_warmup_loss: Some(loss),
            ..StepRecord::default()
        })
    }

    /// Writes a record under the run's metric names to `metrics.jsonl` and TensorBoard;
    /// returns the line written.
    pub fn log(&self, record: &StepRecord) -> anyhow::Result<agentrl_run::MetricLine> {
        let line = metric_line(record);
        self.run.log_metrics(&line)?;
        Ok(line)
    }

    /// Writes a checkpoint of the current step (model, optimizer, state), atomically.
    pub fn checkpoint(&self) -> anyhow::Result<std::path::PathBuf> {
        self.run
            .save_checkpoint(&self.state, self.config.train.keep_checkpoints, |paths| {
                write_atomic_with(&paths.model, |tmp| self.policy.save(tmp))?;
                write_atomic_with(&paths.optimizer, |tmp| self.optimizer.save(tmp))?;
                Ok(())
            })
    }

    /// Evaluates the current policy on `split`: `samples` episodes per task at `temperature`
    /// (0 = greedy), pass@k for `k <= samples`, seeded from `(seed, tag)` so evaluations are
    /// reproducible and never touch the training streams.
    pub fn evaluate(
        &self,
        split: Split,
        samples: usize,
        k: usize,
        temperature: f64,
        tag: u64,
    ) -> anyhow::Result<EvalReport> {
        let ids: Vec<String> = self
            .tasks
            .split_checked(split)?
            .iter()
            .map(|t| t.id.clone())
            .collect();
        if ids.is_empty() {
            bail!(
                "split {split} has no tasks in {}",
                self.config
                    .rollout
                    .tasks_dir
                    .as_deref()
                    .unwrap_or("the built-in tasks")
            );
        }
        let sampling = SamplingParams {
            temperature,
            ..self.config.sampling.clone()
        };
        let mut rng = stream(self.config.train.seed, tag, STREAM_EVAL);
        let mut engine = LocalEngine::new(&self.policy);
        engine.sync_weights(&WeightSync::Shared {
            version: self.state.step as u64,
        })?;
        evaluate_split(
            &mut engine,
            &self.codec,
            &sampling,
            &self.rollout_limits(),
            split.as_str(),
            &ids,
            samples,
            k,
            MAX_LIVE_EPISODES,
            &mut |n| self.envs(n),
            &mut rng,
        )
    }
}

fn kl_controller(knobs: &Knobs, beta: f64) -> anyhow::Result<KlController> {
    Ok(match knobs.kl_target {
        Some(target) => KlController::Adaptive(agentrl_rl::AdaptiveKlController::new(
            beta,
            target,
            knobs.kl_horizon,
        )?),
        None => KlController::Fixed { coef: beta },
    })
}

/// TinyAgent's codec over the gym's symbol vocabulary.
pub fn tiny_codec(max_action_tokens: usize) -> TinyCodec {
    TinyCodec::new(
        &agentrl_gym::render::symbol_vocabulary(),
        agentrl_gym::render::render_symbols,
        max_action_tokens,
    )
}

/// The model shape of a run config (the vocabulary size comes from the codec).
pub fn tiny_config(config: &Config, codec: &TinyCodec) -> TinyConfig {
    TinyConfig {
        vocab_size: codec.vocab().len(),
        d_model: config.model.d_model,
        n_layers: config.model.layers,
        n_heads: config.model.heads,
        mlp_ratio: config.model.mlp_ratio,
        max_seq: config.model.max_seq,
        pointer_markers: if config.model.pointer_head {
            codec.vocab().candidate_ids()
        } else {
            Vec::new()
        },
        pointer_segment_end: codec.vocab().obs_end_id(),
        ..TinyConfig::for_vocab(codec.vocab().len())
    }
}

pub fn load_tasks(config: &Config) -> anyhow::Result<TaskSet> {
    let dir = config
        .rollout
        .tasks_dir
        .as_deref()
        .map(std::path::Path::new);
    let tasks = TaskSet::load_report(&match dir {
        Some(d) => d.to_path_buf(),
        None => TaskSet::builtin_dir()?,
    })
    .with_context(|| match dir {
        Some(d) => format!("loading tasks from rollout.tasks_dir = {}", d.display()),
        None => "loading the built-in BugFix tasks".to_string(),
    })?;
    // Broken folders are skipped with a warning; a split that has one is refused where it is
    // used (`TaskSet::split_checked`).
    for broken in tasks.broken() {
        eprintln!("warning: skipping a broken task folder: {}", broken.error);
    }
    Ok(tasks)
}

pub fn parse_split(name: &str) -> anyhow::Result<Split> {
    Split::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .with_context(|| {
            format!("unknown split {name:?}; expected one of train, heldout, heldout-family")
        })
}

/// Loads the run's tasks and checks that the training split has some (before anything is
/// created on disk).
fn checked_tasks(config: &Config) -> anyhow::Result<TaskSet> {
    let tasks = load_tasks(config)?;
    let split = parse_split(&config.rollout.split)?;
    if tasks.split(split).is_empty() {
        bail!(
            "rollout.split = {:?} has no tasks in {}",
            config.rollout.split,
            config
                .rollout
                .tasks_dir
                .as_deref()
                .map_or("the built-in tasks".to_string(), |d| format!(
                    "rollout.tasks_dir = {d}"
                ))
        );
    }
    Ok(tasks)
}

/// A step's peak memory, estimated from the config (bytes): the update's batched forward and
/// backward over every kept episode (logits and log-softmax over the vocabulary, per-layer
/// activations, attention maps; divided among minibatches), the live rollout episodes (KV
/// cache and gym workspace, at most [`MAX_LIVE_EPISODES`]) and every episode's record. An
/// upper bound calibrated on the default run (about 6 MB per episode measured, 10 estimated).
pub fn estimate_step_bytes(config: &Config, vocab: usize) -> f64 {
    let m = &config.model;
    let episodes = (config.rollout.tasks_per_step * config.rollout.group_size) as f64;
    let t = m.max_seq as f64;
    let per_update_episode = 4.0
        * t
        * (4.0 * vocab as f64
            + 16.0 * (m.d_model * m.layers) as f64
            + 3.0 * (m.heads * m.layers) as f64 * t);
    let minibatches = config.algorithm.knobs.minibatches.max(1) as f64;
    let update = episodes / minibatches.min(episodes.max(1.0)) * per_update_episode;
    let per_live_episode = 4.0 * t * (2 * m.d_model * m.layers) as f64 + 256.0 * 1024.0;
    let live = episodes.min(MAX_LIVE_EPISODES as f64) * per_live_episode;
    let records = episodes * t * 32.0;
    let weights =
        3.0 * 4.0 * (vocab * m.d_model * 2 + 12 * m.d_model * m.d_model * m.layers) as f64;
    update + live + records + weights
}

/// Available memory (Linux `MemAvailable`), bytes; `None` where unknown.
fn available_memory() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

/// Refuses a config whose estimated step memory ([`estimate_step_bytes`]) exceeds the
/// machine's available memory; warns above half of it.
fn check_memory(config: &Config) -> anyhow::Result<Vec<String>> {
    let vocab = tiny_codec(config.rollout.max_action_tokens).vocab().len();
    let need = estimate_step_bytes(config, vocab);
    let gb = |b: f64| b / 1e9;
    let shape = format!(
        "rollout.tasks_per_step = {} x rollout.group_size = {} episodes of up to \
         model.max_seq = {} tokens",
        config.rollout.tasks_per_step, config.rollout.group_size, config.model.max_seq
    );
    match available_memory() {
        Some(have) if need > have => bail!(
            "a training step would need about {:.1} GB of memory ({shape}) and this machine \
             has {:.1} GB available; lower rollout.tasks_per_step or rollout.group_size, or \
             raise algorithm.minibatches",
            gb(need),
            gb(have)
        ),
        Some(have) if need > have / 2.0 => Ok(vec![format!(
            "a training step may need about {:.1} GB of memory ({shape}), more than half of \
             the {:.1} GB available",
            gb(need),
            gb(have)
        )]),
        _ => Ok(Vec::new()),
    }
}
