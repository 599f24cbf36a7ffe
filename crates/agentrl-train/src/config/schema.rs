//! The run configuration's schema: one struct per TOML section.
//!
//! Every key of every section is required when a config is deserialised, and
//! `configs/default.toml` (compiled in) lists them all: it is the one source of defaults, and
//! every other file and `--set` is layered on it ([`super::load`]). Only the keys whose value
//! may be "unset" are `Option`s.

use serde::{Deserialize, Serialize};

use agentrl_chat::tiny::grammar::ActionVocab;
use agentrl_engine::SamplingParams;

use crate::algo::{Algorithm, Knobs};

/// Everything a run needs, section by section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    /// Qwen3's settings (read when `model.kind = "qwen3"`).
    pub qwen3: Qwen3Settings,
    /// What samples the rollouts: the local engine or inference servers.
    pub engine: EngineConfig,
    /// How the engine samples actions during training rollouts.
    pub sampling: SamplingParams,
    pub algorithm: AlgorithmConfig,
    pub optim: OptimConfig,
    pub rollout: RolloutConfig,
    pub train: TrainConfig,
    /// The training reward: the gym's reward function (`kind`, `format_penalty`).
    pub reward: agentrl_gym::RewardFn,
    /// Where episodes run: in this process (no endpoints), or on `agentrl gym serve` servers.
    /// Absent in run folders from before the section: in process.
    #[serde(default)]
    pub gym: agentrl_gym::service::FleetConfig,
    pub eval: EvalConfig,
    /// Supervised fine-tuning (`agentrl sft`): its learning rate and data.
    pub sft: SftConfig,
    /// Rejection-sampling fine-tuning (`agentrl rft`): samples per task, SFT steps per round.
    pub rft: RftConfig,
    /// DPO (`agentrl dpo`): beta, learning rate, the pair pool.
    pub dpo: DpoConfig,
    /// On-policy distillation (`agentrl distill`): the teacher run and the advantage scale.
    pub distill: DistillConfig,
}

/// Which policy a run trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// TinyAgent over the gym's symbol vocabulary (the `[model]` shape keys below).
    Tiny,
    /// Qwen3 from a model folder (`model.dir`) through its own chat template (`[qwen3]`).
    Qwen3,
}

/// The policy: its kind, and TinyAgent's shape and action space (the vocabulary size comes
/// from the tiny codec). The shape keys are TinyAgent's only; a Qwen3's shape is its folder's
/// `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub kind: ModelKind,
    /// The model folder (`config.json`, `model.safetensors`, `tokenizer.json`, the chat
    /// template) of a Qwen3 run; `agentrl train --model DIR` sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    pub d_model: usize,
    pub layers: usize,
    pub heads: usize,
    pub mlp_ratio: usize,
    /// Longest episode (prompt + all turns) in tokens; longer episodes are cut and flagged.
    pub max_seq: usize,
    /// Words the policy may emit (`agentrl_chat::tiny::grammar`): the call grammar, the 15
    /// words of the call format, or the whole vocabulary.
    pub action_vocab: ActionVocab,
    /// Score the candidate arguments `C0…` with a pointer head (the decision state against
    /// each candidate's span in the task observation) instead of the LM head's fixed rows, so
    /// that choosing an edit means reading the candidates, not remembering a position.
    pub pointer_head: bool,
    /// How the pointer head pools a candidate span into its key: "mean" or "mean-last" (half
    /// the mean, half the span's last position; `agentrl_model::tiny::PointerPool` has the
    /// measurement). Run folders from before the key are read as "mean", as they were trained.
    #[serde(default = "agentrl_model::tiny::PointerPool::before_the_choice")]
    pub pointer_pool: agentrl_model::tiny::PointerPool,
}

