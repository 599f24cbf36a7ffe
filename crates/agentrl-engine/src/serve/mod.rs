//! `agentrl serve`'s server: a local model behind vLLM's and SGLang's HTTP routes, so the
//! remote engine ([`crate::remote`]) and anything written against vLLM's documented API can be
//! tested over loopback, without a GPU.
//!
//! Where it sits: [`start`] binds an address and serves a [`ServedModel`] (a model name, a
//! local engine to generate with, LoRA adapters and full weights loaded from folders). The
//! command line binds it to Qwen3 ([`LocalServed`]`<Qwen3>`); tests bind it to tiny models or to
//! a model that always fails. Routes (vLLM): `GET /v1/models`, `GET /version`, `GET /health`,
//! `POST /v1/completions`, `POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter`;
//! (SGLang): `POST /generate`, `GET /get_model_info`, `GET /get_server_info`,
//! `POST /update_weights_from_disk`, `POST /load_lora_adapter`, `POST /unload_lora_adapter`.
//! The request and response shapes are those of [`crate::remote::wire`]; errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` with 400 (bad request), 404 (unknown route,
//! model or adapter) or 500 (the model failed).
//!
//! **Defaults, as the real servers fill them.** A sampling parameter the request omits is taken
//! from the model folder's `generation_config.json` ([`GenerationDefaults`]), exactly as vLLM's
//! `--generation-config auto` (and SGLang's `--sampling-defaults model`) do, else from vLLM's
//! defaults (temperature 1, top-p 1, top-k off, `max_tokens` 16; SGLang: `max_new_tokens` 128).
//! This is the trap the mismatch preflight must catch, so the server reproduces it. Unless
//! `ignore_eos` is set, the folder's `eos_token_id`s stop a completion as well (SGLang:
//! `ignore_eos` also disables `stop_token_ids`, as in SGLang).
//!
//! **Which log-probs** ([`ServeOptions::logprobs_mode`], like vLLM's `--logprobs-mode`):
//! raw (`log softmax(z)`, vLLM's default), temperature-scaled (`log softmax(z / T)`, what the
//! local engine samples with) or processed (after top-k/top-p truncation, renormalised). Raw
//! and processed are computed by one extra forward pass over prompt + completion; prompt
//! log-probs are always raw, as on both servers. `--force-temperature T`
//! ([`ServeOptions::force_temperature`]) is a fault injection for the preflight: the server
//! samples and reports at `T` whatever the request says.
//!
//! **Threads.** The HTTP stack of `agentrl gym serve` (`agentrl_gym::service::http`: axum on
//! hyper on tokio, with read and idle time-outs, a connection bound, no panic when descriptors
//! run out, and a graceful SIGTERM) reads each request; its parsing and validation run on the
//! runtime's blocking pool (`http_threads` wide); the model itself lives on one model thread
//! that owns the [`ServedModel`] and takes work from a channel. Generate calls that arrive together with
//! the same adapter and parameters are batched into one engine call (each row keeps its own
//! seed, so batching never changes a sample), and a weight load queued behind them runs after
//! them: no request is sampled while weights change.
//!
//! On [`Server::shutdown`] (SIGTERM or SIGINT for `agentrl serve`) the server stops accepting,
//! lets requests in progress finish for the grace time, then stops the model thread.

mod local;
mod routes;

use std::ops::Range;
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use agentrl_gym::service::http::{HttpLimits, Running};

use anyhow::Context;
use serde_json::Value;

use crate::sampling::scaled_log_softmax;
use crate::{Completion, GenerateParams, GenerateRequest, LogprobKind, SamplingParams};
pub use local::{LocalServed, ServableDecoder};

