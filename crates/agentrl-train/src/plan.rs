//! The plan of a run before it runs: where a training step's memory and tokens go, from the
//! config and the model's shape alone (no weights read, nothing sampled).
//!
//! Where it sits: beside the trainer, before it. `agentrl plan --config …` prints it, and
//! [`crate::trainer::Trainer::create`] refuses a config whose step would not fit in the
//! machine's memory.
//!
//! The model of memory is this implementation's, counted tensor by tensor (f32 compute):
//! - **weights** in their dtype; **gradients** and AdamW's two moments in f32 for the
//!   trainable ones (all of TinyAgent; the LoRA factors of Qwen3, or every weight without);
//! - **activations per micro-batch**: what the backward pass needs, per token and layer, plus
//!   the head at the loss positions (`Policy::forward_at_for_update`). Qwen3 goes through
//!   candle's autograd (the block's inputs, norms, projections, MLP branches; attention keeps
//!   no `T × T` matrix, its backward recomputes the probabilities; the backward pass adds one
//!   layer's gradients at a time). TinyAgent's trunk runs as explicit loops
//!   (`agentrl_model::tiny`, "Training forward"): its tape keeps eight hidden-size and two
//!   MLP-size rows per token and layer plus each head's attention probabilities (`T` per
//!   token), one set of backward buffers, and a copy of the weights; the tape is kept between
//!   steps for the next one, so it also counts in the rollout's peak;
//! - **KV cache** of a rollout batch: keys and values of every live episode, at the engine's
//!   dtype, up to `model.max_seq` tokens.
//!
//! Token counts use `model.max_seq` per episode, an upper bound: a step's real episodes are
//! shorter, so the plan errs on the side of memory that is there.

use std::path::Path;

use agentrl_model::qwen3::Qwen3Config;
use anyhow::{bail, Context};
use serde::Serialize;

use crate::config::{Config, ModelKind};

/// Floats autograd keeps per token and layer, in units of the hidden size and the MLP width
/// (counted on the block's forward: see the module doc).
const SAVED_HIDDEN_PER_LAYER: f64 = 10.0;
const SAVED_MLP_PER_LAYER: f64 = 4.0;
/// Vocabulary rows alive per scored position at the update's peak: the logits, their
/// log-softmax, the (detached) entropy's softmax and product, the backward's gradients and
/// the allocator's transients between them. Counted from the update's ops, then set to what
/// the counting-allocator test (`tests/plan_memory.rs`) measures on a tiny Qwen3 (11.4 rows).
const VOCAB_ROWS: f64 = 11.0;
/// More rows when the entropy bonus is trained (`entropy_coef != 0`): its softmax,
/// log-softmax and product stay in the graph, with their gradients.
const VOCAB_ROWS_ENTROPY_BONUS: f64 = 5.0;
/// [`VOCAB_ROWS`] where the update scores f32 logits on the CPU, through the fused log-prob and
/// entropy op (`agentrl_model::fused::log_prob_and_entropy`, `update/score.rs`): the logits,
/// their gradient and the transients of the head's matmul; the entropy comes from the same
/// pass, so the bonus adds no rows. Set to what `tests/plan_memory.rs` measures on a tiny
/// Qwen3 with f32 weights (651.5 MB in all: about 6.0 rows).
const VOCAB_ROWS_FUSED: f64 = 6.0;
/// TinyAgent's explicit trunk, per token and layer: the block's input, both norms' outputs,
/// the QKV projection (three), the attention output and the residual after it (hidden-size
/// rows); the MLP's up projection and its GELU (MLP-size rows); and the attention
/// probabilities, one row of `T` per head (`tiny/trunk.rs`, `BlockTape`).
const TAPE_HIDDEN_PER_LAYER: f64 = 8.0;
const TAPE_MLP_PER_LAYER: f64 = 2.0;
/// The explicit trunk's backward buffers per token (hidden-size: the residual's gradient,
/// the norms' input and output gradients, the attention output's, and QKV's three; MLP-size:
/// the GELU's input and output gradients), and the trunk's output handed to candle with its
/// gradient and the final norm's output (three hidden-size rows).
const TAPE_SCRATCH_HIDDEN: f64 = 7.0 + 3.0;
const TAPE_SCRATCH_MLP: f64 = 2.0;
/// More rows for TinyAgent's action grammar (`ConstrainedPolicy`): the gathered bias and the
/// biased logits.
const VOCAB_ROWS_GRAMMAR: f64 = 2.0;