/// `[qwen3]`: how a Qwen3 is trained and how its episodes are rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qwen3Settings {
    /// LoRA rank on the attention and MLP projections; 0 trains every weight.
    pub lora_rank: usize,
    /// LoRA's `alpha` (the update is scaled by `alpha / rank`).
    pub lora_alpha: f64,
    /// The trainer's weight dtype: "f32" or "bf16".
    pub dtype: String,
    /// The template's `enable_thinking` flag (Qwen3 opens an empty `<think></think>` block
    /// when false).
    pub enable_thinking: bool,
    /// Tool output longer than this many tokens is cut in the middle, with a marker saying
    /// how much was cut.
    pub max_observation_tokens: usize,
    /// Gradient checkpointing of the update's forward (transformers'
    /// `gradient_checkpointing`): one decoder layer's activations live at a time, for one more
    /// forward pass of the layers (`agentrl_model::qwen3::CheckpointedLayers`). Needs LoRA
    /// (`lora_rank > 0`). Absent in run folders from before the knob: off.
    #[serde(default)]
    pub gradient_checkpointing: bool,
}

/// Where rollouts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// The KV-cached engine in this process, on the trainer's weights.
    Local,
    /// vLLM servers (`/v1/completions` with token ids; LoRA sync by `/v1/load_lora_adapter`).
    Vllm,
    /// SGLang servers (`/generate`; full-weight sync by `/update_weights_from_disk`).
    Sglang,
}

/// `[engine]`: the rollout engine, its log-prob semantics, weight sync and staleness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// Server base URLs (`http://host:port`) of a remote engine; requests are balanced over
    /// them.
    pub endpoints: Vec<String>,
    /// The model name the servers serve (checked at start); unset = the model folder's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// Which log-probs the engine returns (ALGORITHMS.md §13): "temperature-scaled" (the
    /// local engine, SGLang), "raw" (vLLM's default `raw_logprobs`) or "processed" (vLLM
    /// `processed_logprobs`). The preflight checks the claim.
    pub logprobs: agentrl_engine::LogprobKind,
    /// Sample in a copy of the weights in this dtype ("f32" shares the trainer's weights;
    /// "bf16" samples in bf16, a numeric mismatch the metrics report).
    pub dtype: String,
    /// Which kernel multiplies the local engine's frozen Qwen3 weights on the CPU: "f32" (the
    /// f32 GEMM), "amx" (bf16x3 on the CPU's AMX unit, ~1.65x faster scoring and ~1e-4 from
    /// the trainer's log-probs; an error where the CPU has none) or "auto" (AMX where present,
    /// logged). AMX gives the engine a copy of its own, packed at the first weight sync and
    /// again at each sync of a full-weight run (a LoRA run's syncs copy only its adapters); the
    /// trainer's forwards stay f32 ([`crate::engine_sync`]). Qwen3 with the local engine and
    /// `dtype = "f32"` only. Defaults to "f32" when absent (run folders from before the knob).
    #[serde(default)]
    pub cpu_matmul: agentrl_model::fused::amx_matmul::CpuMatmul,
    /// Gaussian noise (std, in nats) added to every log-prob the engine reports: an injected
    /// engine/trainer mismatch for experiments and for the doctor's tests. 0 = none.
    pub logprob_noise: f64,
    /// Score every sampled batch with the trainer before the update and record the
    /// engine/trainer log-prob gap (`rollout_corr/logprob_abs_diff` and verl's `rollout_corr/…`
    /// diagnostics) even where nothing else needs that pass: a local engine sharing the
    /// trainer's weights under an algorithm that takes π_old from the engine. Costs one
    /// forward pass a step; changes nothing the update computes. Without it, and without
    /// another reader of the pass, the gap is not recorded (rather than recorded as 0).
    #[serde(default)]
    pub measure_mismatch: bool,
    /// Sample the next step's rollouts while this step trains (rollouts up to
    /// `max_staleness` weight versions old); false = sample, then train.
    pub async_rollouts: bool,
    /// Most weight versions a rollout may lag the trainer by when it is trained on.
    pub max_staleness: usize,
    /// Before the first step, sample a small batch and check the engine's log-probs against
    /// the trainer's (refuses semantic mismatches; reports numeric drift).
    pub preflight: bool,
    /// How new weights reach a server: "lora" (a PEFT adapter) or "full" (a safetensors folder).
    pub weight_sync: String,
    /// Seconds before a request to a server counts as lost (and is retried).
    pub timeout_s: f64,
    /// Attempts per request before the step fails with the endpoint's error.
    pub retries: usize,
    /// Requests in flight per endpoint.
    pub max_in_flight: usize,
    /// Compute threads of the local engine's decoding; 0 = `train.threads`. Small models
    /// decode faster on fewer threads than they train on (`agentrl_engine::threads`).
    /// Defaults to 0 when absent, so run folders from before the knob resume unchanged.
    #[serde(default)]
    pub threads: usize,
}

