//! The training loop: a policy (TinyAgent or Qwen3, [`crate::policy_stack`]), the BugFix gym
//! and an algorithm preset, step after step, with metrics, sampled episodes and checkpoints in
//! the run directory.
//!
//! One step: pick `tasks_per_step` tasks (an epoch-wise permutation of the split derived from
//! `(seed, epoch)`) → sample a group of G episodes per task with the local engine →
//! rewards (+ DAPO overlong shaping, dynamic sampling) → [`Batch`] → [`update`] → metrics line.
//! Every random stream is derived from `(seed, step, purpose)`, so the step counter is the whole
//! RNG state and a resumed run continues exactly where an uninterrupted one would be.

use std::sync::Arc;
use std::time::Instant;

use agentrl_chat::qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
use agentrl_chat::tiny::grammar::bias_table;
use agentrl_chat::tiny::{TinyCodec, MAX_CANDIDATES, TOOL_NAMES};
use agentrl_chat::ChatCodec;
use agentrl_engine::{
    Engine, LogprobKind, NoisyLogprobs, OnThreads, Protocol, RemoteConfig, RemoteEngine,
    SamplingParams, WeightSync,
};
use agentrl_gym::sandbox::Executor;
use agentrl_gym::{Action, BugFixEnv, EnvConfig, OutcomeCache, Split, TaskSet, ToolCall};
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{LoadOptions, Qwen3};
use agentrl_model::{ConstrainedPolicy, LogitBias, Policy, TinyAgent, TinyConfig};

use crate::config::{EngineKind, ModelKind, WarmupData};
pub use crate::policy_stack::TinyPolicy;
use crate::policy_stack::{EngineReplica, TrainPolicy};
use crate::preflight::{preflight, PreflightReport, PreflightSetup};
use agentrl_rl::KlController;
use agentrl_rollout::{
    evaluate_split, run_groups_bounded, Batch, EnvClock, Episode, EvalReport, LiveBound,
    Prefetched, RolloutLimits, ShuffledCandidates, StalenessBound, Timed, TokenSource,
};
use agentrl_run::{write_atomic_with, RunDir, TrainState};
use anyhow::{bail, Context};
use candle_core::{DType, Device, Var};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::algo::{dapo, gdpo, Algorithm, Knobs};
use crate::config::{apply_resume_overrides, parse_config_file, Config, ConfigChange};
use crate::metrics::{episode_records, metric_line, RolloutStats};
use crate::optim::{AdamW, AdamWParams};
use crate::schedule::learning_rate;
use crate::update::{
    supervised_update, trainer_token_logprobs, update_with, BatchExtras, UpdateMetrics, UpdateSetup,
};

/// Purposes of the derived random streams (any distinct constants).
const STREAM_TASKS: u64 = 0x7461_736b;
const STREAM_ROLLOUT: u64 = 0x726f_6c6c;
const STREAM_SHUFFLE: u64 = 0x7368_7566;
const STREAM_EVAL: u64 = 0x6576_616c;
const STREAM_WARMUP: u64 = 0x7761_726d;
const STREAM_GREEDY: u64 = 0x6772_6479;
const STREAM_PREFLIGHT: u64 = 0x7072_6566;

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
    /// Wall time during which the step's rollouts had an environment busy (of
    /// `time_rollout_s`, or overlapping the update with asynchronous rollouts).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_env_s: Option<f64>,
    /// Bringing the engine's weights to the trainer's (a copy refreshed, or an adapter written
    /// and loaded by the servers).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_sync_s: Option<f64>,
    pub time_update_s: f64,
    pub time_step_s: f64,
    /// Loss of a format warm-up step (`train.format_warmup_steps`); such steps sample no
    /// episodes, so their rollout figures are 0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format_warmup_loss: Option<f64>,
    /// Periodic evaluation on the train split, when it ran at this step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub eval: Option<EvalReport>,
    /// A recipe's own figures under their metric names (`rft/acceptance_rate`, `dpo/loss`,
    /// ...), written as they are.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub recipe_metrics: std::collections::BTreeMap<String, f64>,
}

/// A trainer's [`Sampler`], written as a struct of field borrows (a macro, not a method, so
/// the borrow checker sees them apart from `self.optimizer`, which the update borrows
/// mutably while an asynchronous step samples).
macro_rules! sampler_of {
    ($trainer:expr) => {
        Sampler {
            config: &$trainer.config,
            tasks: &$trainer.tasks,
            executor: &$trainer.executor,
            cache: &$trainer.cache,
            env_clock: &$trainer.env_clock,
            codec: $trainer.codec.as_ref(),
            weights: EngineWeights::of(
                $trainer.policy.as_ref(),
                $trainer.state.step as u64,
                $trainer.engine_copy.as_ref(),
                $trainer.remote.as_ref(),
            ),
        }
    };
}

