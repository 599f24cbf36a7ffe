//! Config checks: sizes, ranges and knob combinations that cannot be what the user means
//! (errors), or that some users do mean (warnings). Everything is checked before a run
//! directory is created, so a bad config never leaves a directory behind.

use agentrl_model::fused::amx_matmul::CpuMatmul;
use anyhow::bail;

use agentrl_engine::SamplingParams;

use super::schema::{
    AlgorithmConfig, Config, DistillConfig, DpoConfig, EngineConfig, EvalConfig, ModelConfig,
    ModelKind, OptimConfig, Qwen3Settings, RftConfig, RolloutConfig, SftConfig, TrainConfig,
};
use crate::algo::StepShape;

/// What [`Config::validate`] found: errors stop the run, warnings are printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// `train.threads` above this many per core is refused: the pool would only contend.
const MAX_THREADS_PER_CORE: usize = 4;

/// The error of `engine.cpu_matmul = "amx"` where it cannot apply, for the reason `why`.
fn amx_refusal(why: &str) -> String {
    format!(
        "engine.cpu_matmul = \"amx\" packs the local engine's Qwen3 weights for the CPU's AMX \
         unit, but {why}: set engine.cpu_matmul = \"f32\" (or \"auto\")"
    )
}

/// Whether `engine.cpu_matmul = setting` puts the local engine on the AMX path on this
/// machine, given why it cannot apply to the run (`inapplicable`, as
/// [`Config::cpu_matmul_inapplicable`] says): `"amx"` where it cannot apply, or on a CPU
/// without AMX, is an error naming the key; `"auto"` then stays on f32. The config's
/// validation, the memory plan and the engine's choice (`crate::engine_sync::AmxChoice`) all
/// decide through it.
pub(crate) fn cpu_matmul_on_amx(
    setting: CpuMatmul,
    inapplicable: Option<&str>,
) -> anyhow::Result<bool> {
    match (inapplicable, setting) {
        (Some(why), CpuMatmul::Amx) => bail!(amx_refusal(why)),
        (Some(_), _) => Ok(false),
        (None, setting) => setting.wants_amx("engine.cpu_matmul"),
    }
}

