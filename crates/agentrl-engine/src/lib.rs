//! # agentrl-engine: turn-level sampling
//!
//! An [`Engine`] takes a batch of token-id prefixes and sampling parameters and returns, per
//! row, the sampled ids, their log-probs, why the row stopped, and *which* log-probs these are
//! ([`LogprobKind`]). That is the whole contract between rollouts and whatever samples them:
//! the local KV-cached engine ([`local::LocalEngine`]) over any [`local::Decoder`], or a client
//! of vLLM or SGLang servers ([`remote::RemoteEngine`]). [`serve`] puts a local engine behind
//! those servers' HTTP routes (`agentrl serve`).
//!
//! Where it sits: the rollout driver (`agentrl-rollout`) renders prompts and observations to
//! ids with a `ChatCodec`, asks the engine for one action per live episode, and steps the
//! environments. The trainer never sees the engine; it only sees the sampled ids and log-probs
//! the episodes recorded (ALGORITHMS.md §0 `μ`, §13, §17).
//!
//! A user starts from an [`Engine`]: a [`LocalEngine`] over a model (any [`Decoder`]: TinyAgent,
//! Qwen3) or a [`RemoteEngine`] ([`RemoteConfig`]); [`GenerateRequest`] and [`GenerateParams`]
//! (with [`SamplingParams`]) are what it is asked; each [`Completion`] is what comes back.
//!
//! ```rust
//! use agentrl_engine::{Engine, GenerateParams, GenerateRequest, LocalEngine, SamplingParams};
//! use agentrl_model::{TinyAgent, TinyConfig};
//! use candle_core::Device;
//!
//! // A randomly initialised TinyAgent over a 16-word vocabulary, one layer.
//! let config = TinyConfig { n_layers: 1, max_seq: 32, ..TinyConfig::for_vocab(16) };
//! let model = TinyAgent::new(config, 1, &Device::Cpu)?;
//! let mut engine = LocalEngine::new(&model);
//! let params = GenerateParams {
//!     sampling: SamplingParams::default(), // temperature 1, no top-k/top-p
//!     max_tokens: 5,
//!     stop: vec![15],
//! };
//! let request = GenerateRequest { prompt: vec![1, 2, 3], seed: 7, session: None };
//! let completions = engine.generate(&[request], &params)?;
//! let c = &completions[0];
//! assert!(!c.tokens.is_empty() && c.tokens.len() <= 5);
//! assert_eq!(c.logprobs.len(), c.tokens.len()); // one log-prob per sampled token
//! # anyhow::Ok(())
//! ```
//!
//! The trait was checked on paper against vLLM's `/v1/completions` (`../shared/ENGINES.md`):
//! a request is a token-id prompt plus every sampling parameter and a `seed`; the response
//! carries `token_ids`, per-token `logprobs` and a `finish_reason` of `stop` or `length`;
//! which log-probs come back is the server's `logprobs_mode` ([`LogprobKind`]); weight sync is
//! `load_lora_adapter` or `update_weights_from_disk` ([`WeightSync`]). Nothing here needs a
//! per-decoding-step callback, so a remote engine implements the same trait.
//!
//! Not here: chat templates and tool-call parsing (`agentrl-chat`), models (`agentrl-model`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde::{Deserialize, Serialize};

pub mod local;
pub mod remote;
pub mod sampling;
pub mod serve;

mod noise;
mod qwen3;

// Internal, public for the binary and the trainer.
#[doc(hidden)]
pub mod threads;

pub use local::{Decoder, LocalEngine};
pub use noise::NoisyLogprobs;
pub use qwen3::Qwen3Replica;
pub use remote::{Protocol, RemoteConfig, RemoteEngine};
pub use sampling::{
    kept_tokens, sample_token, sample_token_as, scaled_log_softmax, SamplingParams,
};
pub use threads::OnThreads;

/// One row of a generate call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateRequest {
    /// The whole token prefix to continue (prompt, earlier actions and observations).
    pub prompt: Vec<u32>,
    /// Seed of this row's sampling stream, so a row's sample does not depend on which other
    /// rows share its batch (vLLM's per-request `seed`).
    pub seed: u64,
    /// An id that stays the same across the turns of one sequence: an engine may keep that
    /// sequence's KV cache between calls when the new prefix extends the old one (prefix
    /// caching). `None` never reuses anything.
    pub session: Option<u64>,
}

/// What a generate call is asked for besides the prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    pub sampling: SamplingParams,
    /// Longest completion in tokens (the stop token included).
    pub max_tokens: usize,
    /// Token ids that end a completion; the stop token is part of the returned ids (the
    /// trainer must score it: it is an action token the policy chose).
    pub stop: Vec<u32>,
}

/// Why a row stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It sampled a stop token.
    Stop,
    /// It reached `max_tokens` (or the model's context).
    Length,
}

/// Which distribution a reported log-prob is taken under (ALGORITHMS.md §13). The trainer
/// scores `log softmax(logits / T)`; any other kind is a known, systematic mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogprobKind {
    /// `log softmax(logits)`: before temperature (vLLM's default `raw_logprobs`).
    Raw,
    /// `log softmax(logits / T)` over the full vocabulary: what TRL and verl score on the
    /// trainer side, and what the local engine reports.
    TemperatureScaled,
    /// After temperature and top-k/top-p truncation, renormalised over the kept tokens
    /// (vLLM's `processed_logprobs`).
    Processed,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub tokens: Vec<u32>,
    /// Log-prob of each sampled token, of the kind in `logprob_kind`.
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
    pub logprob_kind: LogprobKind,
    /// The weight version the completion was sampled with (see [`Engine::sync_weights`]).
    pub weight_version: u64,
}

/// How new trainer weights reach an engine.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightSync {
    /// The engine reads the trainer's own parameters (the local engine): nothing to copy.
    Shared { version: u64 },
    /// Full weights written as safetensors into a folder (SGLang `update_weights_from_disk`).
    FullWeights {
        dir: std::path::PathBuf,
        version: u64,
    },
    /// A LoRA adapter in PEFT layout (vLLM `load_lora_adapter`).
    LoraAdapter {
        dir: std::path::PathBuf,
        name: String,
        version: u64,
    },
}

impl WeightSync {
    pub fn version(&self) -> u64 {
        match self {
            WeightSync::Shared { version }
            | WeightSync::FullWeights { version, .. }
            | WeightSync::LoraAdapter { version, .. } => *version,
        }
    }
}

/// Samples completions for a batch of token-id prefixes.
pub trait Engine {
    /// One completion per request, in request order.
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>>;

    /// Longest sequence (prefix + completion) the engine accepts.
    fn max_seq(&self) -> usize;

    /// Makes the engine sample with the trainer's weights of `sync.version()`.
    fn sync_weights(&mut self, sync: &WeightSync) -> anyhow::Result<()>;

    /// The version of the weights the engine samples with now.
    fn weight_version(&self) -> u64;
}

/// A boxed engine is an engine (the trainer picks its engine at run time).
impl<E: Engine + ?Sized> Engine for Box<E> {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        (**self).generate(requests, params)
    }

    fn max_seq(&self) -> usize {
        (**self).max_seq()
    }

    fn sync_weights(&mut self, sync: &WeightSync) -> anyhow::Result<()> {
        (**self).sync_weights(sync)
    }

    fn weight_version(&self) -> u64 {
        (**self).weight_version()
    }
}
