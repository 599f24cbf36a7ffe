//! Config checks: sizes, ranges and knob combinations that cannot be what the user means
//! (errors), or that some users do mean (warnings). Everything is checked before a run
//! directory is created, so a bad config never leaves a directory behind.

use agentrl_model::fused::amx_matmul::CpuMatmul;
use anyhow::bail;

use super::schema::Config;
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
    /// Checks sizes and knob combinations; the algorithm's own checks come from its preset
    /// file.
    pub fn validate(&self) -> Validation {
        let a = &self.algorithm;
        let shape = StepShape {
            group_size: self.rollout.group_size,
            tasks_per_step: self.rollout.tasks_per_step,
        };
        let found = a.name.check(&a.knobs, shape, &a.overridden);
        let (mut errors, mut warnings) = (found.errors, found.warnings);

        if self.rollout.group_size == 0 || self.rollout.tasks_per_step == 0 {
            errors.push("rollout.group_size and rollout.tasks_per_step must be >= 1".into());
        }
        if self.rollout.max_turns == 0 || self.rollout.max_action_tokens == 0 {
            errors.push("rollout.max_turns and rollout.max_action_tokens must be >= 1".into());
        }
        if !positive_finite(self.sampling.temperature) {
            errors.push(
                "sampling.temperature must be > 0 for training rollouts (the trainer scores \
                 logits / T)"
                    .into(),
            );
        }
        if let Err(e) = self.sampling.validate() {
            errors.push(e.to_string());
        }
        if let Err(e) = self.gym.validate() {
            errors.push(e.to_string());
        }
        if !(self.eval.temperature.is_finite() && self.eval.temperature >= 0.0) {
            errors.push(format!(
                "eval.temperature = {} must be >= 0 (0 = greedy)",
                self.eval.temperature
            ));
        }
        let o = &self.optim;
        if !positive_finite(o.lr) {
            errors.push(format!("optim.lr = {} must be a positive number", o.lr));
        }
        if !(0.0..1.0).contains(&o.beta1) || !(0.0..1.0).contains(&o.beta2) {
            errors.push("optim.beta1 and optim.beta2 must lie in [0, 1)".into());
        }
        if !positive_finite(o.eps) {
            errors.push(format!(
                "optim.eps = {} must be > 0 (it keeps AdamW's division finite)",
                o.eps
            ));
        }
        if !(o.weight_decay.is_finite() && o.weight_decay >= 0.0) {
            errors.push(format!(
                "optim.weight_decay = {} must be >= 0",
                o.weight_decay
            ));
        }
        if !(o.grad_clip.is_finite() && o.grad_clip >= 0.0) {
            errors.push("optim.grad_clip must be >= 0 (0 disables clipping)".into());
        }
        if !(0.0..=1.0).contains(&o.min_lr_ratio) {
            errors.push(format!(
                "optim.min_lr_ratio = {} must lie in [0, 1]",
                o.min_lr_ratio
            ));
        }
        let m = &self.model;
        if m.d_model == 0 || m.layers == 0 || m.mlp_ratio == 0 || m.max_seq == 0 {
            errors.push(
                "model.d_model, model.layers, model.mlp_ratio and model.max_seq must be >= 1"
                    .into(),
            );
        }
        if m.heads == 0 || !crate::every(m.d_model, m.heads) {
            errors.push(format!(
                "model.d_model = {} must be a multiple of model.heads = {}",
                m.d_model, m.heads
            ));
        }
        if !(self.reward.format_penalty.is_finite() && self.reward.format_penalty >= 0.0) {
            errors.push(format!(
                "reward.format_penalty = {} must be >= 0 (it is subtracted per format error)",
                self.reward.format_penalty
            ));
        }
        if !(self.reward.turn_cost.is_finite() && self.reward.turn_cost >= 0.0) {
            errors.push(format!(
                "reward.turn_cost = {} must be >= 0 (it is subtracted per turn)",
                self.reward.turn_cost
            ));
        }
        if self.eval.samples == 0 {
            errors.push("eval.samples must be >= 1".into());
        }
        if self.qwen3.gradient_checkpointing && self.qwen3.lora_rank == 0 {
            errors.push(
                "qwen3.gradient_checkpointing = true needs qwen3.lora_rank > 0 (the embedding's \
                 gradient of a fully trained model is not checkpointed)"
                    .into(),
            );
        }
        let splits: Vec<&str> = agentrl_gym::Split::ALL.iter().map(|s| s.as_str()).collect();
        if !splits.contains(&self.rollout.split.as_str()) {
            errors.push(format!(
                "rollout.split = {:?} is not a split; expected one of {}",
                self.rollout.split,
                splits.join(", ")
            ));
        }
        if let Some(dir) = &self.rollout.tasks_dir {
            if !std::path::Path::new(dir).is_dir() {
                errors.push(format!(
                    "rollout.tasks_dir = {dir:?} is not a directory (a folder of task folders)"
                ));
            }
        }
        let t = &self.train;
        if let Some(name) = &t.run_name {
            if let Err(e) = agentrl_run::validate_run_name(name) {
                errors.push(e);
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if t.threads > MAX_THREADS_PER_CORE * cores {
            errors.push(format!(
                "train.threads = {} is more than {MAX_THREADS_PER_CORE} per core on this \
                 machine ({cores} cores); the compute pool would only contend (0 = one per core)",
                t.threads
            ));
        } else if t.threads > cores {
            warnings.push(format!(
                "train.threads = {} is more than this machine's {cores} cores",
                t.threads
            ));
        }
        if t.steps == 0 {
            errors.push("train.steps must be >= 1".into());
        }
        if t.format_warmup_steps > 0 && t.format_warmup_steps >= t.steps {
            errors.push(format!(
                "train.format_warmup_steps = {} leaves no RL steps of train.steps = {}",
                t.format_warmup_steps, t.steps
            ));
        }
        if t.format_warmup_kl_anchor {
            let kl = &self.algorithm.knobs;
            if t.format_warmup_steps == 0 {
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
        if !positive_finite(self.sft.lr) {
            errors.push(format!("sft.lr must be > 0, got {}", self.sft.lr));
        }
        if let Some(forms) = &self.sft.edit_forms {
            if forms.is_empty() {
                errors.push(
                    "sft.edit_forms is empty: name \"candidate\" and/or \"free_form\", or unset it"
                        .into(),
                );
            }
            if self.model.kind == super::ModelKind::Tiny
                && forms.contains(&agentrl_gym::expert::EditForm::FreeForm)
            {
                errors.push(
                    "sft.edit_forms: TinyAgent writes only candidate edits (`edit {candidate: k}`), \
                     not \"free_form\""
                        .into(),
                );
            }
        }
        if self.rft.samples_per_task == 0 {
            errors.push("rft.samples_per_task must be >= 1".into());
        }
        if self.rft.sft_steps == 0 {
            errors.push("rft.sft_steps must be >= 1".into());
        }
        if !positive_finite(self.dpo.beta) {
            errors.push(format!("dpo.beta must be > 0, got {}", self.dpo.beta));
        }
        if !positive_finite(self.dpo.lr) {
            errors.push(format!("dpo.lr must be > 0, got {}", self.dpo.lr));
        }
        if !self.distill.coef.is_finite() || self.distill.coef <= 0.0 {
            errors.push(format!(
                "distill.coef must be > 0, got {}",
                self.distill.coef
            ));
        }
        if self.dpo.samples_per_task < 2 {
            errors.push(format!(
                "dpo.samples_per_task must be >= 2 (a pair needs a failed sample), got {}",
                self.dpo.samples_per_task
            ));
        }
        if !positive_finite(t.format_warmup_lr) {
            errors.push(format!(
                "train.format_warmup_lr must be > 0, got {}",
                t.format_warmup_lr
            ));
        }
        if !(0.0..=1.0).contains(&t.stop_at_solve_rate) {
            errors.push(format!(
                "train.stop_at_solve_rate = {} must lie in [0, 1]",
                t.stop_at_solve_rate
            ));
        }
        let e = &self.engine;
        if e.async_rollouts
            && e.max_staleness >= 1
            && a.knobs.rollout_is == Some(agentrl_rl::IsLevel::Token)
            && a.knobs.old_logprob_pass
            && !a.overridden.iter().any(|k| k == "rollout_is")
        {
            warnings.push(format!(
                "engine.async_rollouts: rollouts up to {} version(s) old are corrected by \
                 decoupled PPO (algorithm.rollout_is = \"token\", old_logprob_pass = true); set \
                 algorithm.rollout_is or bypass_mode to choose another correction",
                e.max_staleness
            ));
        }
        if let Err(err) = cpu_matmul_on_amx(e.cpu_matmul, self.cpu_matmul_inapplicable().as_deref())
        {
            errors.push(err.to_string());
        }
        Validation { errors, warnings }
    }

    /// Why `engine.cpu_matmul` cannot put this run's engine on the AMX path (`None` where it
    /// can): it multiplies a local engine's f32 Qwen3 weights only. `"amx"` is refused with
    /// this reason; `"auto"` falls back to f32 and says so. (The device, known only once the
    /// model is built, is checked by [`crate::engine_sync::EngineSync::new`].)
    pub fn cpu_matmul_inapplicable(&self) -> Option<String> {
        let e = &self.engine;
        if self.model.kind != super::ModelKind::Qwen3 {
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