/// Most episodes alive at once in one rollout (each holds a gym workspace on disk and a KV
/// cache): larger steps and evaluations are sampled in chunks of whole groups. A model whose
/// KV caches would not fit [`KV_CACHE_BUDGET_BYTES`] gets fewer ([`live_episode_bound`]).
pub const MAX_LIVE_EPISODES: usize = 256;

/// The memory the local engine's KV caches of one rollout may take (4 GiB).
pub const KV_CACHE_BUDGET_BYTES: f64 = 4.0 * 1024.0 * 1024.0 * 1024.0;

/// How much of a row's ragged KV cache is padding and spare capacity, at most: rows share
/// slots, so a row's slots grow with the other rows' feeds until the cache compacts them (at
/// twice the longest row's tokens, `RaggedKvCache::compact`), and a full buffer doubles.
const RAGGED_KV_SLACK: f64 = 3.0;

/// Most episodes alive at once for `config`'s model: [`MAX_LIVE_EPISODES`], or fewer when
/// their KV caches at `model.max_seq` tokens would pass [`KV_CACHE_BUDGET_BYTES`] (SmolLM2's
/// 30 layers: 9 at 3,072 tokens; TinyAgent and the tiny Qwen3: all 256). Measured: sixteen
/// SmolLM2 episodes of an evaluation chunk grew past 23 GB (before the cache compacted its
/// slots).
pub fn live_episode_bound(config: &Config) -> usize {
    let Ok(shape) = ModelShape::of(config) else {
        return MAX_LIVE_EPISODES;
    };
    let bytes_per_token = 2.0 * shape.layers as f64 * shape.kv_width as f64 * 4.0;
    let per_episode = bytes_per_token * config.model.max_seq as f64 * RAGGED_KV_SLACK;
    ((KV_CACHE_BUDGET_BYTES / per_episode) as usize).clamp(1, MAX_LIVE_EPISODES)
}

/// The shape of a policy, enough to count its memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelShape {
    pub name: String,
    pub parameters: usize,
    pub trainable: usize,
    pub layers: usize,
    pub hidden: usize,
    pub mlp: usize,
    pub vocab: usize,
    /// Key and value width per token and layer (`num_key_value_heads × head_dim`).
    pub kv_width: usize,
    /// Bytes per weight (2 for bf16, 4 for f32).
    pub weight_bytes: usize,
    /// Whether the trunk runs as explicit loops with a tape (TinyAgent) rather than through
    /// candle's autograd (Qwen3).
    pub explicit_trunk: bool,
    pub attention_heads: usize,
    /// Whether a logit bias (TinyAgent's action grammar) is added to every row.
    pub grammar_bias: bool,
}

impl ModelShape {
    /// TinyAgent as `[model]` builds it (every weight trainable, f32).
    pub fn tiny(config: &Config) -> anyhow::Result<Self> {
        let codec = crate::build::tiny_codec(config.rollout.max_action_tokens);
        let tiny = crate::build::tiny_config(config, &codec);
        let model = agentrl_model::TinyAgent::new(tiny, 0, &candle_core::Device::Cpu)
            .context("building TinyAgent's shape")?;
        let m = &config.model;
        let parameters = model.num_parameters();
        Ok(Self {
            name: format!(
                "TinyAgent (d_model {}, {} layers, vocab {})",
                m.d_model,
                m.layers,
                codec.vocab().len()
            ),
            parameters,
            trainable: parameters,
            layers: m.layers,
            hidden: m.d_model,
            mlp: m.d_model * m.mlp_ratio,
            vocab: codec.vocab().len(),
            kv_width: m.d_model,
            weight_bytes: 4,
            explicit_trunk: true,
            attention_heads: m.heads,
            grammar_bias: config.model.action_vocab
                != agentrl_chat::tiny::grammar::ActionVocab::Full,
        })
    }

