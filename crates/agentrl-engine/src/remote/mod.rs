//! The remote engine: [`RemoteEngine`] implements [`Engine`] as a client of inference servers
//! a user already runs, vLLM (`/v1/completions`) or SGLang (`/generate`), token ids in and
//! token ids out.
//!
//! Where it sits: the rollout driver calls [`Engine::generate`] once per turn for every live
//! episode; each row becomes one HTTP request (each row has its own seed, which both servers
//! take per request), sent through the endpoint [`pool`] (load balancing, a concurrency limit
//! per endpoint, timeouts, retries with backoff). The trainer's weights reach the servers
//! through [`Engine::sync_weights`]. `agentrl serve` ([`crate::serve`]) answers the same routes
//! over the local engine, which is how this client is tested without a GPU.
//!
//! **What is sent.** Every sampling parameter, explicitly: a server fills any omitted one from
//! the model folder's `generation_config.json` (vLLM `--generation-config auto`, SGLang
//! `--sampling-defaults model`; Qwen3's says temperature 0.6, top-p 0.95, top-k 20), so a client
//! that omits `top_k` samples from a distribution it does not know. vLLM gets `prompt` as ids,
//! `max_tokens`, `temperature`, `top_p`, `top_k` (`-1` = off), `min_p: 0`, neutral penalties,
//! `seed`, `stop_token_ids`, `ignore_eos: true` (the engine contract stops on `params.stop`
//! only; vLLM would otherwise also stop on the model's EOS ids), `skip_special_tokens: false`,
//! `include_stop_str_in_output: true`, `logprobs: 0` (the sampled token only),
//! `return_token_ids: true` and `return_tokens_as_token_ids: true` (a fallback for servers
//! older than vLLM 0.10.2, which lack `token_ids`). SGLang gets `input_ids`, the same sampling
//! parameters in `sampling_params` (`max_new_tokens`, `sampling_seed`, `no_stop_trim: true`),
//! `return_logprob: true` and `logprob_start_len: -1`. SGLang's `ignore_eos` would also disable
//! `stop_token_ids`, so it stays false there, and SGLang may end a row on the model's own EOS
//! id: that row is reported as [`FinishReason::Stop`] with the EOS id kept.
//!
//! **The stop token is part of the completion.** vLLM keeps it in `token_ids` (its stop check
//! runs on the output ids after the token is appended, and `stop_reason` names it); SGLang keeps
//! it with `no_stop_trim`. If a server trimmed it anyway, SGLang still lists its log-prob in
//! `output_token_logprobs`, and the token is restored from there; a vLLM response whose
//! `stop_reason` names a stop id missing from `token_ids` is an error, since its log-prob is lost.
//!
//! **Which log-probs.** Neither server says which kind it returns, so it is configured
//! ([`RemoteConfig::logprob_kind`]): vLLM's default `raw_logprobs` is [`LogprobKind::Raw`],
//! `processed_logprobs` is [`LogprobKind::Processed`], SGLang's default is
//! [`LogprobKind::TemperatureScaled`]. The mismatch preflight checks the claim.
//!
//! **Failures** are retried (connection errors, timeouts, HTTP 5xx/429, `finish_reason: abort`)
//! on another endpoint where there is one; a request that still fails makes the call an error
//! naming the request and the endpoints it tried. Nothing is dropped.
//!
//! **Weight sync** drains by construction: [`Engine::sync_weights`] takes `&mut self` and
//! [`Engine::generate`] returns only when every request of its batch has returned, so no request
//! is in flight on any endpoint while weights change. A LoRA adapter in PEFT layout is loaded
//! with `POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace: true}` (vLLM; SGLang:
//! `/unload_lora_adapter` then `/load_lora_adapter`) on every endpoint, and later requests
//! sample with `model = lora_name` (SGLang: `lora_path = lora_name`). Full weights go to
//! SGLang's `POST /update_weights_from_disk {model_path, weight_version}`; vLLM has no HTTP
//! route for that (its weight transfer is NCCL or CUDA IPC), so it is refused with the
//! alternatives named. A sync that failed on any endpoint leaves the engine refusing to generate
//! until a sync succeeds: the endpoints may disagree on their weights.
//!
//! **Weight version.** [`Completion::weight_version`] is the version of the last successful
//! sync; on SGLang without an adapter, `meta_info.weight_version` (set by
//! `update_weights_from_disk`) wins when it is a number, since it is the server's own stamp.

pub mod pool;
pub mod wire;

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Completion, Engine, FinishReason, GenerateParams, GenerateRequest, LogprobKind, WeightSync,
};
pub use pool::Balance;
use pool::{Failure, Pool, RetryPolicy};
use wire::{
    CompletionRequest, CompletionResponse, GenerateRequestBody, GenerateResponseBody, ModelList,
    Prompt, SglangSampling,
};