fn positive_finite(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

impl Config {
    /// Checks sizes and knob combinations, section by section in the file's order; the
    /// algorithm's own checks come from its preset file.
    pub fn validate(&self) -> Validation {
        let a = &self.algorithm;
        let shape = StepShape {
            group_size: self.rollout.group_size,
            tasks_per_step: self.rollout.tasks_per_step,
        };
        let found = a.name.check(&a.knobs, shape, &a.overridden);
        let mut v = Validation {
            errors: found.errors,
            warnings: found.warnings,
        };
        self.model.validate(&mut v.errors);
        self.qwen3.validate(&mut v.errors);
        let amx = self.cpu_matmul_inapplicable();
        self.engine.validate(a, amx.as_deref(), &mut v);
        validate_sampling(&self.sampling, &mut v.errors);
        self.optim.validate(&mut v.errors);
        self.rollout.validate(&mut v.errors);
        self.train.validate(a, &mut v);
        validate_reward(&self.reward, &mut v.errors);
        if let Err(e) = self.gym.validate() {
            v.errors.push(e.to_string());
        }
        self.eval.validate(&mut v.errors);
        self.sft.validate(self.model.kind, &mut v.errors);
        self.rft.validate(&mut v.errors);
        self.dpo.validate(&mut v.errors);
        self.distill.validate(&mut v.errors);
        v
    }

    /// Why `engine.cpu_matmul` cannot put this run's engine on the AMX path (`None` where it
    /// can): it multiplies a local engine's f32 Qwen3 weights only. `"amx"` is refused with
    /// this reason; `"auto"` falls back to f32 and says so. (The device, known only once the
    /// model is built, is checked by [`crate::engine_sync::EngineSync::new`].)
    pub fn cpu_matmul_inapplicable(&self) -> Option<String> {
        let e = &self.engine;
        if self.model.kind != ModelKind::Qwen3 {
            Some(
                "model.kind = \"tiny\": TinyAgent's decoder has no AMX path (it needs \
                 model.kind = \"qwen3\")"
                    .into(),
            )
        } else if e.kind != super::EngineKind::Local {
            Some(format!(
                "engine.kind = {:?} samples on inference servers, not the local engine (an \
                 `agentrl serve` server takes --cpu-matmul amx)",
                e.kind
            ))
        } else if e.dtype != "f32" {
            Some(format!(
                "engine.dtype = {:?}: the AMX path multiplies f32 weights (bf16x3), it needs \
                 engine.dtype = \"f32\"",
                e.dtype
            ))
        } else {
            None
        }
    }

    /// [`Config::validate`], failing on the error list and returning the warnings.
    pub fn validated(&self) -> anyhow::Result<Vec<String>> {
        let v = self.validate();
        if !v.errors.is_empty() {
            bail!("invalid config:\n  - {}", v.errors.join("\n  - "));
        }
        Ok(v.warnings)
    }

    /// Thread count after resolving `0` to the machine's available parallelism.
    pub fn threads(&self) -> usize {
        if self.train.threads > 0 {
            self.train.threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The local engine's decoding threads (`engine.threads`, 0 = [`Self::threads`]).
    pub fn engine_threads(&self) -> usize {
        if self.engine.threads > 0 {
            self.engine.threads
        } else {
            self.threads()
        }
    }

    /// The config as TOML, every knob written out (what the run directory stores and
    /// `--print-config` prints).
    pub fn to_toml(&self) -> anyhow::Result<String> {
        use anyhow::Context;
        toml::to_string_pretty(self).context("serialising the config as TOML")
    }
}

impl ModelConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if self.d_model == 0 || self.layers == 0 || self.mlp_ratio == 0 || self.max_seq == 0 {
            errors.push(
                "model.d_model, model.layers, model.mlp_ratio and model.max_seq must be >= 1"
                    .into(),
            );
        }
        if self.heads == 0 || !crate::every(self.d_model, self.heads) {
            errors.push(format!(
                "model.d_model = {} must be a multiple of model.heads = {}",
                self.d_model, self.heads
            ));
        }
    }
}

impl Qwen3Settings {
    fn validate(&self, errors: &mut Vec<String>) {
        if self.gradient_checkpointing && self.lora_rank == 0 {
            errors.push(
                "qwen3.gradient_checkpointing = true needs qwen3.lora_rank > 0 (the embedding's \
                 gradient of a fully trained model is not checkpointed)"
                    .into(),
            );
        }
    }
}

impl EngineConfig {
    /// `amx_inapplicable`: why `cpu_matmul` cannot apply to this run
    /// ([`Config::cpu_matmul_inapplicable`]).
    fn validate(
        &self,
        algorithm: &AlgorithmConfig,
        amx_inapplicable: Option<&str>,
        v: &mut Validation,
    ) {
        let knobs = &algorithm.knobs;
        if self.async_rollouts
            && self.max_staleness >= 1
            && knobs.rollout_is == Some(agentrl_rl::IsLevel::Token)
            && knobs.old_logprob_pass
            && !algorithm.overridden.iter().any(|k| k == "rollout_is")
        {
            v.warnings.push(format!(
                "engine.async_rollouts: rollouts up to {} version(s) old are corrected by \
                 decoupled PPO (algorithm.rollout_is = \"token\", old_logprob_pass = true); set \
                 algorithm.rollout_is or bypass_mode to choose another correction",
                self.max_staleness
            ));
        }
        if let Err(err) = cpu_matmul_on_amx(self.cpu_matmul, amx_inapplicable) {
            v.errors.push(err.to_string());
        }
    }
}

/// `[sampling]` (the engine's own type checks its ranges; training adds T > 0).
fn validate_sampling(sampling: &SamplingParams, errors: &mut Vec<String>) {
    if !positive_finite(sampling.temperature) {
        errors.push(
            "sampling.temperature must be > 0 for training rollouts (the trainer scores \
             logits / T)"
                .into(),
        );
    }
    if let Err(e) = sampling.validate() {
        errors.push(e.to_string());
    }
}

impl OptimConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if !positive_finite(self.lr) {
            errors.push(format!("optim.lr = {} must be a positive number", self.lr));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            errors.push("optim.beta1 and optim.beta2 must lie in [0, 1)".into());
        }
        if !positive_finite(self.eps) {
            errors.push(format!(
                "optim.eps = {} must be > 0 (it keeps AdamW's division finite)",
                self.eps
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            errors.push(format!(
                "optim.weight_decay = {} must be >= 0",
                self.weight_decay
            ));
        }
        if !(self.grad_clip.is_finite() && self.grad_clip >= 0.0) {
            errors.push("optim.grad_clip must be >= 0 (0 disables clipping)".into());
        }
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            errors.push(format!(
                "optim.min_lr_ratio = {} must lie in [0, 1]",
                self.min_lr_ratio
            ));
        }
    }
}

impl RolloutConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if self.group_size == 0 || self.tasks_per_step == 0 {
            errors.push("rollout.group_size and rollout.tasks_per_step must be >= 1".into());
        }
        if self.max_turns == 0 || self.max_action_tokens == 0 {
            errors.push("rollout.max_turns and rollout.max_action_tokens must be >= 1".into());
        }
        let splits: Vec<&str> = agentrl_gym::Split::ALL.iter().map(|s| s.as_str()).collect();
        if !splits.contains(&self.split.as_str()) {
            errors.push(format!(
                "rollout.split = {:?} is not a split; expected one of {}",
                self.split,
                splits.join(", ")
            ));
        }
        if let Some(ids) = &self.task_ids {
            if ids.is_empty() {
                errors.push(
                    "rollout.task_ids = [] names no task; leave it unset to train on the whole split"
                        .into(),
                );
            }
            let mut seen = std::collections::HashSet::new();
            for id in ids {
                if !seen.insert(id) {
                    errors.push(format!("rollout.task_ids names {id:?} twice"));
                }
            }
        }
        if let Some(dir) = &self.tasks_dir {
            if !std::path::Path::new(dir).is_dir() {
                errors.push(format!(
                    "rollout.tasks_dir = {dir:?} is not a directory (a folder of task folders)"
                ));
            }
        }
    }
}