/// The warmed-up weights the KL reference takes at the hand-over to RL, in the run's folder
/// (`train.format_warmup_kl_anchor`).
pub const KL_REFERENCE_FILE: &str = "kl_reference.safetensors";

/// Everything a run holds in memory.
pub struct Trainer {
    pub config: Config,
    pub algorithm: Algorithm,
    pub knobs: Knobs,
    pub device: Device,
    /// The policy being trained (TinyAgent behind its action grammar, or Qwen3).
    pub policy: Box<dyn TrainPolicy>,
    /// The frozen initial policy, for KL (when the preset uses one); the warmed-up one from
    /// the hand-over to RL with `train.format_warmup_kl_anchor`.
    reference: Option<Box<dyn TrainPolicy>>,
    optimizer: AdamW,
    vars: Vec<Var>,
    /// How the policy's episodes become ids and its sampled ids become tool calls.
    pub codec: Box<dyn ChatCodec + Send + Sync>,
    tasks: Arc<TaskSet>,
    train_ids: Vec<String>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    kl: KlController,
    pub state: TrainState,
    pub run: RunDir,
    /// The engine's own copy of the weights, where it must not read the trainer's
    /// (`engine.dtype = "bf16"`, async rollouts).
    engine_copy: Option<EngineCopy>,
    /// What the engine preflight measured (`engine.preflight`).
    pub preflight: Option<PreflightReport>,
    /// Inference servers that sample the rollouts (`engine.kind = "vllm"` or `"sglang"`).
    remote: Option<RemoteEngine>,
    /// Whether this process has synced the engine's weights (copy or servers) at least once.
    synced_once: bool,
    /// The next step's rollouts, sampled during this step's update (`engine.async_rollouts`).
    prefetched: Option<Prefetched>,
    /// Busy time of the rollouts' environments (`timing_s/env`).
    env_clock: Arc<EnvClock>,
    /// Seconds of weight sync since the last step record (`timing_s/update_weights`).
    sync_seconds: f64,
}