/// Which server API the endpoints speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// vLLM's OpenAI-compatible `/v1/completions`.
    Vllm,
    /// SGLang's native `/generate`.
    Sglang,
}

impl Protocol {
    /// What the server reports by default (ENGINES.md, "Which log-probs come back").
    pub fn default_logprob_kind(self) -> LogprobKind {
        match self {
            Protocol::Vllm => LogprobKind::Raw,
            Protocol::Sglang => LogprobKind::TemperatureScaled,
        }
    }
}

/// How to reach the servers; deserialisable from a config section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    pub protocol: Protocol,
    /// Base URLs, e.g. `http://10.0.0.5:8000` (plain HTTP).
    pub endpoints: Vec<String>,
    /// The served model name every endpoint must list (vLLM `--served-model-name`, default
    /// the `--model` argument; SGLang `model_path` or `served_model_name`).
    pub model: String,
    /// Which log-probs the servers return; default: the protocol's default
    /// ([`Protocol::default_logprob_kind`]). Set `processed` for vLLM
    /// `--logprobs-mode processed_logprobs`.
    #[serde(default)]
    pub logprob_kind: Option<LogprobKind>,
    /// Requests in flight per endpoint at most.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default)]
    pub balance: Balance,
    /// Whole-request timeout (a long completion on a busy server takes a while).
    #[serde(default = "default_request_timeout")]
    pub request_timeout_s: f64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_s: f64,
    /// Attempts after the first, for retryable failures.
    #[serde(default = "default_retries")]
    pub retries: usize,
    /// Wait before the first retry, doubled for each further one (at most 8 s).
    #[serde(default = "default_backoff")]
    pub backoff_s: f64,
    /// Longest sequence to request; default: the servers' `max_model_len` (vLLM) or
    /// `context_length` (SGLang `/get_server_info`), the smallest over the endpoints.
    #[serde(default)]
    pub max_seq: Option<usize>,
    /// Name of an environment variable holding the API key (vLLM `--api-key`), sent as a
    /// bearer token. The key itself never sits in a config file.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

fn default_max_in_flight() -> usize {
    16
}
fn default_request_timeout() -> f64 {
    600.0
}
fn default_connect_timeout() -> f64 {
    10.0
}
fn default_retries() -> usize {
    3
}
fn default_backoff() -> f64 {
    0.5
}

impl RemoteConfig {
    /// A config with every optional field at its default.
    pub fn new(protocol: Protocol, endpoints: Vec<String>, model: impl Into<String>) -> Self {
        Self {
            protocol,
            endpoints,
            model: model.into(),
            logprob_kind: None,
            max_in_flight: default_max_in_flight(),
            balance: Balance::default(),
            request_timeout_s: default_request_timeout(),
            connect_timeout_s: default_connect_timeout(),
            retries: default_retries(),
            backoff_s: default_backoff(),
            max_seq: None,
            api_key_env: None,
        }
    }

    /// Checks the fields; errors name them as `remote.<field>`.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.endpoints.is_empty(),
            "remote.endpoints is empty: name at least one server URL"
        );
        for url in &self.endpoints {
            anyhow::ensure!(
                url.starts_with("http://"),
                "remote.endpoints: {url:?} must start with http:// (https is not built in; \
                 reach the server over the cluster network or a TLS-terminating proxy)"
            );
        }
        anyhow::ensure!(!self.model.is_empty(), "remote.model is empty");
        anyhow::ensure!(self.max_in_flight > 0, "remote.max_in_flight must be > 0");
        for (name, value) in [
            ("request_timeout_s", self.request_timeout_s),
            ("connect_timeout_s", self.connect_timeout_s),
        ] {
            anyhow::ensure!(
                value > 0.0 && value.is_finite(),
                "remote.{name} must be > 0, got {value}"
            );
        }
        anyhow::ensure!(
            self.backoff_s >= 0.0 && self.backoff_s.is_finite(),
            "remote.backoff_s must be >= 0, got {}",
            self.backoff_s
        );
        Ok(())
    }
}

/// What the startup check learned about one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub url: String,
    /// The server's own version string (`/version`, or SGLang's `/get_server_info`).
    pub version: String,
    /// Longest sequence the server accepts, when it says.
    pub max_model_len: Option<usize>,
    /// SGLang's `weight_version` at startup.
    pub weight_version: Option<String>,
}

/// A client of one or more vLLM or SGLang servers (see the module doc).
#[derive(Debug)]
pub struct RemoteEngine {
    config: RemoteConfig,
    http: Http,
    pool: Pool,
    servers: Vec<ServerInfo>,
    max_seq: usize,
    logprob_kind: LogprobKind,
    version: u64,
    /// The LoRA adapter requests sample with (vLLM `model`, SGLang `lora_path`).
    adapter: Option<String>,
    /// Set when a weight sync failed part-way: the endpoints may disagree on their weights.
    sync_failed: Option<String>,
}