/// A model as the server sees it. Only the model thread calls it.
pub trait ServedModel: Send + 'static {
    /// The name requests give as `model` (vLLM's `--served-model-name`).
    fn name(&self) -> &str;
    /// Where the weights came from (SGLang's `model_path`).
    fn model_path(&self) -> String;
    /// Longest sequence, prompt and completion together.
    fn max_seq(&self) -> usize;
    fn vocab_size(&self) -> usize;
    /// Samples one completion per request with the base model (`adapter` None) or a loaded
    /// adapter, as [`crate::Engine::generate`] does.
    fn generate(
        &mut self,
        adapter: Option<&str>,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>>;
    /// Logits `[V]` after `ids[..=p]` for every `p` in `positions`.
    fn position_logits(
        &mut self,
        adapter: Option<&str>,
        ids: &[u32],
        positions: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>>;
    /// Loaded adapters: (name, folder).
    fn adapters(&self) -> Vec<(String, String)>;
    /// Loads (or replaces in place) the PEFT adapter in `dir` under `name`.
    fn load_lora(&mut self, name: &str, dir: &Path) -> anyhow::Result<()>;
    fn unload_lora(&mut self, name: &str) -> anyhow::Result<()>;
    /// Replaces the base weights with the HF folder `dir`.
    fn load_full_weights(&mut self, dir: &Path) -> anyhow::Result<()>;
}

/// Text in and out, for text prompts and the `text` fields of responses. Without one the
/// server takes token ids only, answers `text: ""`, and names tokens `"token_id:N"`.
pub trait TextCodec: Send + Sync {
    fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>>;
    fn decode(&self, ids: &[u32]) -> anyhow::Result<String>;
}

/// Sampling defaults from a model folder's `generation_config.json`; `None` where the file
/// says nothing (the server's own default then applies).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationDefaults {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// `0` or `-1` = off, as in the file.
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    /// `max_new_tokens` in the file: the default `max_tokens`.
    pub max_new_tokens: Option<usize>,
    /// `eos_token_id` (one or a list): stop tokens unless a request sets `ignore_eos`.
    pub eos_token_ids: Vec<u32>,
}

impl GenerationDefaults {
    /// Reads `dir/generation_config.json`; a folder without one has no defaults. Errors name
    /// the file and the field.
    pub fn from_model_dir(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("generation_config.json");
        if !path.exists() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let value: Value = serde_json::from_str(text).context("not JSON")?;
        let float = |key: &str| -> anyhow::Result<Option<f64>> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| anyhow::anyhow!("{key} must be a number, got {v}")),
            }
        };
        let top_k = match value.get("top_k") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .ok_or_else(|| anyhow::anyhow!("top_k must be an integer, got {v}"))?,
            ),
        };
        let max_new_tokens = match value.get("max_new_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                anyhow::anyhow!("max_new_tokens must be a non-negative integer, got {v}")
            })? as usize),
        };
        let eos_token_ids = match value.get("eos_token_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|v| {
                    v.as_u64().map(|id| id as u32).ok_or_else(|| {
                        anyhow::anyhow!("eos_token_id entries must be token ids, got {v}")
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            Some(v) => vec![v
                .as_u64()
                .ok_or_else(|| anyhow::anyhow!("eos_token_id must be a token id, got {v}"))?
                as u32],
        };
        Ok(Self {
            temperature: float("temperature")?,
            top_p: float("top_p")?,
            top_k,
            min_p: float("min_p")?,
            repetition_penalty: float("repetition_penalty")?,
            max_new_tokens,
            eos_token_ids,
        })
    }
}

/// How the server behaves.
#[derive(Clone)]
pub struct ServeOptions {
    /// Which log-probs responses carry (vLLM `--logprobs-mode`; default raw, as vLLM).
    pub logprobs_mode: LogprobKind,
    /// Fault injection: sample and report at this temperature whatever the request says.
    pub force_temperature: Option<f64>,
    /// Filled into requests that omit a parameter.
    pub defaults: GenerationDefaults,
    pub text: Option<Arc<dyn TextCodec>>,
    /// Threads parsing requests (the model runs on its own thread).
    pub http_threads: usize,
    /// Time-outs and the connection bound of the HTTP stack.
    pub http: HttpLimits,
    /// Reported by `GET /version`.
    pub version: String,
    /// Most alternatives per token a request may ask for (vLLM's `--max-logprobs`).
    pub max_logprobs: usize,
    /// Who may send requests: the token rule of `agentrl gym serve` too (a key, as vLLM's
    /// `--api-key`, required off loopback; 401 without it).
    pub access: agentrl_gym::service::AccessRule,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            logprobs_mode: LogprobKind::Raw,
            force_temperature: None,
            defaults: GenerationDefaults::default(),
            text: None,
            http_threads: 8,
            http: HttpLimits::default(),
            version: format!("agentrl-serve {}", env!("CARGO_PKG_VERSION")),
            max_logprobs: 20,
            access: agentrl_gym::service::AccessRule::open(),
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("logprobs_mode", &self.logprobs_mode)
            .field("force_temperature", &self.force_temperature)
            .field("defaults", &self.defaults)
            .field("text", &self.text.is_some())
            .field("http_threads", &self.http_threads)
            .field("version", &self.version)
            .field("access", &self.access)
            .finish()
    }
}