/// Weights an engine samples with, and their version.
struct EngineCopy {
    replica: Box<dyn EngineReplica>,
    version: u64,
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
        let root = run.root.clone();
        let built = Self::build(config, run, tasks).and_then(|mut trainer| {
            trainer.run_preflight()?;
            Ok(trainer)
        });
        match built {
            Ok(trainer) => Ok((trainer, warnings)),
            Err(e) => {
                // The run never started: take back the directory that holds only its config.
                let _ = std::fs::remove_dir_all(&root);
                Err(e)
            }
        }
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
        trainer.run_preflight()?;
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
                    let warmup_steps = self.config.train.format_warmup_steps;
                    if self.config.train.format_warmup_kl_anchor && self.state.step > warmup_steps {
                        // Past the hand-over the reference is the anchor the hand-over wrote;
                        // a run resumed at the hand-over itself makes it again in `step`.
                        if let Some(reference) = &self.reference {
                            let path = self.run.root.join(KL_REFERENCE_FILE);
                            reference.load(&path).with_context(|| {
                                format!(
                                    "loading {} as the KL reference \
                                     (train.format_warmup_kl_anchor)",
                                    path.display()
                                )
                            })?;
                        }
                    }
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
        let seed = config.train.seed;
        let uses_reference = knobs.kl_coef > 0.0 || knobs.kl_target.is_some();
        let (device, policy, reference, codec) = match config.model.kind {
            ModelKind::Tiny => {
                let (policy, reference, codec) = build_tiny(&config, seed, uses_reference)?;
                (Device::Cpu, policy, reference, codec)
            }
            ModelKind::Qwen3 => {
                let (policy, reference, codec) = build_qwen3(&config, seed, uses_reference)?;
                (policy.device().clone(), policy, reference, codec)
            }
        };
        let engine_dtype = parse_dtype("engine.dtype", &config.engine.dtype)?;
        let engine_copy = if engine_dtype != DType::F32 || config.engine.async_rollouts {
            Some(EngineCopy {
                replica: policy.replica(engine_dtype)?,
                version: 0,
            })
        } else {
            None
        };
        let remote = connect_remote(&config)?;
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
            engine_copy,
            preflight: None,
            remote,
            synced_once: false,
            prefetched: None,
            env_clock: EnvClock::new(),
            sync_seconds: 0.0,
        })
    }

    /// One line naming the policy being trained.
    pub fn describe_policy(&self) -> String {
        self.policy.describe()
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

    /// What sampling reads: everything but the optimizer, with the engine on the trainer's
    /// own weights, its copy, or the servers.
    fn sampler(&self) -> Sampler<'_> {
        sampler_of!(self)
    }

    /// Brings the engine's weights to the trainer's: its local copy (if it has one), or the
    /// servers' (a LoRA adapter in PEFT layout, or a full safetensors folder, written under
    /// the run's `weights/` and loaded by the servers; the newest folder is kept).
    fn sync_engine_copy(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let synced = self.sync_engine_weights();
        self.sync_seconds += started.elapsed().as_secs_f64();
        synced
    }

    /// [`Self::sync_engine_copy`], untimed.
    fn sync_engine_weights(&mut self) -> anyhow::Result<()> {
        let version = self.state.step as u64;
        if let Some(remote) = &mut self.remote {
            if remote.weight_version() == version && self.synced_once {
                return Ok(());
            }
            let qwen3 = self
                .policy
                .as_any()
                .downcast_ref::<Qwen3>()
                .context("a remote engine serves Qwen3 only")?;
            let weights = self.run.root.join("weights");
            let dir = weights.join(format!("v{version:06}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("clearing {}", dir.display()))?;
            }
            let base = self.config.model.dir.clone().unwrap_or_default();
            let sync = match self.config.engine.weight_sync.as_str() {
                "lora" => {
                    let lora = lora_config(&self.config.qwen3)
                        .context("engine.weight_sync = \"lora\" needs qwen3.lora_rank > 0")?;
                    qwen3.save_lora_peft(&dir, &lora, &base)?;
                    WeightSync::LoraAdapter {
                        dir: dir.clone(),
                        name: "agentrl-policy".to_string(),
                        version,
                    }
                }
                "full" => {
                    qwen3.save(&dir)?;
                    WeightSync::FullWeights {
                        dir: dir.clone(),
                        version,
                    }
                }
                other => bail!("engine.weight_sync = {other:?}: expected \"lora\" or \"full\""),
            };
            remote
                .sync_weights(&sync)
                .with_context(|| format!("syncing weight version {version} to the servers"))?;
            self.synced_once = true;
            // The servers have loaded this version: older folders are no longer read.
            if let Ok(entries) = std::fs::read_dir(&weights) {
                for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                    if path != dir {
                        let _ = std::fs::remove_dir_all(&path);
                    }
                }
            }
            return Ok(());
        }
        if let Some(copy) = &mut self.engine_copy {
            if copy.version != self.state.step as u64 || !self.synced_once {
                copy.replica.refresh(self.policy.as_ref())?;
                copy.version = self.state.step as u64;
            }
            self.synced_once = true;
        }
        Ok(())
    }

    /// How old the engine's weights may be when its rollouts are trained on: up to
    /// `engine.max_staleness` versions with asynchronous rollouts, none otherwise.
    fn staleness_bound(&self) -> StalenessBound {
        let e = &self.config.engine;
        StalenessBound::new(if e.async_rollouts {
            e.max_staleness as u64
        } else {
            0
        })
    }

    /// Syncs the engine's weights to the trainer's unless they are fresh enough for rollouts
    /// trained on at step `trained_at` ([`StalenessBound::allows`]). The first sync of a
    /// process always happens: a copy built before a checkpoint loaded holds other weights.
    fn sync_engine_for(&mut self, trained_at: u64) -> anyhow::Result<()> {
        let engine_version = EngineWeights::of(
            self.policy.as_ref(),
            self.state.step as u64,
            self.engine_copy.as_ref(),
            self.remote.as_ref(),
        )
        .version();
        let needs_sync = self.remote.is_some() || self.engine_copy.is_some();
        if needs_sync
            && self.synced_once
            && self.staleness_bound().allows(trained_at, engine_version)
        {
            return Ok(());
        }
        self.sync_engine_copy()
    }

    /// The engine preflight (`engine.preflight`): the engine samples the first prompts of a
    /// few training tasks, the trainer scores the same tokens, and a semantic mismatch
    /// refuses the run ([`crate::preflight`]). The report is kept in
    /// [`Trainer::preflight`] and written to the run's `preflight.json`.
    pub fn run_preflight(&mut self) -> anyhow::Result<()> {
        if !self.config.engine.preflight {
            return Ok(());
        }
        self.sync_engine_copy()?;
        let mut prompts = Vec::new();
        for task_id in self.train_ids.iter().take(4) {
            let task = self.tasks.get(task_id)?;
            prompts.push(self.codec.prompt_ids(&task.observation())?);
        }
        let setup = PreflightSetup {
            prompts,
            sampling: self.config.sampling.clone(),
            stop: self.codec.stop_ids(),
            max_tokens: self.codec.max_action_tokens().min(16),
            declared: self.config.engine.logprobs,
            model_defaults: self.model_sampling_defaults()?,
            seed: stream(self.config.train.seed, u64::MAX, STREAM_PREFLIGHT).random(),
        };
        let report = {
            let mut engine = self.sampler().engine()?;
            preflight(engine.as_mut(), self.policy.as_ref(), &setup)?
        };
        let json = serde_json::to_vec_pretty(&report)?;
        agentrl_run::write_atomic(&self.run.root.join("preflight.json"), &json)?;
        report.check()?;
        self.preflight = Some(report);
        Ok(())
    }

    /// The sampling defaults in the model folder's `generation_config.json` (what a server
    /// fills in for parameters a request leaves out), for the preflight.
    fn model_sampling_defaults(&self) -> anyhow::Result<Option<SamplingParams>> {
        let Some(dir) = self.config.model.dir.as_deref() else {
            return Ok(None);
        };
        if self.config.model.kind != ModelKind::Qwen3 {
            return Ok(None);
        }
        let path = std::path::Path::new(dir).join("generation_config.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let number =
            |key: &str, default: f64| value.get(key).and_then(|v| v.as_f64()).unwrap_or(default);
        Ok(Some(SamplingParams {
            temperature: number("temperature", 1.0),
            top_p: number("top_p", 1.0),
            top_k: number("top_k", 0.0).max(0.0) as usize,
        }))
    }

    /// The action-token budget of one episode (`L_max` of DAPO's overlong shaping and of
    /// Dr. GRPO's normaliser).
    fn action_budget(&self) -> usize {
        self.config.rollout.max_turns * self.config.rollout.max_action_tokens
    }

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
            self.staleness_bound().allows_overlap() && next < self.config.train.steps;
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
                    measure_mismatch: self.remote.is_some()
                        || self.engine_copy.is_some()
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
            time_env_s: Some(self.env_clock.take_busy_seconds() + prefetched_env_seconds),
            time_sync_s: Some(std::mem::take(&mut self.sync_seconds)),
            time_update_s,
            time_step_s,
            format_warmup_loss: None,
            eval: None,
            recipe_metrics: Default::default(),
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

    /// Demonstrations for a format warm-up step: for each task of the step, `group_size`
    /// episodes of the task prompt followed by one well-formed call with a uniformly random
    /// tool (and, for `edit`, a random candidate the task lists).
    fn format_demonstrations(&self, step: usize) -> anyhow::Result<Vec<Episode>> {
        let mut rng = stream(self.config.train.seed, step as u64, STREAM_WARMUP);
        let mut episodes = Vec::new();
        for (group, task_id) in self.tasks_for_step(step).iter().enumerate() {
            let task = self.tasks.get(task_id)?;
            let observation = task.observation();
            let prompt = self.codec.prompt_ids(&observation)?;
            let listed = task.candidates.len().min(MAX_CANDIDATES);
            // The tools this format offers: those whose demonstration parses back to a call
            // (Qwen3's prompt does not offer `exploit`, TinyAgent's vocabulary does).
            let mut offered = Vec::new();
            for name in TOOL_NAMES {
                let probe = ToolCall {
                    name: name.to_string(),
                    arguments: if name == "edit" {
                        serde_json::json!({ "candidate": 0 })
                    } else {
                        serde_json::json!({})
                    },
                };
                let ids = self.codec.encode_call(&probe)?;
                if matches!(self.codec.parse_action(&ids, &observation), Action::Call(_)) {
                    offered.push(name);
                }
            }
            anyhow::ensure!(
                !offered.is_empty(),
                "format warm-up: the codec offers no tool"
            );
            for _ in 0..self.config.rollout.group_size {
                let name = offered[rng.random_range(0..offered.len())];
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
            WarmupData::Calls => self.format_demonstrations(step)?,
            WarmupData::Expert => crate::recipes::sft::expert_demonstrations(self, step)?,
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
        // Evaluation measures the policy itself: the trainer's weights, exact log-probs.
        let mut engine = self.policy.local_engine(LogprobKind::TemperatureScaled);
        engine.sync_weights(&WeightSync::Shared {
            version: self.state.step as u64,
        })?;
        evaluate_split(
            engine.as_mut(),
            self.codec.as_ref(),
            &sampling,
            &self.sampler().rollout_limits(),
            split.as_str(),
            &ids,
            samples,
            k,
            MAX_LIVE_EPISODES,
            &mut |n| self.sampler().envs(n),
            &mut rng,
        )
    }
}

/// Where a rollout engine reads its weights.
#[derive(Clone, Copy)]
enum EngineWeights<'a> {
    /// The trainer's own weights (synchronous runs in f32): they change under an update, so
    /// an engine on them never samples during one.
    Trainer {
        policy: &'a dyn TrainPolicy,
        version: u64,
    },
    /// The engine's copy ([`EngineCopy`]).
    Copy(&'a EngineCopy),
    /// Inference servers, at the version last synced to them.
    Remote(&'a RemoteEngine),
}

impl<'a> EngineWeights<'a> {
    fn of(
        policy: &'a dyn TrainPolicy,
        version: u64,
        copy: Option<&'a EngineCopy>,
        remote: Option<&'a RemoteEngine>,
    ) -> Self {
        match (remote, copy) {
            (Some(remote), _) => Self::Remote(remote),
            (None, Some(copy)) => Self::Copy(copy),
            (None, None) => Self::Trainer { policy, version },
        }
    }

    /// The weight version the engine samples with.
    fn version(&self) -> u64 {
        match self {
            Self::Trainer { version, .. } => *version,
            Self::Copy(copy) => copy.version,
            Self::Remote(remote) => remote.weight_version(),
        }
    }
}

/// What sampling reads of a [`Trainer`]: the tasks, the gym, the codec and the engine's
/// weights; not the optimizer. Borrowed apart from it, so an asynchronous step samples the
/// next step's rollouts on the engine's weights while the update changes the trainer's.
struct Sampler<'a> {
    config: &'a Config,
    tasks: &'a Arc<TaskSet>,
    executor: &'a Arc<dyn Executor>,
    cache: &'a Arc<OutcomeCache>,
    env_clock: &'a Arc<EnvClock>,
    codec: &'a (dyn ChatCodec + Send + Sync),
    weights: EngineWeights<'a>,
}

impl<'a> Sampler<'a> {
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

    /// The engine the rollouts sample with; with `engine.logprob_noise`, behind the injected
    /// noise.
    fn engine(&self) -> anyhow::Result<Box<dyn Engine + Send + 'a>> {
        let kind = self.config.engine.logprobs;
        let local_engine_threads = self.config.engine_threads();
        let on_threads = |engine: Box<dyn Engine + Send + 'a>| -> anyhow::Result<_> {
            Ok(if local_engine_threads == self.config.threads() {
                engine
            } else {
                Box::new(OnThreads::new(engine, local_engine_threads)?)
            })
        };
        let mut engine: Box<dyn Engine + Send + 'a> = match self.weights {
            EngineWeights::Remote(remote) => Box::new(remote),
            EngineWeights::Copy(copy) => on_threads(copy.replica.engine(kind, copy.version)?)?,
            EngineWeights::Trainer { policy, version } => {
                let mut engine = policy.local_engine(kind);
                engine.sync_weights(&WeightSync::Shared { version })?;
                on_threads(engine)?
            }
        };
        if self.config.engine.logprob_noise > 0.0 {
            engine = Box::new(NoisyLogprobs::new(
                engine,
                self.config.engine.logprob_noise,
            )?);
        }
        Ok(engine)
    }

    /// Samples `group_size` episodes of each task; with `shuffle_candidates`, each episode
    /// sees the task's candidates in a fresh order (training only, see
    /// `agentrl_rollout::shuffle`).
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
        let mut engine = self.engine()?;
        let mut make_envs =
            |n: usize, rng: &mut ChaCha8Rng| -> Vec<ShuffledCandidates<Timed<BugFixEnv>>> {
                self.envs(n)
                    .into_iter()
                    .map(|env| {
                        let env = Timed::new(env, self.env_clock.clone());
                        if shuffle_candidates {
                            ShuffledCandidates::new(env, rng.random())
                        } else {
                            ShuffledCandidates::unshuffled(env)
                        }
                    })
                    .collect()
            };
        run_groups_bounded(
            engine.as_mut(),
            self.codec,
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
}

