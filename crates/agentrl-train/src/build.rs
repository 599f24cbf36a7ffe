//! Building what a run trains from its config: the policy (TinyAgent behind its action
//! grammar, or Qwen3 with or without LoRA), its frozen KL reference and its chat codec; the
//! inference servers of `[engine]`; the task set and its split; the KL controller.
//!
//! Where it sits: config → here → `crate::trainer::Trainer` (which holds what is built) and
//! `crate::plan` (which sizes TinyAgent from the same config). It knows no recipe and no
//! trainer.

use agentrl_chat::qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
use agentrl_chat::tiny::grammar::bias_table;
use agentrl_chat::tiny::TinyCodec;
use agentrl_chat::ChatCodec;
use agentrl_engine::{Protocol, RemoteConfig, RemoteEngine, SamplingParams};
use agentrl_gym::{Split, TaskSet};
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{LoadOptions, Qwen3};
use agentrl_model::{ConstrainedPolicy, LogitBias, TinyAgent, TinyConfig};
use agentrl_rl::KlController;
use anyhow::{bail, Context};
use candle_core::{DType, Device};

use crate::algo::Knobs;
use crate::config::{Config, EngineKind, ModelKind};
use crate::policy_stack::{TinyPolicy, TrainPolicy};

/// What [`build_policy`] builds.
pub struct BuiltPolicy {
    /// Where the policy computes (TinyAgent: the CPU; Qwen3: the best device).
    pub device: Device,
    pub policy: Box<dyn TrainPolicy>,
    /// The frozen initial policy, when the preset uses a KL reference.
    pub reference: Option<Box<dyn TrainPolicy>>,
    pub codec: Box<dyn ChatCodec + Send + Sync>,
}

/// The policy of `model.kind`, initialised from `seed` (TinyAgent's weights, Qwen3's LoRA),
/// with a frozen copy of its initial weights as the KL reference when `with_reference`.
pub fn build_policy(
    config: &Config,
    seed: u64,
    with_reference: bool,
) -> anyhow::Result<BuiltPolicy> {
    match config.model.kind {
        ModelKind::Tiny => build_tiny(config, seed, with_reference),
        ModelKind::Qwen3 => build_qwen3(config, seed, with_reference),
    }
}

/// TinyAgent behind the grammar of `model.action_vocab`, its reference (the initial policy:
/// the same seed gives the same weights) and its codec. TinyAgent trains on the CPU: at its
/// size, a GPU round trip per decoding step costs more than the step.
fn build_tiny(config: &Config, seed: u64, with_reference: bool) -> anyhow::Result<BuiltPolicy> {
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
    Ok(BuiltPolicy {
        device,
        policy: Box::new(policy),
        reference,
        codec: Box::new(codec),
    })
}

/// The Llama-family decoder (Qwen3, or a GGUF file such as SmolLM2's) from `model.dir` (LoRA
/// on every projection when `qwen3.lora_rank > 0`, else every weight trainable), its frozen
/// reference (the folder's weights: a fresh LoRA is zero, so that is the initial policy) and
/// its chat codec.
fn build_qwen3(config: &Config, seed: u64, with_reference: bool) -> anyhow::Result<BuiltPolicy> {
    let dir = config.model.dir.as_deref().context(
        "model.kind = \"qwen3\" needs a model folder: set model.dir or pass --model DIR",
    )?;
    // A folder, a GGUF file, or `smollm2` (the fetched SmolLM2 file).
    let dir = agentrl_chat::resolve_model_path(dir)
        .map_err(anyhow::Error::msg)
        .context("model.dir")?;
    let dir = dir.as_path();
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
    policy
        .set_gradient_checkpointing(q.gradient_checkpointing)
        .context("qwen3.gradient_checkpointing")?;
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
    Ok(BuiltPolicy {
        device,
        policy: Box::new(policy),
        reference,
        codec: Box::new(codec),
    })
}