impl RemoteEngine {
    /// Connects to every endpoint and checks it: it must answer, report its version, and serve
    /// `config.model`. Errors name the endpoint.
    pub fn connect(config: RemoteConfig) -> anyhow::Result<Self> {
        config.validate()?;
        let endpoints: Vec<String> = config
            .endpoints
            .iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        let api_key =
            match &config.api_key_env {
                None => None,
                Some(var) => Some(std::env::var(var).with_context(|| {
                    format!("remote.api_key_env names {var:?}, which is not set")
                })?),
            };
        let http = Http {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs_f64(config.connect_timeout_s))
                .timeout(Duration::from_secs_f64(config.request_timeout_s))
                .max_idle_connections_per_host(config.max_in_flight)
                .build(),
            api_key,
        };
        let mut servers = Vec::with_capacity(endpoints.len());
        for url in &endpoints {
            let info = match config.protocol {
                Protocol::Vllm => check_vllm(&http, url, &config.model),
                Protocol::Sglang => check_sglang(&http, url, &config.model),
            }
            .with_context(|| format!("remote engine: startup check of endpoint {url}"))?;
            servers.push(info);
        }
        let max_seq = match config.max_seq {
            Some(n) => n,
            None => servers
                .iter()
                .map(|s| {
                    s.max_model_len.ok_or_else(|| {
                        anyhow::anyhow!(
                            "remote engine: endpoint {} does not say its context length; set \
                             remote.max_seq",
                            s.url
                        )
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?
                .into_iter()
                .min()
                .unwrap_or(0),
        };
        anyhow::ensure!(max_seq > 1, "remote engine: max_seq {max_seq} is too small");
        let backoff = Duration::from_secs_f64(config.backoff_s);
        let pool = Pool::new(
            endpoints,
            config.max_in_flight,
            config.balance,
            RetryPolicy {
                retries: config.retries,
                backoff,
                max_backoff: Duration::from_secs(8).max(backoff),
            },
        );
        let version = servers
            .iter()
            .filter_map(|s| s.weight_version.as_deref().and_then(|v| v.parse().ok()))
            .min()
            .unwrap_or(0);
        Ok(Self {
            logprob_kind: config
                .logprob_kind
                .unwrap_or(config.protocol.default_logprob_kind()),
            config,
            http,
            pool,
            servers,
            max_seq,
            version,
            adapter: None,
            sync_failed: None,
        })
    }

    /// What the startup check found on each endpoint.
    pub fn servers(&self) -> &[ServerInfo] {
        &self.servers
    }

    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    /// The kind of log-probs completions report.
    pub fn logprob_kind(&self) -> LogprobKind {
        self.logprob_kind
    }

    /// The LoRA adapter requests sample with, after a [`WeightSync::LoraAdapter`].
    pub fn adapter(&self) -> Option<&str> {
        self.adapter.as_deref()
    }

    /// Raw log-probs of a sequence under the served weights: entry `i` is
    /// `log p(ids[i+1] | ids[..=i])` (so `ids.len() - 1` entries), never temperature-scaled.
    /// vLLM: `prompt_logprobs: 0` with `max_tokens: 1`; SGLang: `logprob_start_len: 0`. This is
    /// the mismatch preflight's probe.
    pub fn score_prompt(&self, ids: &[u32]) -> anyhow::Result<Vec<f32>> {
        let mut out = self.score_prompts(std::slice::from_ref(&ids.to_vec()))?;
        out.pop()
            .ok_or_else(|| anyhow::anyhow!("remote engine: scoring returned nothing"))
    }

    /// [`RemoteEngine::score_prompt`] for several sequences at once, in order.
    pub fn score_prompts(&self, sequences: &[Vec<u32>]) -> anyhow::Result<Vec<Vec<f32>>> {
        self.usable()?;
        for (i, ids) in sequences.iter().enumerate() {
            anyhow::ensure!(!ids.is_empty(), "score_prompt: sequence {i} is empty");
            anyhow::ensure!(
                ids.len() < self.max_seq,
                "score_prompt: sequence {i} ({} tokens) leaves no room for the one generated \
                 token within max_seq {}",
                ids.len(),
                self.max_seq
            );
        }
        self.pool.run(sequences.len(), "scoring request", |url, i| {
            let ids = &sequences[i];
            match self.config.protocol {
                Protocol::Vllm => {
                    let body = self.vllm_score_body(ids);
                    let text = self.http.post(url, "/v1/completions", &body)?;
                    parse_vllm_prompt_logprobs(&text, ids).map_err(Failure::fatal)
                }
                Protocol::Sglang => {
                    let body = self.sglang_score_body(ids);
                    let text = self.http.post(url, "/generate", &body)?;
                    parse_sglang_prompt_logprobs(&text, ids).map_err(Failure::fatal)
                }
            }
        })
    }

    fn usable(&self) -> anyhow::Result<()> {
        match &self.sync_failed {
            Some(why) => anyhow::bail!(
                "remote engine: the last weight sync failed ({why}); the endpoints may hold \
                 different weights, so nothing is sampled until a sync succeeds"
            ),
            None => Ok(()),
        }
    }

    /// The `model` field: the adapter after a LoRA sync, else the base model.
    fn served_name(&self) -> String {
        self.adapter
            .clone()
            .unwrap_or_else(|| self.config.model.clone())
    }

    fn vllm_body(&self, req: &GenerateRequest, params: &GenerateParams) -> Value {
        let s = &params.sampling;
        let body = CompletionRequest {
            model: Some(self.served_name()),
            prompt: Some(Prompt::Ids(req.prompt.clone())),
            max_tokens: Some(params.max_tokens.min(self.max_seq - req.prompt.len())),
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            top_k: Some(wire_top_k(s.top_k)),
            min_p: Some(0.0),
            repetition_penalty: Some(1.0),
            presence_penalty: Some(0.0),
            frequency_penalty: Some(0.0),
            seed: Some(req.seed),
            n: Some(1),
            stop_token_ids: Some(params.stop.clone()),
            ignore_eos: Some(true),
            min_tokens: Some(0),
            skip_special_tokens: Some(false),
            include_stop_str_in_output: Some(true),
            logprobs: Some(0),
            echo: Some(false),
            stream: Some(false),
            return_token_ids: Some(true),
            return_tokens_as_token_ids: Some(true),
            ..Default::default()
        };
        serde_json::to_value(body).unwrap_or(Value::Null)
    }

    fn vllm_score_body(&self, ids: &[u32]) -> Value {
        let body = CompletionRequest {
            model: Some(self.served_name()),
            prompt: Some(Prompt::Ids(ids.to_vec())),
            max_tokens: Some(1),
            temperature: Some(1.0),
            top_p: Some(1.0),
            top_k: Some(-1),
            min_p: Some(0.0),
            repetition_penalty: Some(1.0),
            presence_penalty: Some(0.0),
            frequency_penalty: Some(0.0),
            seed: Some(0),
            n: Some(1),
            ignore_eos: Some(true),
            skip_special_tokens: Some(false),
            prompt_logprobs: Some(0),
            stream: Some(false),
            return_token_ids: Some(true),
            ..Default::default()
        };
        serde_json::to_value(body).unwrap_or(Value::Null)
    }

    fn sglang_sampling(&self, params: &GenerateParams, max_new_tokens: usize) -> SglangSampling {
        let s = &params.sampling;
        SglangSampling {
            max_new_tokens: Some(max_new_tokens),
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            top_k: Some(wire_top_k(s.top_k)),
            min_p: Some(0.0),
            repetition_penalty: Some(1.0),
            presence_penalty: Some(0.0),
            frequency_penalty: Some(0.0),
            stop_token_ids: Some(params.stop.clone()),
            ignore_eos: Some(false),
            min_new_tokens: Some(0),
            skip_special_tokens: Some(false),
            no_stop_trim: Some(true),
            ..Default::default()
        }
    }

    fn sglang_body(&self, req: &GenerateRequest, params: &GenerateParams) -> Value {
        let mut sampling = self.sglang_sampling(
            params,
            params.max_tokens.min(self.max_seq - req.prompt.len()),
        );
        sampling.sampling_seed = Some(req.seed);
        let body = GenerateRequestBody {
            input_ids: Some(Prompt::Ids(req.prompt.clone())),
            sampling_params: Some(sampling),
            return_logprob: Some(true),
            logprob_start_len: Some(-1),
            top_logprobs_num: Some(0),
            lora_path: self.adapter.clone(),
            stream: Some(false),
            ..Default::default()
        };
        serde_json::to_value(body).unwrap_or(Value::Null)
    }

    fn sglang_score_body(&self, ids: &[u32]) -> Value {
        let params = GenerateParams {
            sampling: crate::SamplingParams::default(),
            max_tokens: 1,
            stop: Vec::new(),
        };
        let mut sampling = self.sglang_sampling(&params, 1);
        sampling.sampling_seed = Some(0);
        let body = GenerateRequestBody {
            input_ids: Some(Prompt::Ids(ids.to_vec())),
            sampling_params: Some(sampling),
            return_logprob: Some(true),
            logprob_start_len: Some(0),
            top_logprobs_num: Some(0),
            lora_path: self.adapter.clone(),
            stream: Some(false),
            ..Default::default()
        };
        serde_json::to_value(body).unwrap_or(Value::Null)
    }

    /// One sync call on every endpoint, each retried on connection errors; the first endpoint
    /// that still fails is the error.
    fn on_every_endpoint(
        &self,
        what: &str,
        call: impl Fn(&str) -> Result<(), Failure>,
    ) -> anyhow::Result<()> {
        for url in self.pool.urls() {
            let mut attempt = 0;
            loop {
                match call(url) {
                    Ok(()) => break,
                    Err(f) if f.retryable && attempt < self.config.retries => {
                        attempt += 1;
                        let factor = 1u32 << (attempt - 1).min(16);
                        std::thread::sleep(Duration::from_secs_f64(self.config.backoff_s) * factor);
                    }
                    Err(f) => {
                        return Err(f.error.context(format!("{what} on endpoint {url}")));
                    }
                }
            }
        }
        Ok(())
    }

    fn sync_lora(&self, dir: &Path, name: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            !name.is_empty(),
            "weight sync: the LoRA adapter name is empty"
        );
        let path = absolute(dir)?;
        let body = serde_json::json!({
            "lora_name": name,
            "lora_path": path,
            "load_inplace": true,
        });
        match self.config.protocol {
            Protocol::Vllm => self.on_every_endpoint("loading the LoRA adapter", |url| {
                self.http
                    .post(url, "/v1/load_lora_adapter", &body)
                    .map(drop)
            }),
            Protocol::Sglang => self.on_every_endpoint("loading the LoRA adapter", |url| {
                // SGLang has no in-place load: unload the old adapter of that name (absent the
                // first time, which is fine), then load.
                let unload = serde_json::json!({ "lora_name": name });
                match self.http.post(url, "/unload_lora_adapter", &unload) {
                    Ok(_) => {}
                    Err(f) if !f.retryable => {}
                    Err(f) => return Err(f),
                }
                let load = serde_json::json!({ "lora_name": name, "lora_path": path });
                let text = self.http.post(url, "/load_lora_adapter", &load)?;
                check_sglang_success(&text).map_err(Failure::fatal)
            }),
        }
    }

    fn sync_full(&self, dir: &Path, version: u64) -> anyhow::Result<()> {
        match self.config.protocol {
            Protocol::Vllm => anyhow::bail!(
                "weight sync: vLLM has no HTTP route that loads full weights from disk (its \
                 weight transfer runs over NCCL or CUDA IPC); restart the server on {}, or \
                 train and sync a LoRA adapter",
                dir.display()
            ),
            Protocol::Sglang => {
                let path = absolute(dir)?;
                let body = serde_json::json!({
                    "model_path": path,
                    "weight_version": version.to_string(),
                });
                self.on_every_endpoint("updating the weights from disk", |url| {
                    let text = self.http.post(url, "/update_weights_from_disk", &body)?;
                    check_sglang_success(&text).map_err(Failure::fatal)
                })
            }
        }
    }

    fn parse_completion(
        &self,
        text: &str,
        req: &GenerateRequest,
        params: &GenerateParams,
    ) -> Result<Completion, Failure> {
        let parsed = match self.config.protocol {
            Protocol::Vllm => parse_vllm_completion(text, params)?,
            Protocol::Sglang => parse_sglang_completion(text, params)?,
        };
        let (tokens, logprobs, finish, server_version) = parsed;
        let cap = params.max_tokens.min(self.max_seq - req.prompt.len());
        if finish == FinishReason::Length && tokens.len() < cap {
            return Err(Failure::fatal(anyhow::anyhow!(
                "the server stopped for length after {} tokens, short of max_tokens {cap}",
                tokens.len()
            )));
        }
        let weight_version = match (server_version, &self.adapter) {
            (Some(v), None) => v,
            _ => self.version,
        };
        Ok(Completion {
            tokens,
            logprobs,
            finish,
            logprob_kind: self.logprob_kind,
            weight_version,
        })
    }
}

impl RemoteEngine {
    /// [`Engine::generate`] through a shared reference: generating changes nothing in the
    /// client, so rollouts may sample while the owner keeps the engine for weight syncs.
    pub fn generate_shared(
        &self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        self.usable()?;
        params.sampling.validate()?;
        anyhow::ensure!(params.max_tokens > 0, "generate: max_tokens must be > 0");
        for (i, r) in requests.iter().enumerate() {
            anyhow::ensure!(!r.prompt.is_empty(), "generate: prompt {i} is empty");
            anyhow::ensure!(
                r.prompt.len() < self.max_seq,
                "generate: prompt {i} ({} tokens) leaves no room within the servers' max_seq {}",
                r.prompt.len(),
                self.max_seq
            );
        }
        let this = self;
        this.pool.run(requests.len(), "request", |url, i| {
            let req = &requests[i];
            let (route, body) = match this.config.protocol {
                Protocol::Vllm => ("/v1/completions", this.vllm_body(req, params)),
                Protocol::Sglang => ("/generate", this.sglang_body(req, params)),
            };
            let text = this.http.post(url, route, &body)?;
            this.parse_completion(&text, req, params)
        })
    }
}

/// A borrowed remote engine samples; weight syncs go through the owner (`&mut`), so none can
/// happen while a borrow samples.
impl Engine for &RemoteEngine {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        self.generate_shared(requests, params)
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn sync_weights(&mut self, _: &WeightSync) -> anyhow::Result<()> {
        anyhow::bail!("weight sync: sync the remote engine through its owner, not a borrow")
    }

    fn weight_version(&self) -> u64 {
        self.version
    }
}

impl Engine for RemoteEngine {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        self.generate_shared(requests, params)
    }

    fn max_seq(&self) -> usize {
        self.max_seq
    }

    fn sync_weights(&mut self, sync: &WeightSync) -> anyhow::Result<()> {
        // `&mut self`: no generate or scoring call is in flight (see the module doc).
        let result = match sync {
            WeightSync::Shared { .. } => {
                return Err(anyhow::anyhow!(
                    "weight sync: a remote engine cannot read the trainer's weights in place; \
                     write them as a LoRA adapter (WeightSync::LoraAdapter) or a full folder \
                     (WeightSync::FullWeights)"
                ))
            }
            WeightSync::LoraAdapter { dir, name, .. } => self.sync_lora(dir, name),
            WeightSync::FullWeights { dir, version } => self.sync_full(dir, *version),
        };
        match result {
            Ok(()) => {
                self.sync_failed = None;
                self.version = sync.version();
                self.adapter = match sync {
                    WeightSync::LoraAdapter { name, .. } => Some(name.clone()),
                    _ => None,
                };
                Ok(())
            }
            Err(err) => {
                self.sync_failed = Some(format!("{err:#}"));
                Err(err)
            }
        }
    }

    fn weight_version(&self) -> u64 {
        self.version
    }
}

/// Our `top_k` (0 = off) as both servers spell it (-1 = off).
fn wire_top_k(top_k: usize) -> i64 {
    if top_k == 0 {
        -1
    } else {
        top_k as i64
    }
}

fn absolute(dir: &Path) -> anyhow::Result<String> {
    let path = std::path::absolute(dir)
        .with_context(|| format!("weight sync: resolving {}", dir.display()))?;
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("weight sync: {} is not valid UTF-8", path.display()))
}