/// What the other recipes (`recipes::sft`) and `train --init` use of a trainer: its envs and
/// limits, one supervised step on given episodes, and another run's weights.
impl Trainer {
    /// The task set the run trains and evaluates on.
    pub fn task_set(&self) -> &Arc<TaskSet> {
        &self.tasks
    }

    /// `count` fresh envs of the run's episode config (turn limit, reward), sharing the run's
    /// sandbox executor and outcome cache.
    pub fn training_envs(&self, count: usize) -> Vec<BugFixEnv> {
        self.sampler().envs(count)
    }

    /// The limits the run's rollouts use (episode length, env threads).
    pub fn episode_limits(&self) -> RolloutLimits {
        self.sampler().rollout_limits()
    }

    /// One supervised step on `episodes` (negative log-likelihood of their action tokens, the
    /// batch's loss mask) at `lr`; advances the step counter and the episode count. Returns
    /// the loss.
    pub fn supervised_step(&mut self, episodes: &[Episode], lr: f64) -> anyhow::Result<f64> {
        let started = Instant::now();
        let loss = self.supervised_update(episodes, lr)?;
        self.finish_step(episodes.len(), started.elapsed().as_secs_f64());
        Ok(loss)
    }

    /// One supervised optimizer step on `episodes` at `lr`, within the current training step
    /// (the step counter stays: a recipe may take several, then [`Self::finish_step`]).
    pub fn supervised_update(&mut self, episodes: &[Episode], lr: f64) -> anyhow::Result<f64> {
        anyhow::ensure!(!episodes.is_empty(), "a supervised step needs episodes");
        let batch = Batch::from_episodes(episodes, self.codec.pad_id(), &self.device)?;
        let loss = supervised_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &batch,
            lr,
            self.config.optim.grad_clip,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(loss)
    }