/// What a generate job needs besides the samples.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Needs {
    /// Alternatives per completion token (0 = the sampled token only).
    pub top_logprobs: usize,
    /// Prompt log-probs from this position on, with this many alternatives.
    pub prompt_logprobs: Option<(usize, usize)>,
}

/// A prompt position's log-prob entry (always raw).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PromptEntry {
    pub token: u32,
    pub logprob: f64,
    /// 1 = the most likely token.
    pub rank: usize,
    pub top: Vec<(u32, f64)>,
}

/// One row's answer: the completion (log-probs of the server's kind), each completion
/// token's alternatives, and the prompt log-probs asked for (`None` at position 0).
#[derive(Debug, Clone)]
pub(crate) struct RowOutput {
    pub completion: Completion,
    pub top: Vec<Vec<(u32, f64)>>,
    pub prompt: Vec<Option<PromptEntry>>,
    /// The server's `weight_version` when the row was sampled.
    pub weight_version: String,
}

pub(crate) struct GenerateJob {
    pub adapter: Option<String>,
    pub rows: Vec<GenerateRequest>,
    pub params: GenerateParams,
    pub needs: Needs,
    pub reply: mpsc::Sender<anyhow::Result<Vec<RowOutput>>>,
}

/// Work other than generation, run on the model thread in arrival order.
pub(crate) type ModelCall = Box<dyn FnOnce(&mut dyn ServedModel, &mut ModelState) + Send>;

/// Everything the model thread does: generate jobs (batched) and anything else in order.
pub(crate) enum Work {
    Generate(GenerateJob),
    Call(ModelCall),
}

/// Server state that changes only on the model thread, with the weights.
#[derive(Debug, Clone)]
pub(crate) struct ModelState {
    /// SGLang's `weight_version`: `"default"` until `update_weights_from_disk` names one.
    pub weight_version: String,
}

/// Facts about the model that never change while serving.
#[derive(Debug, Clone)]
pub(crate) struct ModelFacts {
    pub name: String,
    pub path: String,
    pub max_seq: usize,
    pub vocab_size: usize,
}

/// A running server; [`Server::shutdown`] (or drop) stops it.
pub struct Server {
    addr: std::net::SocketAddr,
    http: Option<Running>,
    work: Option<mpsc::Sender<Work>>,
    model_thread: Option<JoinHandle<()>>,
}