/// The blocking HTTP client shared by the request threads (ureq pools connections).
#[derive(Debug)]
struct Http {
    agent: ureq::Agent,
    api_key: Option<String>,
}

impl Http {
    fn get(&self, base: &str, route: &str) -> Result<String, Failure> {
        let request = self.agent.get(&format!("{base}{route}"));
        self.finish(self.authorise(request).call(), "GET", route)
    }

    fn post(&self, base: &str, route: &str, body: &Value) -> Result<String, Failure> {
        let request = self
            .agent
            .post(&format!("{base}{route}"))
            .set("Content-Type", "application/json");
        let body = body.to_string();
        self.finish(self.authorise(request).send_string(&body), "POST", route)
    }

    fn authorise(&self, request: ureq::Request) -> ureq::Request {
        match &self.api_key {
            Some(key) => request.set("Authorization", &format!("Bearer {key}")),
            None => request,
        }
    }

    fn finish(
        &self,
        result: Result<ureq::Response, ureq::Error>,
        method: &str,
        route: &str,
    ) -> Result<String, Failure> {
        match result {
            Ok(response) => {
                let mut text = String::new();
                response
                    .into_reader()
                    .read_to_string(&mut text)
                    .map_err(|e| {
                        Failure::retry(anyhow::anyhow!("{method} {route}: reading the body: {e}"))
                    })?;
                Ok(text)
            }
            Err(ureq::Error::Status(code, response)) => {
                let body = response.into_string().unwrap_or_default();
                let error = anyhow::anyhow!(
                    "{method} {route}: HTTP {code}: {}",
                    wire::error_message(&body)
                );
                if code >= 500 || code == 429 || code == 408 {
                    Err(Failure::retry(error))
                } else {
                    Err(Failure::fatal(error))
                }
            }
            Err(ureq::Error::Transport(transport)) => {
                let error = anyhow::anyhow!("{method} {route}: {transport}");
                match transport.kind() {
                    ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => {
                        Err(Failure::unreachable(error))
                    }
                    ureq::ErrorKind::Io | ureq::ErrorKind::ProxyConnect => {
                        Err(Failure::retry(error))
                    }
                    _ => Err(Failure::fatal(error)),
                }
            }
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> anyhow::Result<T> {
    serde_json::from_str(text).with_context(|| {
        format!(
            "{what} is not the expected JSON: {}",
            text.chars().take(300).collect::<String>()
        )
    })
}

fn check_vllm(http: &Http, url: &str, model: &str) -> anyhow::Result<ServerInfo> {
    let version = http
        .get(url, "/version")
        .map_err(|f| f.error)
        .and_then(|t| server_version(&t))?;
    let models: ModelList = parse_json(
        &http.get(url, "/v1/models").map_err(|f| f.error)?,
        "GET /v1/models",
    )?;
    let Some(card) = models.data.iter().find(|m| m.id == model) else {
        let served: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
        anyhow::bail!(
            "the server (version {version}) serves {served:?}, not the configured model {model:?}"
        );
    };
    Ok(ServerInfo {
        url: url.to_string(),
        version,
        max_model_len: card.max_model_len,
        weight_version: None,
    })
}

fn check_sglang(http: &Http, url: &str, model: &str) -> anyhow::Result<ServerInfo> {
    let server: Value = parse_json(
        &http.get(url, "/get_server_info").map_err(|f| f.error)?,
        "GET /get_server_info",
    )?;
    let version = match server.get("version").and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => http
            .get(url, "/version")
            .map_err(|f| f.error)
            .and_then(|t| server_version(&t))?,
    };
    let info: Value = parse_json(
        &http.get(url, "/get_model_info").map_err(|f| f.error)?,
        "GET /get_model_info",
    )?;
    let names: Vec<&str> = ["model_path", "served_model_name"]
        .iter()
        .filter_map(|k| info.get(*k).or_else(|| server.get(*k)))
        .filter_map(Value::as_str)
        .collect();
    anyhow::ensure!(
        names.contains(&model),
        "the server (version {version}) serves {names:?}, not the configured model {model:?}"
    );
    let max_model_len = ["context_length", "max_model_len"]
        .iter()
        .find_map(|k| server.get(*k).and_then(Value::as_u64))
        .map(|n| n as usize);
    Ok(ServerInfo {
        url: url.to_string(),
        version,
        max_model_len,
        weight_version: info.get("weight_version").map(version_text),
    })
}

fn server_version(text: &str) -> anyhow::Result<String> {
    let value: Value = parse_json(text, "GET /version")?;
    value
        .get("version")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("GET /version has no \"version\" string: {text}"))
}

fn version_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn check_sglang_success(text: &str) -> anyhow::Result<()> {
    // Success is HTTP 200 with `success: true`; a plain-text 200 counts as success as well.
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.get("success").and_then(Value::as_bool) == Some(false) => {
            anyhow::bail!("the server refused: {}", wire::error_message(text))
        }
        _ => Ok(()),
    }
}