/// `[algorithm]`: a preset name and its knobs, with the user's overrides merged on the
/// preset ([`Knobs::resolve`]). Written out in full (every knob) when serialised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlgorithmConfig {
    pub name: Algorithm,
    #[serde(flatten)]
    pub knobs: Knobs,
    /// The knob keys the config set explicitly (for checks about knobs a preset ignores).
    #[serde(skip)]
    pub overridden: Vec<String>,
}

impl<'de> Deserialize<'de> for AlgorithmConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(deserializer)?;
        let name = match table.remove("name") {
            Some(v) => Algorithm::deserialize(v).map_err(serde::de::Error::custom)?,
            None => return Err(serde::de::Error::missing_field("name")),
        };
        let overridden = table.keys().cloned().collect();
        let knobs = Knobs::resolve(name, &table).map_err(serde::de::Error::custom)?;
        Ok(Self {
            name,
            knobs,
            overridden,
        })
    }
}

/// The demonstrations of a format warm-up (`train.format_warmup_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarmupData {
    /// One well-formed call after the task prompt, with a random tool and a random candidate:
    /// the call syntax, never which edit is right (what pays is left to RL).
    Calls,
    /// The gym's scripted expert (`agentrl_gym::expert`): whole episodes (read, test, edit,
    /// test, submit, and recoveries from a wrong edit), so the syntax is learnt at every
    /// turn's position, as the tool results come back. This also shows which edit is right.
    Expert,
}

/// Learning-rate schedule shape (ALGORITHMS.md does not prescribe one; these are the common three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    Linear,
    Cosine,
}

/// AdamW with decoupled weight decay, global grad-norm clipping and an LR schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip the global gradient L2 norm to this value; 0 disables clipping.
    pub grad_clip: f64,
    pub schedule: ScheduleKind,
    pub warmup_steps: usize,
    /// Floor of the linear/cosine decay as a fraction of `lr`.
    pub min_lr_ratio: f64,
}

/// How many episodes one training step collects, and their limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutConfig {
    pub split: String,
    pub tasks_per_step: usize,
    /// G: episodes per task, for the group baselines.
    pub group_size: usize,
    pub max_turns: usize,
    pub max_action_tokens: usize,
    /// Task folder to use instead of the built-in tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_dir: Option<String>,
    /// Train on only these tasks of `split`, by id (unset: the whole split). Evaluations still
    /// cover the whole split, so they also show what the run did not train on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ids: Option<Vec<String>>,
    /// Show each training episode the candidates in a fresh random order
    /// (`agentrl_rollout::shuffle`), so position carries no reward and the policy must read
    /// them.
    pub shuffle_candidates: bool,
}