    /// Ends a recipe's training step: the step counter, the episodes it sampled or read, its
    /// seconds.
    pub fn finish_step(&mut self, episodes: usize, seconds: f64) {
        self.state.step += 1;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        self.state.episodes_seen += episodes as u64;
        self.state.train_seconds += seconds;
    }

    /// `per_task` episodes of each of `task_ids`, sampled by the current policy as an RL
    /// step samples them (the run's sampling parameters, candidate shuffling, engine weights
    /// synced to this step).
    pub fn sample_policy_episodes(
        &mut self,
        task_ids: &[String],
        per_task: usize,
        rng: &mut ChaCha8Rng,
    ) -> anyhow::Result<Vec<Episode>> {
        self.sync_engine_for(self.state.step as u64)?;
        let sampling = self.config.sampling.clone();
        self.sampler().sample(
            task_ids,
            per_task,
            &sampling,
            self.config.rollout.shuffle_candidates,
            rng,
        )
    }

    /// The ids of the train split's tasks.
    pub fn train_task_ids(&self) -> &[String] {
        &self.train_ids
    }

    /// Summed action-token log-probs of each of `episodes` under the current policy (no
    /// gradient kept), in chunks of `MAX_LIVE_EPISODES`.
    pub fn sequence_log_probs(&self, episodes: &[Episode]) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(episodes.len());
        for chunk in episodes.chunks(MAX_LIVE_EPISODES) {
            let batch = Batch::from_episodes(chunk, self.codec.pad_id(), &self.device)?;
            let logp = crate::update::sequence_log_probs_of(self.policy.as_ref(), &batch)?;
            out.extend(
                logp.detach()
                    .to_dtype(candle_core::DType::F32)?
                    .to_vec1::<f32>()?,
            );
        }
        Ok(out)
    }

    /// One DPO optimizer step ([`crate::update::dpo_update`]) on `chosen[i]` against
    /// `rejected[i]`, with the reference's summed log-probs `reference` (chosen then rejected)
    /// at `lr`; `dry_run` only measures. The step counter stays.
    pub fn dpo_update(
        &mut self,
        chosen: &[Episode],
        rejected: &[Episode],
        reference: &[f32],
        lr: f64,
        dry_run: bool,
    ) -> anyhow::Result<crate::update::DpoMetrics> {
        anyhow::ensure!(
            !chosen.is_empty() && chosen.len() == rejected.len(),
            "a DPO step needs as many chosen as rejected episodes (got {} and {})",
            chosen.len(),
            rejected.len()
        );
        let rows: Vec<Episode> = chosen.iter().chain(rejected).cloned().collect();
        let batch = Batch::from_episodes(&rows, self.codec.pad_id(), &self.device)?;
        let metrics = crate::update::dpo_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &batch,
            reference,
            self.config.dpo.beta,
            lr,
            self.config.optim.grad_clip,
            dry_run,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(metrics)
    }

    /// Opens another run's newest loadable checkpoint as a frozen teacher (`agentrl distill
    /// --teacher RUN`): read-only like [`Self::open_for_eval`], computing on this process's
    /// `threads` whatever the teacher's config says.
    pub fn open_as_teacher(path: &std::path::Path, threads: usize) -> anyhow::Result<Self> {
        let run = RunDir::open(path)?;
        let config_path = run.config_path();
        let mut config = parse_config_file(&config_path)?;
        config.train.threads = threads;
        config
            .validated()
            .with_context(|| format!("the config of the teacher {}", config_path.display()))?;
        let tasks = checked_tasks(&config)?;
        let mut teacher = Self::build(config, run, tasks)?;
        teacher.load_newest_checkpoint()?;
        Ok(teacher)
    }

    /// One on-policy distillation step ([`crate::update::distill_update`]) on the student's
    /// own `episodes`, the `teacher` scoring every sampled action token, at `lr` with the
    /// advantage coefficient `coef`; `dry_run` only measures. The step counter stays.
    pub fn distill_update(
        &mut self,
        teacher: &Trainer,
        episodes: &[Episode],
        coef: f64,
        lr: f64,
        dry_run: bool,
    ) -> anyhow::Result<crate::update::DistillMetrics> {
        anyhow::ensure!(!episodes.is_empty(), "a distillation step needs episodes");
        let batch = Batch::from_episodes(episodes, self.codec.pad_id(), &self.device)?;
        let teacher_batch =
            Batch::from_episodes(episodes, teacher.codec.pad_id(), &teacher.device)?;
        let teacher_logp =
            crate::update::token_log_probs_of(teacher.policy.as_ref(), &teacher_batch)?
                .detach()
                .to_device(&self.device)?;
        let metrics = crate::update::distill_update(
            self.policy.as_ref(),
            &mut self.optimizer,
            &self.vars,
            &batch,
            &teacher_logp,
            coef,
            lr,
            self.config.optim.grad_clip,
            dry_run,
        )?;
        self.state.optimizer_steps = self.optimizer.steps_taken();
        Ok(metrics)
    }

    /// Starts this fresh run from the weights of another run's newest loadable checkpoint
    /// (`agentrl train --init RUN`): the policy, the KL reference (the start of this run) and
    /// the engine's copy take them; the optimizer and the step counter stay fresh. The engine
    /// preflight runs again on the new weights. Returns the checkpoint folder used.
    pub fn init_weights_from(
        &mut self,
        run: &std::path::Path,
    ) -> anyhow::Result<std::path::PathBuf> {
        anyhow::ensure!(
            self.state.step == 0,
            "--init: the run is at step {}; only a fresh run starts from other weights",
            self.state.step
        );
        let source = RunDir::open(run)?;
        let mut failures = Vec::new();
        for (paths, _) in source.checkpoints()? {
            match self.policy.load(&paths.model) {
                Ok(()) => {
                    if let Some(reference) = &self.reference {
                        reference.load(&paths.model).with_context(|| {
                            format!("loading {} as the KL reference", paths.model.display())
                        })?;
                    }
                    if let Some(copy) = &mut self.engine_copy {
                        copy.replica.refresh(self.policy.as_ref())?;
                    }
                    let record = serde_json::json!({
                        "from_run": run.display().to_string(),
                        "checkpoint": paths.dir.display().to_string(),
                    });
                    agentrl_run::write_atomic(
                        &self.run.root.join("init.json"),
                        &serde_json::to_vec_pretty(&record)?,
                    )?;
                    self.run_preflight()?;
                    return Ok(paths.dir);
                }
                Err(err) => failures.push(format!("{}: {err:#}", paths.model.display())),
            }
        }
        if failures.is_empty() {
            bail!("--init {}: the run has no checkpoint", run.display());
        }
        bail!(
            "--init {}: no checkpoint loads into this run's policy (is it the same model?):\n  - {}",
            run.display(),
            failures.join("\n  - ")
        )
    }
}