impl TrainConfig {
    /// `algorithm`: the KL term the warm-up's anchor needs.
    fn validate(&self, algorithm: &AlgorithmConfig, v: &mut Validation) {
        let errors = &mut v.errors;
        if let Some(name) = &self.run_name {
            if let Err(e) = agentrl_run::validate_run_name(name) {
                errors.push(e);
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.threads > MAX_THREADS_PER_CORE * cores {
            errors.push(format!(
                "train.threads = {} is more than {MAX_THREADS_PER_CORE} per core on this \
                 machine ({cores} cores); the compute pool would only contend (0 = one per core)",
                self.threads
            ));
        } else if self.threads > cores {
            v.warnings.push(format!(
                "train.threads = {} is more than this machine's {cores} cores",
                self.threads
            ));
        }
        if self.steps == 0 {
            errors.push("train.steps must be >= 1".into());
        }
        if self.format_warmup_steps > 0 && self.format_warmup_steps >= self.steps {
            errors.push(format!(
                "train.format_warmup_steps = {} leaves no RL steps of train.steps = {}",
                self.format_warmup_steps, self.steps
            ));
        }
        if self.format_warmup_kl_anchor {
            let kl = &algorithm.knobs;
            if self.format_warmup_steps == 0 {
                errors.push(
                    "train.format_warmup_kl_anchor = true needs train.format_warmup_steps > 0 \
                     (there is no warm-up to anchor to)"
                        .into(),
                );
            } else if kl.kl_coef == 0.0 && kl.kl_target.is_none() {
                errors.push(
                    "train.format_warmup_kl_anchor = true with algorithm.kl_coef = 0: there is \
                     no KL term to anchor (set algorithm.kl_coef > 0)"
                        .into(),
                );
            }
        }
        if !positive_finite(self.format_warmup_lr) {
            errors.push(format!(
                "train.format_warmup_lr must be > 0, got {}",
                self.format_warmup_lr
            ));
        }
        if !(0.0..=1.0).contains(&self.stop_at_solve_rate) {
            errors.push(format!(
                "train.stop_at_solve_rate = {} must lie in [0, 1]",
                self.stop_at_solve_rate
            ));
        }
    }
}

/// `[reward]` (the gym's type): the length prices are subtracted, so they are not negative.
fn validate_reward(reward: &agentrl_gym::RewardFn, errors: &mut Vec<String>) {
    if !(reward.format_penalty.is_finite() && reward.format_penalty >= 0.0) {
        errors.push(format!(
            "reward.format_penalty = {} must be >= 0 (it is subtracted per format error)",
            reward.format_penalty
        ));
    }
    if !(reward.turn_cost.is_finite() && reward.turn_cost >= 0.0) {
        errors.push(format!(
            "reward.turn_cost = {} must be >= 0 (it is subtracted per turn)",
            reward.turn_cost
        ));
    }
}

impl EvalConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            errors.push(format!(
                "eval.temperature = {} must be >= 0 (0 = greedy)",
                self.temperature
            ));
        }
        if self.samples == 0 {
            errors.push("eval.samples must be >= 1".into());
        }
    }
}

impl SftConfig {
    /// `model`: which policy writes the edits (TinyAgent writes candidate edits only).
    fn validate(&self, model: ModelKind, errors: &mut Vec<String>) {
        if !positive_finite(self.lr) {
            errors.push(format!("sft.lr must be > 0, got {}", self.lr));
        }
        if let Some(forms) = &self.edit_forms {
            if forms.is_empty() {
                errors.push(
                    "sft.edit_forms is empty: name \"candidate\" and/or \"free_form\", or unset it"
                        .into(),
                );
            }
            if model == ModelKind::Tiny && forms.contains(&agentrl_gym::expert::EditForm::FreeForm)
            {
                errors.push(
                    "sft.edit_forms: TinyAgent writes only candidate edits (`edit {candidate: k}`), \
                     not \"free_form\""
                        .into(),
                );
            }
        }
    }
}

impl RftConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if self.samples_per_task == 0 {
            errors.push("rft.samples_per_task must be >= 1".into());
        }
        if self.sft_steps == 0 {
            errors.push("rft.sft_steps must be >= 1".into());
        }
    }
}

impl DpoConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if !positive_finite(self.beta) {
            errors.push(format!("dpo.beta must be > 0, got {}", self.beta));
        }
        if !positive_finite(self.lr) {
            errors.push(format!("dpo.lr must be > 0, got {}", self.lr));
        }
        if self.samples_per_task < 2 {
            errors.push(format!(
                "dpo.samples_per_task must be >= 2 (a pair needs a failed sample), got {}",
                self.samples_per_task
            ));
        }
    }
}

impl DistillConfig {
    fn validate(&self, errors: &mut Vec<String>) {
        if !self.coef.is_finite() || self.coef <= 0.0 {
            errors.push(format!("distill.coef must be > 0, got {}", self.coef));
        }
    }
}