/// The LoRA adapter of `[qwen3]`, on every attention and MLP projection (`None` at rank 0).
pub fn lora_config(q: &crate::config::Qwen3Settings) -> Option<LoraConfig> {
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
pub fn connect_remote(config: &Config) -> anyhow::Result<Option<RemoteEngine>> {
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
        // A keyed `agentrl serve` (or vLLM `--api-key`) gets the key the gym servers get.
        "api_key_env": std::env::var(agentrl_gym::service::access::API_KEY_ENV)
            .ok()
            .filter(|k| !k.is_empty())
            .map(|_| agentrl_gym::service::access::API_KEY_ENV),
    }))
    .context("building the remote engine's config from [engine]")?;
    let remote = RemoteEngine::connect(remote_config)
        .with_context(|| format!("connecting to engine.endpoints = {:?}", e.endpoints))?;
    Ok(Some(remote))
}

/// A weight dtype named in the config.
pub fn parse_dtype(field: &str, name: &str) -> anyhow::Result<DType> {
    match name {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        other => bail!("{field} = {other:?}: expected \"f32\" or \"bf16\""),
    }
}

/// The KL coefficient's controller: adaptive towards `algorithm.kl_target` when the preset
/// sets one, else fixed at `beta`.
pub fn kl_controller(knobs: &Knobs, beta: f64) -> anyhow::Result<KlController> {
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
        pointer_pool: config.model.pointer_pool,
        ..TinyConfig::for_vocab(codec.vocab().len())
    }
}

/// The run's task set: `rollout.tasks_dir`, or the built-in tasks; broken task folders are
/// skipped with a warning.
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

/// The split a config names (`train`, `heldout`, `heldout-family`).
pub fn parse_split(name: &str) -> anyhow::Result<Split> {
    Split::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .with_context(|| {
            format!("unknown split {name:?}; expected one of train, heldout, heldout-family")
        })
}

/// Loads the run's tasks and checks that the training split has some, and that
/// `rollout.task_ids` names tasks of it (before anything is created on disk).
pub fn checked_tasks(config: &Config) -> anyhow::Result<TaskSet> {
    let tasks = load_tasks(config)?;
    training_task_ids(config, &tasks)?;
    Ok(tasks)
}

/// The ids of the tasks the run trains on, in the split's order: `rollout.split`'s tasks, or
/// those of them `rollout.task_ids` names.
pub fn training_task_ids(config: &Config, tasks: &TaskSet) -> anyhow::Result<Vec<String>> {
    let rollout = &config.rollout;
    let source = || {
        rollout
            .tasks_dir
            .as_deref()
            .map_or("the built-in tasks".to_string(), |d| {
                format!("rollout.tasks_dir = {d}")
            })
    };
    let split = parse_split(&rollout.split)?;
    let all: Vec<String> = tasks
        .split_checked(split)?
        .iter()
        .map(|t| t.id.clone())
        .collect();
    if all.is_empty() {
        bail!(
            "rollout.split = {:?} has no tasks in {}",
            rollout.split,
            source()
        );
    }
    let Some(wanted) = &rollout.task_ids else {
        return Ok(all);
    };
    if let Some(missing) = wanted.iter().find(|id| !all.contains(id)) {
        bail!(
            "rollout.task_ids names {missing:?}, which is not a task of the {} split in {} \
             (`agentrl gym list` lists them)",
            rollout.split,
            source()
        );
    }
    Ok(all.into_iter().filter(|id| wanted.contains(id)).collect())
}

/// The sampling defaults in the model folder's `generation_config.json` (what a server
/// fills in for parameters a request leaves out), for the preflight.
pub fn model_sampling_defaults(config: &Config) -> anyhow::Result<Option<SamplingParams>> {
    let Some(dir) = config.model.dir.as_deref() else {
        return Ok(None);
    };
    if config.model.kind != ModelKind::Qwen3 {
        return Ok(None);
    }
    let Ok(dir) = agentrl_chat::resolve_model_path(dir) else {
        return Ok(None);
    };
    let path = dir.join("generation_config.json");
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