/// TinyAgent behind the grammar of `model.action_vocab`, its reference (the initial policy:
/// the same seed gives the same weights) and its codec. TinyAgent trains on the CPU: at its
/// size, a GPU round trip per decoding step costs more than the step.
#[allow(clippy::type_complexity)]
fn build_tiny(
    config: &Config,
    seed: u64,
    with_reference: bool,
) -> anyhow::Result<(
    Box<dyn TrainPolicy>,
    Option<Box<dyn TrainPolicy>>,
    Box<dyn ChatCodec + Send + Sync>,
)> {
    let device = Device::Cpu;
    let codec = tiny_codec(config.rollout.max_action_tokens);
    let model_cfg = tiny_config(config, &codec);
    let grammar = || -> anyhow::Result<Option<LogitBias>> {
        bias_table(&codec, config.model.action_vocab)?
            .map(|table| LogitBias::new(table, codec.vocab().len(), &device))
            .transpose()
            .map_err(anyhow::Error::from)
    };
    let policy: TinyPolicy = ConstrainedPolicy::new(
        TinyAgent::new(model_cfg.clone(), seed, &device)?,
        grammar()?,
    );
    let reference: Option<Box<dyn TrainPolicy>> = if with_reference {
        let reference: TinyPolicy =
            ConstrainedPolicy::new(TinyAgent::new(model_cfg, seed, &device)?, grammar()?);
        Some(Box::new(reference))
    } else {
        None
    };
    Ok((Box::new(policy), reference, Box::new(codec)))
}

