//! The trainer core: everything a run holds in memory (the policy and its reference, the
//! optimizer, the codec, the tasks and the gym's executor, the engine's weights, the run
//! directory and its state), how a run is created, resumed or opened, and what every recipe
//! does with it: sample (`Trainer::sampler`), evaluate, log, checkpoint.
//!
//! Where it sits: built from the config (`crate::build`, `crate::engine_sync`) → a recipe's
//! step (`crate::recipes`) drives it → `crate::session` runs the steps with evaluations and
//! checkpoints. The core knows no recipe: each recipe is a file on top of it. The optimizer
//! steps a recipe takes on given episodes (supervised, DPO, distillation) are in
//! `trainer/updates.rs`.

mod updates;

use std::sync::Arc;

use agentrl_chat::ChatCodec;
use agentrl_engine::{LogprobKind, SamplingParams, WeightSync};
use agentrl_gym::service::{GymBackend, GymEnv};
use agentrl_gym::{Split, TaskSet};
use agentrl_rl::KlController;
use agentrl_rollout::{evaluate_split, EnvClock, EvalReport, Prefetched, RolloutLimits};
use agentrl_run::{write_atomic_with, RunDir, TrainState};
use anyhow::{bail, Context};
use candle_core::{Device, Var};
use rand::Rng;

use crate::algo::{Algorithm, Knobs};
use crate::build::{
    build_policy, checked_tasks, kl_controller, model_sampling_defaults, training_task_ids,
    BuiltPolicy,
};
use crate::config::{apply_resume_overrides, parse_config_file, Config, ConfigChange};
use crate::engine_sync::EngineSync;
use crate::eval_spec::EvalSpec;
use crate::metrics::metric_line;
use crate::optim::{AdamW, AdamWParams};
use crate::plan::check_memory;
use crate::policy_stack::TrainPolicy;
use crate::preflight::{preflight, PreflightReport, PreflightSetup};
use crate::sampler::Sampler;
use crate::step_record::StepRecord;
use crate::streams::{epoch_slice, stream, STREAM_EVAL, STREAM_PREFLIGHT, STREAM_TASKS};