    /// Qwen3 (or another Llama-family model) from its `config.json`, or from the model's
    /// folder or GGUF file, with `[qwen3]`'s LoRA rank (0 = every weight trains) and dtype.
    pub fn qwen3(config: &Config, model_config: &Path) -> anyhow::Result<Self> {
        // A folder or a GGUF file names the model; any other file is a `config.json`.
        let q = if model_config.is_dir() || agentrl_model::gguf::is_gguf_file(model_config) {
            Qwen3Config::from_model_path(model_config)
        } else {
            Qwen3Config::from_file(model_config)
        }
        .with_context(|| format!("reading {}", model_config.display()))?;
        Ok(Self::qwen3_of(config, &q))
    }

    /// [`ModelShape::qwen3`] from a parsed `config.json` (a shape compiled into the binary:
    /// `agentrl plan --model-config qwen3-8b`).
    pub fn qwen3_of(config: &Config, q: &Qwen3Config) -> Self {
        let shapes = q.weight_shapes();
        let parameters: usize = shapes
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        let rank = config.qwen3.lora_rank;
        let trainable = if rank == 0 {
            parameters
        } else {
            // PEFT's factors A [r, in] and B [out, r] on every projection of every layer.
            let (h, i) = (q.hidden_size, q.intermediate_size);
            let (qw, kv) = (
                q.num_attention_heads * q.head_dim,
                q.num_key_value_heads * q.head_dim,
            );
            let per_layer = [(h, qw), (h, kv), (h, kv), (qw, h), (h, i), (h, i), (i, h)]
                .iter()
                .map(|(input, output)| rank * (input + output))
                .sum::<usize>();
            per_layer * q.num_hidden_layers
        };
        let weight_bytes = match config.qwen3.dtype.as_str() {
            "bf16" | "f16" => 2,
            _ => 4,
        };
        Self {
            name: format!(
                "{:?} (hidden {}, {} layers, {})",
                q.architecture,
                q.hidden_size,
                q.num_hidden_layers,
                if rank == 0 {
                    "full fine-tune".to_string()
                } else {
                    format!("LoRA r={rank}")
                }
            ),
            parameters,
            trainable,
            layers: q.num_hidden_layers,
            hidden: q.hidden_size,
            mlp: q.intermediate_size,
            vocab: q.vocab_size,
            kv_width: q.num_key_value_heads * q.head_dim,
            weight_bytes,
            explicit_trunk: false,
            attention_heads: q.num_attention_heads,
            grammar_bias: false,
        }
    }

    /// The shape `config` trains: TinyAgent, or Qwen3 from `model.dir`'s `config.json`.
    pub fn of(config: &Config) -> anyhow::Result<Self> {
        match config.model.kind {
            ModelKind::Tiny => Self::tiny(config),
            ModelKind::Qwen3 => {
                let dir = config
                    .model
                    .dir
                    .as_deref()
                    .context("model.kind = \"qwen3\" needs model.dir (or --model DIR)")?;
                let path = agentrl_chat::resolve_model_path(dir)
                    .map_err(anyhow::Error::msg)
                    .context("model.dir")?;
                Self::qwen3(config, &path)
            }
        }
    }
}