/// Qwen3 from `model.dir` (LoRA on every projection when `qwen3.lora_rank > 0`, else every
/// weight trainable), its frozen reference (the folder's weights: a fresh LoRA is zero, so
/// that is the initial policy) and its chat codec.
#[allow(clippy::type_complexity)]
fn build_qwen3(
    config: &Config,
    seed: u64,
    with_reference: bool,
) -> anyhow::Result<(
    Box<dyn TrainPolicy>,
    Option<Box<dyn TrainPolicy>>,
    Box<dyn ChatCodec + Send + Sync>,
)> {
    let dir = config.model.dir.as_deref().context(
        "model.kind = \"qwen3\" needs a model folder: set model.dir or pass --model DIR",
    )?;
    let dir = std::path::Path::new(dir);
    let q = &config.qwen3;
    let dtype = parse_dtype("qwen3.dtype", &q.dtype)?;
    // The GPU when built with `--features cuda` and one is present, else the CPU.
    let device = agentrl_model::best_device()?;
    let lora = lora_config(q);
    let options = |trainable: bool| LoadOptions {
        dtype,
        device: device.clone(),
        trainable,
    };
    let mut policy = Qwen3::load(dir, &options(lora.is_none()))
        .with_context(|| format!("loading the Qwen3 in model.dir = {}", dir.display()))?;
    if let Some(lora) = &lora {
        policy.add_lora(lora, seed)?;
    }
    let reference: Option<Box<dyn TrainPolicy>> = if with_reference {
        Some(Box::new(Qwen3::load(dir, &options(false))?))
    } else {
        None
    };
    let codec = Qwen3Codec::from_dir(
        dir,
        Qwen3CodecOptions {
            max_action_tokens: config.rollout.max_action_tokens,
            max_observation_tokens: q.max_observation_tokens,
            enable_thinking: q.enable_thinking,
        },
    )?;
    Ok((Box::new(policy), reference, Box::new(codec)))
}