impl Server {
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Blocks until SIGTERM or SIGINT, then shuts down (this is `agentrl serve`'s main loop).
    pub fn wait_for_signal(mut self) -> anyhow::Result<()> {
        if let Some(http) = &self.http {
            http.wait_for_signal()?;
        }
        self.stop_threads();
        Ok(())
    }

    /// Stops accepting requests and joins every thread.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        if let Some(http) = self.http.take() {
            http.shutdown();
        }
        self.work = None;
        if let Some(thread) = self.model_thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Binds `addr` (`127.0.0.1:0` picks a free port; see [`Server::addr`]) and serves `model`.
pub fn start<M: ServedModel>(
    model: M,
    options: ServeOptions,
    addr: &str,
) -> anyhow::Result<Server> {
    if let Some(t) = options.force_temperature {
        anyhow::ensure!(
            t >= 0.0 && t.is_finite(),
            "--force-temperature must be >= 0, got {t}"
        );
    }
    let facts = Arc::new(ModelFacts {
        name: model.name().to_string(),
        path: model.model_path(),
        max_seq: model.max_seq(),
        vocab_size: model.vocab_size(),
    });
    let options = Arc::new(options);
    let (work_tx, work_rx) = mpsc::channel::<Work>();
    let model_options = Arc::clone(&options);
    let model_thread = std::thread::Builder::new()
        .name("serve-model".into())
        .spawn(move || model_loop(model, &model_options, work_rx))
        .context("serve: starting the model thread")?;
    let ctx = Arc::new(routes::Context {
        facts: Arc::clone(&facts),
        options: Arc::clone(&options),
        work: work_tx.clone(),
        seed: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        ids: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    });
    let app = axum::Router::new()
        .fallback(move |request: axum::extract::Request| routes::handle(Arc::clone(&ctx), request));
    let http = Running::start(
        "serve",
        addr,
        app,
        options.http.clone(),
        options.http_threads.max(1),
        |_stop| async {},
    )
    .context("serve")?;
    Ok(Server {
        addr: http.addr(),
        http: Some(http),
        work: Some(work_tx),
        model_thread: Some(model_thread),
    })
}

fn model_loop<M: ServedModel>(mut model: M, options: &ServeOptions, work: mpsc::Receiver<Work>) {
    let mut state = ModelState {
        weight_version: "default".to_string(),
    };
    let mut pending: Option<Work> = None;
    loop {
        let first = match pending.take() {
            Some(w) => w,
            None => match work.recv() {
                Ok(w) => w,
                Err(_) => return,
            },
        };
        match first {
            Work::Call(call) => call(&mut model, &mut state),
            Work::Generate(job) => {
                // Batch whatever generate jobs are already queued; stop at the first other
                // work item, which runs after them.
                let mut jobs = vec![job];
                while let Ok(next) = work.try_recv() {
                    match next {
                        Work::Generate(job) => jobs.push(job),
                        other => {
                            pending = Some(other);
                            break;
                        }
                    }
                }
                run_generate_jobs(&mut model, options, &state, jobs);
            }
        }
    }
}

fn run_generate_jobs<M: ServedModel>(
    model: &mut M,
    options: &ServeOptions,
    state: &ModelState,
    jobs: Vec<GenerateJob>,
) {
    // Group jobs that can share one engine call.
    let mut groups: Vec<Vec<GenerateJob>> = Vec::new();
    for job in jobs {
        match groups
            .iter_mut()
            .find(|g| g[0].adapter == job.adapter && g[0].params == job.params)
        {
            Some(group) => group.push(job),
            None => groups.push(vec![job]),
        }
    }
    for group in groups {
        let rows: Vec<GenerateRequest> = group.iter().flat_map(|j| j.rows.clone()).collect();
        let adapter = group[0].adapter.clone();
        let params = group[0].params.clone();
        let completions = if params.max_tokens == 0 {
            // Scoring only (vLLM `max_tokens: 0` with `prompt_logprobs`).
            Ok(rows
                .iter()
                .map(|_| Completion {
                    tokens: Vec::new(),
                    logprobs: Vec::new(),
                    finish: crate::FinishReason::Length,
                    logprob_kind: options.logprobs_mode,
                    weight_version: 0,
                })
                .collect())
        } else {
            model.generate(adapter.as_deref(), &rows, &params)
        };
        match completions {
            Err(err) => {
                let text = format!("{err:#}");
                for job in group {
                    let _ = job.reply.send(Err(anyhow::anyhow!("{text}")));
                }
            }
            Ok(completions) => {
                let mut completions = completions.into_iter();
                for job in group {
                    let mine: Vec<Completion> = completions.by_ref().take(job.rows.len()).collect();
                    let result = job
                        .rows
                        .iter()
                        .zip(mine)
                        .map(|(row, completion)| {
                            finish_row(model, options, &job, row, completion).map(|mut out| {
                                out.weight_version = state.weight_version.clone();
                                out
                            })
                        })
                        .collect();
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}

/// Turns the engine's completion into the server's kind of log-probs and adds the
/// alternatives and prompt log-probs asked for.
fn finish_row<M: ServedModel>(
    model: &mut M,
    options: &ServeOptions,
    job: &GenerateJob,
    row: &GenerateRequest,
    mut completion: Completion,
) -> anyhow::Result<RowOutput> {
    let mode = options.logprobs_mode;
    let adapter = job.adapter.as_deref();
    let sampling = &job.params.sampling;
    let prompt_len = row.prompt.len();
    let n = completion.tokens.len();
    let mut top = vec![Vec::new(); n];
    if n > 0 && (mode != LogprobKind::TemperatureScaled || job.needs.top_logprobs > 0) {
        let mut seq = row.prompt.clone();
        seq.extend(&completion.tokens);
        let rows = model.position_logits(adapter, &seq, prompt_len - 1..prompt_len - 1 + n)?;
        for (k, (logits, &token)) in rows.iter().zip(&completion.tokens).enumerate() {
            let logp = mode_log_softmax(logits, mode, sampling);
            if mode != LogprobKind::TemperatureScaled {
                completion.logprobs[k] = logp[token as usize] as f32;
            }
            top[k] = top_entries(&logp, job.needs.top_logprobs);
        }
    }
    completion.logprob_kind = mode;
    let mut prompt = Vec::new();
    if let Some((start, k)) = job.needs.prompt_logprobs {
        let first = start.max(1);
        let rows = if first < prompt_len {
            model.position_logits(adapter, &row.prompt, first - 1..prompt_len - 1)?
        } else {
            Vec::new()
        };
        if start == 0 {
            prompt.push(None);
        }
        for (logits, &token) in rows.iter().zip(&row.prompt[first..]) {
            let logp = scaled_log_softmax(logits, 1.0);
            let lp = logp[token as usize];
            let rank = 1 + logp.iter().filter(|&&x| x > lp).count();
            prompt.push(Some(PromptEntry {
                token,
                logprob: lp,
                rank,
                top: top_entries(&logp, k),
            }));
        }
    }
    Ok(RowOutput {
        completion,
        top,
        prompt,
        weight_version: String::new(),
    })
}

/// Log-probs of every token under the server's kind: raw, temperature-scaled, or processed
/// (top-k then top-p kept, in the order [`crate::sample_token`] keeps them, renormalised;
/// tokens outside the kept set get `-inf`). Temperature 0 (greedy) is scaled as 1.
// Public for the integration tests (tests/engine/serve.rs).
#[doc(hidden)]
pub fn mode_log_softmax(logits: &[f32], mode: LogprobKind, sampling: &SamplingParams) -> Vec<f64> {
    match mode {
        LogprobKind::Raw => scaled_log_softmax(logits, 1.0),
        LogprobKind::TemperatureScaled => scaled_log_softmax(logits, sampling.temperature),
        LogprobKind::Processed => {
            let logp = scaled_log_softmax(logits, sampling.temperature);
            if !sampling.truncates() {
                return logp;
            }
            let mut order: Vec<usize> = (0..logp.len()).collect();
            order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]).then(a.cmp(&b)));
            if sampling.top_k > 0 {
                order.truncate(sampling.top_k);
            }
            let mut mass = 0.0;
            let mut keep = 0;
            for &i in &order {
                mass += logp[i].exp();
                keep += 1;
                if mass >= sampling.top_p {
                    break;
                }
            }
            let log_mass = mass.ln();
            let mut out = vec![f64::NEG_INFINITY; logp.len()];
            for &i in &order[..keep] {
                out[i] = logp[i] - log_mass;
            }
            out
        }
    }
}

/// The `k` most likely tokens, most likely first (ties: lower id first).
// Public for the integration tests (tests/engine/serve.rs).
#[doc(hidden)]
pub fn top_entries(logp: &[f64], k: usize) -> Vec<(u32, f64)> {
    if k == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..logp.len()).collect();
    order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(k)
        .map(|i| (i as u32, logp[i]))
        .collect()
}