/// Memory (bytes) and tokens of one training step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepPlan {
    pub model: ModelShape,
    pub episodes_per_step: usize,
    pub episodes_per_microbatch: usize,
    /// Tokens per episode the plan assumes (`model.max_seq`, an upper bound).
    pub tokens_per_episode: usize,
    pub tokens_per_step: usize,
    /// Positions the loss reads per episode (action tokens, bounded by the turn budget).
    pub loss_tokens_per_episode: usize,
    pub weights: f64,
    /// The frozen reference policy for KL, when the preset uses one.
    pub reference: f64,
    pub gradients: f64,
    pub optimizer: f64,
    pub activations_per_microbatch: f64,
    pub kv_cache: f64,
    /// The update's peak: weights, reference, gradients, optimizer state and one
    /// micro-batch's activations.
    pub update_peak: f64,
    /// The rollout's peak: weights (and the engine's own copy, if any) and the KV cache (0
    /// with an inference server: its memory is its own).
    pub rollout_peak: f64,
}

impl StepPlan {
    /// The plan of `config`'s step for a model of `shape`.
    pub fn new(config: &Config, shape: ModelShape) -> Self {
        let episodes = config.rollout.tasks_per_step * config.rollout.group_size;
        let minibatches = config.algorithm.knobs.minibatches.clamp(1, episodes.max(1));
        let per_microbatch = episodes.div_ceil(minibatches);
        let t = config.model.max_seq;
        let loss_tokens = (config.rollout.max_turns * config.rollout.max_action_tokens).min(t);
        self::StepPlan::for_batch(config, shape, episodes, per_microbatch, t, loss_tokens)
    }

    /// The plan for a batch of `episodes` episodes of `tokens` tokens (`loss_tokens` of them
    /// scored), updated `per_microbatch` at a time.
    pub fn for_batch(
        config: &Config,
        shape: ModelShape,
        episodes: usize,
        per_microbatch: usize,
        tokens: usize,
        loss_tokens: usize,
    ) -> Self {
        const F32: f64 = 4.0;
        let weights = (shape.parameters * shape.weight_bytes) as f64;
        let knobs = &config.algorithm.knobs;
        let reference = if knobs.kl_coef > 0.0 || knobs.kl_target.is_some() {
            weights
        } else {
            0.0
        };
        let gradients = shape.trainable as f64 * F32;
        let optimizer = 2.0 * shape.trainable as f64 * F32;
        let (h, mlp, layers) = (shape.hidden as f64, shape.mlp as f64, shape.layers as f64);
        let per_token_layer = SAVED_HIDDEN_PER_LAYER * h + SAVED_MLP_PER_LAYER * mlp;
        let microbatch_tokens = (per_microbatch * tokens) as f64;
        // f32 weights give f32 logits, which the CPU scores through the fused op.
        let fused_scoring = shape.weight_bytes == 4;
        let mut vocab_rows = if fused_scoring {
            VOCAB_ROWS_FUSED
        } else {
            VOCAB_ROWS
        };
        if knobs.entropy_coef != 0.0 && !fused_scoring {
            vocab_rows += VOCAB_ROWS_ENTROPY_BONUS;
        }
        if shape.grammar_bias {
            vocab_rows += VOCAB_ROWS_GRAMMAR;
        }
        let head = (per_microbatch * loss_tokens) as f64 * vocab_rows * shape.vocab as f64;
        // The explicit trunk's tape (kept between steps) and its copy of the weights; candle's
        // saved activations of every layer with one layer's gradients in flight otherwise.
        let (trunk, tape) = if shape.explicit_trunk {
            let per_token = layers
                * (TAPE_HIDDEN_PER_LAYER * h
                    + TAPE_MLP_PER_LAYER * mlp
                    + (shape.attention_heads * tokens) as f64)
                + TAPE_SCRATCH_HIDDEN * h
                + TAPE_SCRATCH_MLP * mlp;
            let tape = F32 * microbatch_tokens * per_token;
            (tape + F32 * shape.parameters as f64, tape)
        } else {
            (
                F32 * microbatch_tokens * per_token_layer * (layers + 1.0),
                0.0,
            )
        };
        let activations = trunk + F32 * head;
        let engine_bytes = if config.engine.dtype == "bf16" {
            2.0
        } else {
            F32
        };
        let live = episodes.min(MAX_LIVE_EPISODES);
        // A server's KV cache and weights are its own, not this process's.
        let local_engine = config.engine.kind == crate::config::EngineKind::Local;
        let kv_cache = if local_engine {
            engine_bytes * 2.0 * layers * shape.kv_width as f64 * (live * tokens) as f64
        } else {
            0.0
        };
        // `engine.cpu_matmul` on AMX: a copy of its own, and its packing (two bf16 per weight).
        let amx = crate::config::validate::cpu_matmul_on_amx(
            config.engine.cpu_matmul,
            config.cpu_matmul_inapplicable().as_deref(),
        )
        .unwrap_or(false);
        let engine_copy = if local_engine
            && (config.engine.dtype != "f32" || config.engine.async_rollouts || amx)
        {
            shape.parameters as f64 * engine_bytes * if amx { 2.0 } else { 1.0 }
        } else {
            0.0
        };
        Self {
            episodes_per_step: episodes,
            episodes_per_microbatch: per_microbatch,
            tokens_per_episode: tokens,
            tokens_per_step: episodes * tokens,
            loss_tokens_per_episode: loss_tokens,
            weights,
            reference,
            gradients,
            optimizer,
            activations_per_microbatch: activations,
            kv_cache,
            update_peak: weights + reference + gradients + optimizer + activations,
            rollout_peak: weights + reference + engine_copy + kv_cache + tape,
            model: shape,
        }
    }