/// The loop: length, seeds, threads, and how often it evaluates, checkpoints and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub steps: usize,
    pub seed: u64,
    /// Compute threads (rayon, which candle's CPU matmul uses); 0 = available parallelism.
    /// Applied once per process, before any tensor work ([`crate::threads::apply`]).
    pub threads: usize,
    /// Evaluate the train split every N steps during training (0 = never).
    pub eval_every: usize,
    /// Write a checkpoint every N steps (0 = only at the end).
    pub checkpoint_every: usize,
    /// Keep the newest N checkpoints and delete older ones (0 = keep all). The last
    /// checkpoint is always kept.
    pub keep_checkpoints: usize,
    /// Write the sampled episodes of every N-th step to `episodes/` (0 = never).
    pub episodes_every: usize,
    /// Parent directory of run directories.
    pub runs_root: String,
    /// Run directory name; unset = a timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_name: Option<String>,
    /// Stop early once the periodic train-split eval reaches this hidden solve rate (0 = never).
    pub stop_at_solve_rate: f64,
    /// The first N steps are format warm-up instead of RL: one SFT step each
    /// ([`crate::recipes::sft`]) on the demonstrations `format_warmup_data` names. Counted in
    /// `steps`.
    pub format_warmup_steps: usize,
    /// What the format warm-up imitates.
    pub format_warmup_data: WarmupData,
    /// Learning rate of the format warm-up steps (constant; `optim.lr` and its schedule take
    /// over for RL).
    pub format_warmup_lr: f64,
    /// At the hand-over from the format warm-up to RL, make the warmed-up policy the KL
    /// reference (`algorithm.kl_coef`) instead of the initial one, so the KL term anchors RL
    /// to the warmed-up policy (`agentrl experiment format-learning`).
    #[serde(default)]
    pub format_warmup_kl_anchor: bool,
    /// Run the doctor live: warn as a failure signature appears (`agentrl doctor RUN` reads
    /// the same rules afterwards).
    pub doctor: bool,
    /// Rewrite `RUN/dashboard.html` every N steps while training (0 = only at the end).
    pub dashboard_every: usize,
}

/// Evaluation: samples per task for pass@k, the decoding temperature, and how many tasks of
/// each split a run's own evaluations take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    /// Samples per task (n of pass@k); pass@k is reported for k = this value.
    pub samples: usize,
    /// 0 = greedy.
    pub temperature: f64,
    /// At most this many tasks of each split in the run's untrained, periodic and final
    /// evaluations (0 = every task), spread evenly over the split's task order so every family
    /// is represented, and the same tasks each time. For models whose evaluation of every task
    /// costs more than the training (a real model on the CPU); `agentrl eval RUN` always takes
    /// every task.
    #[serde(default)]
    pub tasks_per_split: usize,
}

/// Supervised fine-tuning (`agentrl sft`, `recipes::sft`). A step has the shape of an RL step
/// (`rollout.tasks_per_step` x `rollout.group_size` episodes) and `train.steps` counts them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// Learning rate (constant).
    pub lr: f64,
    /// A JSONL file of episodes to train on (one `agentrl_rollout::Episode` per line); unset =
    /// the gym's scripted expert, fresh demonstrations each step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The edit forms the scripted expert demonstrates (`"candidate"`: `edit {candidate: k}`;
    /// `"free_form"`: `edit {path, old, new}` from the reference diff), cycled through the
    /// demonstrations; unset = every form the policy's codec can write (TinyAgent: candidate
    /// only). Read wherever the expert demonstrates: `agentrl sft` and
    /// `train.format_warmup_data = "expert"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_forms: Option<Vec<agentrl_gym::expert::EditForm>>,
}

/// Rejection-sampling fine-tuning (`agentrl rft`, `recipes::rft`): each of the `train.steps`
/// rounds samples `samples_per_task` episodes of each of the step's `rollout.tasks_per_step`
/// tasks, keeps those the verifier accepts on the hidden tests, and runs `sft_steps`
/// supervised updates on them at `sft.lr`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RftConfig {
    pub samples_per_task: usize,
    pub sft_steps: usize,
}

/// DPO (`agentrl dpo`, `recipes::dpo`): the pair pool is sampled once from the start policy
/// (`samples_per_task` episodes of every train task); each step trains on
/// `rollout.tasks_per_step x rollout.group_size` of its pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpoConfig {
    /// Strength of the implicit KL to the reference (ALGORITHMS.md §14: 0.1).
    pub beta: f64,
    /// Learning rate (constant).
    pub lr: f64,
    pub samples_per_task: usize,
}

/// On-policy distillation (`agentrl distill --teacher RUN`, `recipes::distill`): each step the
/// student samples `rollout.tasks_per_step x rollout.group_size` episodes, the teacher scores
/// every sampled action token, and the per-token reverse KL times `coef` is the (negative)
/// advantage; the learning rate is the `[optim]` schedule's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistillConfig {
    /// The teacher's run directory (its newest loadable checkpoint); `--teacher` sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher: Option<String>,
    /// tinker-cookbook's `kl_penalty_coef` (ALGORITHMS.md §15: 1.0).
    pub coef: f64,
}