/// The LoRA adapter of `[qwen3]`, on every attention and MLP projection (`None` at rank 0).
fn lora_config(q: &crate::config::Qwen3Settings) -> Option<LoraConfig> {
    (q.lora_rank > 0).then(|| LoraConfig {
        rank: q.lora_rank,
        alpha: q.lora_alpha,
        target_modules: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
        .map(String::from)
        .to_vec(),
    })
}

/// The inference servers of `[engine]`, connected and checked (`None` for the local engine).
fn connect_remote(config: &Config) -> anyhow::Result<Option<RemoteEngine>> {
    let e = &config.engine;
    let protocol = match e.kind {
        EngineKind::Local => return Ok(None),
        EngineKind::Vllm => Protocol::Vllm,
        EngineKind::Sglang => Protocol::Sglang,
    };
    if config.model.kind != ModelKind::Qwen3 {
        bail!(
            "engine.kind = {:?} serves Qwen3: set model.kind = \"qwen3\"",
            e.kind
        );
    }
    let model = match (&e.served_model, &config.model.dir) {
        (Some(name), _) => name.clone(),
        (None, Some(dir)) => dir.clone(),
        (None, None) => bail!("engine.served_model is unset and there is no model.dir"),
    };
    let remote_config: RemoteConfig = serde_json::from_value(serde_json::json!({
        "protocol": protocol,
        "endpoints": e.endpoints,
        "model": model,
        "logprob_kind": e.logprobs,
        "max_in_flight": e.max_in_flight,
        "request_timeout_s": e.timeout_s,
        "retries": e.retries,
    }))
    .context("building the remote engine's config from [engine]")?;
    let remote = RemoteEngine::connect(remote_config)
        .with_context(|| format!("connecting to engine.endpoints = {:?}", e.endpoints))?;
    Ok(Some(remote))
}

/// A weight dtype named in the config.
fn parse_dtype(field: &str, name: &str) -> anyhow::Result<DType> {
    match name {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        other => bail!("{field} = {other:?}: expected \"f32\" or \"bf16\""),
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

/// Available memory (Linux `MemAvailable`), bytes; `None` where unknown.
fn available_memory() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

/// Refuses a TinyAgent config whose step ([`crate::plan::StepPlan`]) would not fit in the
/// machine's available memory, and warns above half of it. For Qwen3 it only warns: its
/// update may run on a GPU, whose memory is not the host's.
fn check_memory(config: &Config) -> anyhow::Result<Vec<String>> {
    let plan = crate::plan::StepPlan::new(config, crate::plan::ModelShape::of(config)?);
    let need = plan.peak(config.engine.async_rollouts);
    let gb = |b: f64| b / 1e9;
    let shape = format!(
        "rollout.tasks_per_step = {} x rollout.group_size = {} episodes of up to \
         model.max_seq = {} tokens, {} per micro-batch; see `agentrl plan`",
        config.rollout.tasks_per_step,
        config.rollout.group_size,
        config.model.max_seq,
        plan.episodes_per_microbatch
    );
    let advice = "lower rollout.tasks_per_step, rollout.group_size or model.max_seq, or raise \
                  algorithm.minibatches";
    match available_memory() {
        Some(have) if need > have && config.model.kind == ModelKind::Tiny => bail!(
            "a training step would need about {:.1} GB of memory ({shape}) and this machine \
             has {:.1} GB available; {advice}",
            gb(need),
            gb(have)
        ),
        Some(have) if need > have / 2.0 => Ok(vec![format!(
            "a training step may need about {:.1} GB of memory ({shape}), more than half of \
             the {:.1} GB available here; {advice}",
            gb(need),
            gb(have)
        )]),
        _ => Ok(Vec::new()),
    }
}