/// A trainer's [`Sampler`], written as a struct of field borrows (a macro, not a method, so
/// the borrow checker sees them apart from `self.optimizer`, which the update borrows
/// mutably while an asynchronous step samples).
macro_rules! sampler_of {
    ($trainer:expr) => {
        $crate::sampler::Sampler {
            config: &$trainer.config,
            tasks: &$trainer.tasks,
            gym: &$trainer.gym,
            env_clock: &$trainer.env_clock,
            codec: $trainer.codec.as_ref(),
            weights: $trainer
                .engine
                .weights($trainer.policy.as_ref(), $trainer.state.step as u64),
        }
    };
}
pub(crate) use sampler_of;

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
    pub(crate) reference: Option<Box<dyn TrainPolicy>>,
    pub(crate) optimizer: AdamW,
    pub(crate) vars: Vec<Var>,
    /// How the policy's episodes become ids and its sampled ids become tool calls.
    pub codec: Box<dyn ChatCodec + Send + Sync>,
    pub(crate) tasks: Arc<TaskSet>,
    pub(crate) train_ids: Vec<String>,
    /// Where the episodes run: in process, or on gym servers (`[gym]`).
    pub(crate) gym: GymBackend,
    pub(crate) kl: KlController,
    pub state: TrainState,
    pub run: RunDir,
    /// Where the engine reads its weights (the trainer's, its copy, or servers) and their
    /// syncing.
    pub(crate) engine: EngineSync,
    /// What the engine preflight measured (`engine.preflight`).
    pub preflight: Option<PreflightReport>,
    /// The next step's rollouts, sampled during this step's update (`engine.async_rollouts`).
    pub(crate) prefetched: Option<Prefetched>,
    /// Busy time of the rollouts' environments (`timing_s/env`).
    pub(crate) env_clock: Arc<EnvClock>,
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
        apply_threads(&config)?;
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
        apply_threads(&config)?;
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
        apply_threads(&config)?;
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

    /// The trainer of `config` in `run`: the policy, its reference, codec, engine and
    /// optimizer built, the train split read from `tasks`, the state at step 0.
    fn build(config: Config, run: RunDir, tasks: TaskSet) -> anyhow::Result<Self> {
        crate::allocator::keep_freed_pages();
        let algorithm = config.algorithm.name;
        let knobs = config.algorithm.knobs.clone();
        let seed = config.train.seed;
        let uses_reference = knobs.kl_coef > 0.0 || knobs.kl_target.is_some();
        let BuiltPolicy {
            device,
            policy,
            reference,
            codec,
        } = build_policy(&config, seed, uses_reference)?;
        let engine = EngineSync::new(&config, policy.as_ref(), &run.root)?;
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
        let train_ids = training_task_ids(&config, &tasks)?;
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
        let gym = GymBackend::new(&config.gym, tasks.clone()).with_context(|| {
            if config.gym.is_remote() {
                format!("connecting to gym.endpoints = {:?}", config.gym.endpoints)
            } else {
                "starting the gym's sandbox executor".to_string()
            }
        })?;
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
            gym,
            kl,
            state,
            run,
            config,
            engine,
            preflight: None,
            prefetched: None,
            env_clock: EnvClock::new(),
        })
    }

    /// What `engine.cpu_matmul` came to for the engine (and the line the run's log prints).
    #[doc(hidden)]
    pub fn engine_amx(&self) -> &crate::engine_sync::AmxChoice {
        self.engine.amx()
    }

    /// Whether the engine samples from its own copy packed for the CPU's AMX unit now.
    #[doc(hidden)]
    pub fn engine_packed_for_amx(&self) -> bool {
        self.engine.copy_packed_for_amx()
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
    #[doc(hidden)]
    pub fn tasks_for_step(&self, step: usize) -> Vec<String> {
        let per_step = self.config.rollout.tasks_per_step;
        let seed = self.config.train.seed;
        epoch_slice(self.train_ids.len(), per_step, step, seed, STREAM_TASKS)
            .into_iter()
            .map(|i| self.train_ids[i].clone())
            .collect()
    }
    /// What sampling reads: everything but the optimizer, with the engine on the trainer's
    /// own weights, its copy, or the servers.
    pub(crate) fn sampler(&self) -> Sampler<'_> {
        sampler_of!(self)
    }
    /// Syncs the engine's weights to the trainer's unless they are fresh enough for rollouts
    /// trained on at step `trained_at` ([`EngineSync::sync_for`]).
    pub(crate) fn sync_engine_for(&mut self, trained_at: u64) -> anyhow::Result<()> {
        let version = self.state.step as u64;
        self.engine
            .sync_for(self.policy.as_ref(), version, trained_at)
    }

    /// The engine preflight (`engine.preflight`): the engine samples the first prompts of a
    /// few training tasks, the trainer scores the same tokens, and a semantic mismatch
    /// refuses the run ([`crate::preflight`]). The report is kept in
    /// [`Trainer::preflight`] and written to the run's `preflight.json`.
    pub(crate) fn run_preflight(&mut self) -> anyhow::Result<()> {
        if !self.config.engine.preflight {
            return Ok(());
        }
        self.engine
            .sync(self.policy.as_ref(), self.state.step as u64)?;
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
            model_defaults: model_sampling_defaults(&self.config)?,
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
    /// The action-token budget of one episode (`L_max` of DAPO's overlong shaping and of
    /// Dr. GRPO's normaliser).
    pub(crate) fn action_budget(&self) -> usize {
        self.config.rollout.max_turns * self.config.rollout.max_action_tokens
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

    /// The run's own evaluation of `split` (untrained, periodic, final), as its `[eval]`
    /// section says ([`EvalSpec::for_run`]), with the stream seed `seed`.
    pub fn evaluate_for_run(&self, split: Split, seed: u64) -> anyhow::Result<EvalReport> {
        self.evaluate(&EvalSpec::for_run(&self.config.eval, split, seed))
    }

    /// Evaluates the current policy on fresh episodes as `spec` says (which split and tasks,
    /// episodes per task, pass@k, temperature, seed): reproducible, and never touching the
    /// training streams.
    pub fn evaluate(&self, spec: &EvalSpec) -> anyhow::Result<EvalReport> {
        spec.check()?;
        let EvalSpec {
            split,
            max_tasks,
            samples_per_task,
            k,
            temperature,
            seed,
        } = *spec;
        let all: Vec<String> = self
            .tasks
            .split_checked(split)?
            .iter()
            .map(|t| t.id.clone())
            .collect();
        let ids = spread(&all, max_tasks.unwrap_or(usize::MAX));
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
        let mut rng = stream(self.config.train.seed, seed, STREAM_EVAL);
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
            samples_per_task,
            k,
            crate::sampler::live_episode_bound(&self.config),
            &mut |n| self.sampler().envs(n),
            &mut rng,
        )
    }

    /// The task set the run trains and evaluates on.
    pub fn task_set(&self) -> &Arc<TaskSet> {
        &self.tasks
    }

    /// `count` fresh envs of the run's episode config (turn limit, reward), sharing the run's
    /// sandbox executor and outcome cache.
    pub(crate) fn training_envs(&self, count: usize) -> Vec<GymEnv> {
        self.sampler().envs(count)
    }

    /// The limits the run's rollouts use (episode length, env threads).
    pub(crate) fn episode_limits(&self) -> RolloutLimits {
        self.sampler().rollout_limits()
    }

    /// The ids of the train split's tasks.
    #[doc(hidden)]
    pub fn train_task_ids(&self) -> &[String] {
        &self.train_ids
    }

    /// Opens another run's newest loadable checkpoint as a frozen teacher (`agentrl distill
    /// --teacher RUN`): read-only like [`Self::open_for_eval`], computing on this process's
    /// `threads` whatever the teacher's config says.
    pub(crate) fn open_as_teacher(path: &std::path::Path, threads: usize) -> anyhow::Result<Self> {
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
                    self.engine.refresh_copy(self.policy.as_ref())?;
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

/// At most `limit` of `items`, evenly spaced over them (the first always among them), in order.
fn spread<T: Clone>(items: &[T], limit: usize) -> Vec<T> {
    if limit >= items.len() {
        return items.to_vec();
    }
    (0..limit)
        .map(|i| items[i * items.len() / limit].clone())
        .collect()
}

/// The process's compute threads for this config ([`crate::threads`]): a real language
/// model's elementwise ops share them too.
fn apply_threads(config: &Config) -> anyhow::Result<()> {
    if config.model.kind == crate::config::ModelKind::Qwen3 {
        crate::threads::share_candle_pool(config.threads());
    }
    crate::threads::apply(config.threads())
}