    /// The step's peak: the larger of the update's and the rollout's (they do not overlap in
    /// a synchronous run; with asynchronous rollouts they do, and both count).
    pub fn peak(&self, async_rollouts: bool) -> f64 {
        if async_rollouts {
            self.update_peak + self.kv_cache
        } else {
            self.update_peak.max(self.rollout_peak)
        }
    }

    /// The plan as a table, for the terminal.
    pub fn table(&self, async_rollouts: bool) -> String {
        let gb = |b: f64| format!("{:>10.3} GB", b / 1e9);
        let m = &self.model;
        let mut out = String::new();
        out.push_str(&format!(
            "model       {}\nparameters  {} ({} trainable)\n",
            m.name,
            count(m.parameters),
            count(m.trainable)
        ));
        out.push_str(&format!(
            "step        {} episodes × ≤ {} tokens = ≤ {} tokens; {} per micro-batch; ≤ {} loss tokens per episode\n",
            self.episodes_per_step,
            self.tokens_per_episode,
            count(self.tokens_per_step),
            self.episodes_per_microbatch,
            self.loss_tokens_per_episode
        ));
        for (label, bytes) in [
            ("weights", self.weights),
            ("reference", self.reference),
            ("gradients", self.gradients),
            ("optimizer (AdamW m, v)", self.optimizer),
            ("activations / micro-batch", self.activations_per_microbatch),
            ("KV cache / rollout batch", self.kv_cache),
            ("update peak", self.update_peak),
            ("rollout peak", self.rollout_peak),
            ("step peak", self.peak(async_rollouts)),
        ] {
            out.push_str(&format!("  {label:<28}{}\n", gb(bytes)));
        }
        out
    }
}

/// `1234567` as `1.23M`.
fn count(n: usize) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// Available memory (Linux `MemAvailable`), bytes; `None` where unknown.
fn available_memory() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

/// Refuses a TinyAgent config whose step ([`StepPlan`]) would not fit in the
/// machine's available memory, and warns above half of it. For Qwen3 it only warns: its
/// update may run on a GPU, whose memory is not the host's.
pub fn check_memory(config: &Config) -> anyhow::Result<Vec<String>> {
    let plan = StepPlan::new(config, ModelShape::of(config)?);
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