type Parsed = (Vec<u32>, Vec<f32>, FinishReason, Option<u64>);

// Public for the integration tests (tests/engine/remote.rs).
#[doc(hidden)]
pub fn parse_vllm_completion(text: &str, params: &GenerateParams) -> Result<Parsed, Failure> {
    let response: CompletionResponse =
        parse_json(text, "the /v1/completions response").map_err(Failure::fatal)?;
    let fatal = |msg: String| Failure::fatal(anyhow::anyhow!("/v1/completions: {msg}"));
    let [choice] = response.choices.as_slice() else {
        return Err(fatal(format!(
            "expected one choice, got {}",
            response.choices.len()
        )));
    };
    let finish = match choice.finish_reason.as_deref() {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("abort") => {
            return Err(Failure::retry(anyhow::anyhow!(
                "/v1/completions: the server aborted the request"
            )))
        }
        other => return Err(fatal(format!("unknown finish_reason {other:?}"))),
    };
    let logprobs = choice
        .logprobs
        .as_ref()
        .ok_or_else(|| fatal("no logprobs (the request asked for logprobs: 0)".into()))?;
    let tokens = match &choice.token_ids {
        Some(ids) => ids.clone(),
        None => logprobs
            .tokens
            .iter()
            .map(|t| {
                t.strip_prefix("token_id:")
                    .and_then(|id| id.parse().ok())
                    .ok_or_else(|| {
                        fatal(format!(
                            "no token_ids (vLLM >= 0.10.2 returns them with return_token_ids) \
                             and token {t:?} is not \"token_id:N\""
                        ))
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let lps = logprobs
        .token_logprobs
        .iter()
        .enumerate()
        .map(|(k, lp)| {
            lp.map(|x| x as f32)
                .ok_or_else(|| fatal(format!("token {k} has a null log-prob")))
        })
        .collect::<Result<Vec<f32>, _>>()?;
    if lps.len() != tokens.len() {
        return Err(fatal(format!(
            "{} token ids but {} log-probs",
            tokens.len(),
            lps.len()
        )));
    }
    if finish == FinishReason::Stop {
        let named = choice
            .stop_reason
            .as_ref()
            .and_then(Value::as_u64)
            .map(|id| id as u32);
        if let Some(id) = named {
            if params.stop.contains(&id) && tokens.last() != Some(&id) {
                return Err(fatal(format!(
                    "the server stopped on token {id} but left it out of token_ids, so its \
                     log-prob is lost"
                )));
            }
        }
    }
    Ok((tokens, lps, finish, None))
}

// Public for the integration tests (tests/engine/remote.rs).
#[doc(hidden)]
pub fn parse_sglang_completion(text: &str, params: &GenerateParams) -> Result<Parsed, Failure> {
    let fatal = |msg: String| Failure::fatal(anyhow::anyhow!("/generate: {msg}"));
    let value: Value = parse_json(text, "the /generate response").map_err(Failure::fatal)?;
    let value = match value {
        Value::Array(mut list) if list.len() == 1 => list.remove(0),
        Value::Array(list) => {
            return Err(fatal(format!("expected one result, got {}", list.len())))
        }
        other => other,
    };
    let response: GenerateResponseBody =
        serde_json::from_value(value).map_err(|e| fatal(format!("not the expected JSON: {e}")))?;
    let meta = &response.meta_info;
    let finish_info = meta
        .finish_reason
        .as_ref()
        .ok_or_else(|| fatal("no meta_info.finish_reason".into()))?;
    let finish = match finish_info.kind.as_str() {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "abort" => {
            return Err(Failure::retry(anyhow::anyhow!(
                "/generate: the server aborted the request: {}",
                finish_info.message.clone().unwrap_or_default()
            )))
        }
        other => return Err(fatal(format!("unknown finish_reason type {other:?}"))),
    };
    let entries = meta
        .output_token_logprobs
        .as_ref()
        .ok_or_else(|| fatal("no meta_info.output_token_logprobs".into()))?;
    let mut tokens = response.output_ids.clone();
    // A server that trimmed the stop token still lists its log-prob: restore it.
    if entries.len() == tokens.len() + 1 && finish == FinishReason::Stop {
        if let Some((_, id, _)) = entries.last() {
            if params.stop.contains(id) {
                tokens.push(*id);
            }
        }
    }
    if entries.len() != tokens.len() {
        return Err(fatal(format!(
            "{} output ids but {} log-probs",
            tokens.len(),
            entries.len()
        )));
    }
    let mut lps = Vec::with_capacity(tokens.len());
    for (k, ((lp, id, _), token)) in entries.iter().zip(&tokens).enumerate() {
        if id != token {
            return Err(fatal(format!(
                "log-prob {k} is for token {id} but output id {k} is {token}"
            )));
        }
        lps.push(lp.ok_or_else(|| fatal(format!("token {k} has a null log-prob")))? as f32);
    }
    let server_version = meta.weight_version.as_ref().and_then(|v| match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    });
    Ok((tokens, lps, finish, server_version))
}

fn parse_vllm_prompt_logprobs(text: &str, ids: &[u32]) -> anyhow::Result<Vec<f32>> {
    let response: CompletionResponse = parse_json(text, "the /v1/completions response")?;
    let choice = response
        .choices
        .first()
        .ok_or_else(|| anyhow::anyhow!("/v1/completions: no choices"))?;
    let entries = choice.prompt_logprobs.as_ref().ok_or_else(|| {
        anyhow::anyhow!("/v1/completions: no prompt_logprobs (asked with prompt_logprobs: 0)")
    })?;
    anyhow::ensure!(
        entries.len() == ids.len(),
        "/v1/completions: {} prompt_logprobs for {} prompt tokens",
        entries.len(),
        ids.len()
    );
    let mut out = Vec::with_capacity(ids.len().saturating_sub(1));
    for (i, (entry, id)) in entries.iter().zip(ids).enumerate().skip(1) {
        let lp = entry
            .as_ref()
            .and_then(|map| map.get(&id.to_string()))
            .ok_or_else(|| {
                anyhow::anyhow!("/v1/completions: prompt_logprobs[{i}] has no entry for token {id}")
            })?;
        out.push(lp.logprob as f32);
    }
    Ok(out)
}

fn parse_sglang_prompt_logprobs(text: &str, ids: &[u32]) -> anyhow::Result<Vec<f32>> {
    let value: Value = parse_json(text, "the /generate response")?;
    let value = match value {
        Value::Array(mut list) if !list.is_empty() => list.remove(0),
        other => other,
    };
    let response: GenerateResponseBody =
        serde_json::from_value(value).context("the /generate response")?;
    let entries = response.meta_info.input_token_logprobs.ok_or_else(|| {
        anyhow::anyhow!(
            "/generate: no meta_info.input_token_logprobs (asked with logprob_start_len 0)"
        )
    })?;
    anyhow::ensure!(
        entries.len() == ids.len(),
        "/generate: {} input_token_logprobs for {} prompt tokens",
        entries.len(),
        ids.len()
    );
    let mut out = Vec::with_capacity(ids.len().saturating_sub(1));
    for (i, ((lp, id, _), want)) in entries.iter().zip(ids).enumerate().skip(1) {
        anyhow::ensure!(
            id == want,
            "/generate: input_token_logprobs[{i}] is for token {id}, the prompt has {want}"
        );
        let lp =
            lp.ok_or_else(|| anyhow::anyhow!("/generate: input_token_logprobs[{i}] is null"))?;
        out.push(lp as f32);
    }
    Ok(out)
}
