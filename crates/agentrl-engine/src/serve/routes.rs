//! The HTTP routes of `agentrl serve`: parse and validate a request, hand the work to the
//! model thread, and write the answer in vLLM's or SGLang's shape (see the [`super`] doc).
//!
//! Validation is strict where the local engine cannot do what was asked (stop strings,
//! penalties, `min_p`, `n > 1`, streaming): such a request is a 400 naming the field, never a
//! silently different sample.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use serde_json::{json, Value};

use super::{
    GenerateJob, ModelFacts, ModelState, Needs, RowOutput, ServeOptions, ServedModel, Work,
};
use crate::remote::wire::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse, ErrorBody,
    ErrorDetail, GenerateRequestBody, LoadLoraRequest, ModelCard, ModelList, Prompt, PromptLogprob,
    SglangSampling, UnloadLoraRequest, UpdateWeightsRequest, Usage, LOGPROB_FLOOR,
};
use crate::{FinishReason, GenerateParams, GenerateRequest, SamplingParams};

/// Largest request body read (a long token-id prompt is a few hundred kilobytes).
const MAX_BODY: usize = 64 << 20;

/// What every HTTP thread shares.
pub(super) struct Context {
    pub facts: Arc<ModelFacts>,
    pub options: Arc<ServeOptions>,
    pub work: mpsc::Sender<Work>,
    /// Seeds for requests that give none (each such request draws a new one, as on vLLM).
    pub seed: Arc<AtomicU64>,
    /// Response ids (`cmpl-…`, SGLang's `meta_info.id`).
    pub ids: Arc<AtomicU64>,
}

/// An answer: status, body, and whether the body is JSON.
struct Reply {
    status: u16,
    body: String,
    json: bool,
}

impl Reply {
    fn json(value: &impl serde::Serialize) -> Self {
        Self::json_status(200, value)
    }

    fn json_status(status: u16, value: &impl serde::Serialize) -> Self {
        Self {
            status,
            body: serde_json::to_string(value).unwrap_or_else(|_| "null".into()),
            json: true,
        }
    }

    fn text(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            body: body.into(),
            json: false,
        }
    }
}

/// An OpenAI-shaped error.
#[derive(Debug)]
struct ApiError {
    status: u16,
    message: String,
    param: Option<&'static str>,
}

impl ApiError {
    fn bad(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            param: None,
        }
    }

    fn bad_param(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            param: Some(param),
        }
    }

    fn not_found(param: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            status: 404,
            message: message.into(),
            param,
        }
    }

    fn internal(message: impl Into<String>) -> Self {
        Self {
            status: 500,
            message: message.into(),
            param: None,
        }
    }

    fn reply(self) -> Reply {
        let kind = match self.status {
            400 => "BadRequestError",
            401 => "AuthenticationError",
            404 => "NotFoundError",
            _ => "InternalServerError",
        };
        Reply::json_status(
            self.status,
            &ErrorBody {
                error: ErrorDetail {
                    message: self.message,
                    kind: kind.into(),
                    param: self.param.map(str::to_string),
                    code: self.status,
                },
            },
        )
    }
}

type Answer = Result<Reply, ApiError>;

/// A request's method, as the routes match it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Other(String),
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verb::Get => f.write_str("GET"),
            Verb::Post => f.write_str("POST"),
            Verb::Other(m) => f.write_str(m),
        }
    }
}

/// One request: the token rule, the body (read under the read time-out: 408 past it), then
/// the route on the blocking pool (it may wait on the model thread).
pub(super) async fn handle(
    ctx: Arc<Context>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let method = match request.method().as_str() {
        "GET" => Verb::Get,
        "POST" => Verb::Post,
        other => Verb::Other(other.to_string()),
    };
    let path = request.uri().path().to_string();
    let answer =
        if !agentrl_gym::service::access::allows_headers(&ctx.options.access, request.headers()) {
            Err(ApiError {
                status: 401,
                message: "missing or wrong API key: send `Authorization: Bearer KEY`".into(),
                param: None,
            })
        } else {
            let read = agentrl_gym::service::http::read_body(
                request.into_body(),
                MAX_BODY,
                ctx.options.http.read_timeout,
            )
            .await;
            match read {
                Err((status, message)) => Err(ApiError {
                    status,
                    message,
                    param: None,
                }),
                Ok(bytes) => match String::from_utf8(bytes.to_vec()) {
                    Err(e) => Err(ApiError::bad(format!("the request body is not UTF-8: {e}"))),
                    Ok(body) => {
                        let ctx = Arc::clone(&ctx);
                        tokio::task::spawn_blocking(move || route(&ctx, &method, &path, &body))
                            .await
                            .unwrap_or_else(|e| {
                                Err(ApiError::internal(format!("the request failed: {e}")))
                            })
                    }
                },
            }
        };
    let reply = answer.unwrap_or_else(ApiError::reply);
    let content_type = if reply.json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = axum::response::Response::new(axum::body::Body::from(reply.body));
    *response.status_mut() = axum::http::StatusCode::from_u16(reply.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static(content_type),
    );
    response
}

fn route(ctx: &Context, method: &Verb, path: &str, body: &str) -> Answer {
    use Verb::{Get, Post};
    match (method, path) {
        (Get, "/health") => Ok(Reply::text("")),
        (Get, "/version") => Ok(Reply::json(&json!({ "version": ctx.options.version }))),
        (Get, "/v1/models") => models(ctx),
        (Post, "/v1/completions") => completions(ctx, body),
        (Post, "/v1/load_lora_adapter") => vllm_load_lora(ctx, body),
        (Post, "/v1/unload_lora_adapter") => vllm_unload_lora(ctx, body),
        (Post, "/generate") => sglang_generate(ctx, body),
        (Get, "/get_model_info") => model_info(ctx),
        (Get, "/get_server_info") => Ok(Reply::json(&json!({
            "version": ctx.options.version,
            "served_model_name": ctx.facts.name,
            "model_path": ctx.facts.path,
            "context_length": ctx.facts.max_seq,
            "logprobs_mode": ctx.options.logprobs_mode,
            "max_logprobs": ctx.options.max_logprobs,
        }))),
        (Post, "/update_weights_from_disk") => update_weights(ctx, body),
        (Post, "/load_lora_adapter") => sglang_load_lora(ctx, body),
        (Post, "/unload_lora_adapter") => sglang_unload_lora(ctx, body),
        _ => Err(ApiError::not_found(
            None,
            format!("no route {method} {path}"),
        )),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, ApiError> {
    serde_json::from_str(body).map_err(|e| ApiError::bad(format!("invalid request body: {e}")))
}

/// Runs `f` on the model thread, after the work queued before it.
fn on_model<T, F>(ctx: &Context, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn ServedModel, &mut ModelState) -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    ctx.work
        .send(Work::Call(Box::new(move |model, state| {
            let _ = tx.send(f(model, state));
        })))
        .map_err(|_| ApiError::internal("the model thread has stopped"))?;
    rx.recv()
        .map_err(|_| ApiError::internal("the model thread has stopped"))
}

fn generate_on_model(
    ctx: &Context,
    adapter: Option<String>,
    rows: Vec<GenerateRequest>,
    params: GenerateParams,
    needs: Needs,
) -> Result<Vec<RowOutput>, ApiError> {
    let (reply, rx) = mpsc::channel();
    ctx.work
        .send(Work::Generate(GenerateJob {
            adapter,
            rows,
            params,
            needs,
            reply,
        }))
        .map_err(|_| ApiError::internal("the model thread has stopped"))?;
    rx.recv()
        .map_err(|_| ApiError::internal("the model thread has stopped"))?
        .map_err(|e| ApiError::internal(format!("generation failed: {e:#}")))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn models(ctx: &Context) -> Answer {
    let adapters = on_model(ctx, |model, _| model.adapters())?;
    let created = now_secs();
    let card = |id: &str, root: &str, parent: Option<&str>| ModelCard {
        id: id.to_string(),
        object: "model".into(),
        created,
        owned_by: "agentrl".into(),
        root: Some(root.to_string()),
        parent: parent.map(str::to_string),
        max_model_len: Some(ctx.facts.max_seq),
    };
    let mut data = vec![card(&ctx.facts.name, &ctx.facts.path, None)];
    for (name, dir) in &adapters {
        data.push(card(name, dir, Some(&ctx.facts.name)));
    }
    Ok(Reply::json(&ModelList {
        object: "list".into(),
        data,
    }))
}

fn model_info(ctx: &Context) -> Answer {
    let version = on_model(ctx, |_, state| state.weight_version.clone())?;
    Ok(Reply::json(&json!({
        "model_path": ctx.facts.path,
        "served_model_name": ctx.facts.name,
        "tokenizer_path": Value::Null,
        "is_generation": true,
        "preferred_sampling_params": Value::Null,
        "weight_version": version,
    })))
}

/// The adapter a request names (`None` = the base model); unknown names are errors.
fn resolve_adapter(
    ctx: &Context,
    name: Option<&str>,
    param: &'static str,
    status: u16,
) -> Result<Option<String>, ApiError> {
    let Some(name) = name else { return Ok(None) };
    if name == ctx.facts.name {
        return Ok(None);
    }
    let adapters = on_model(ctx, |model, _| model.adapters())?;
    if adapters.iter().any(|(n, _)| n == name) {
        return Ok(Some(name.to_string()));
    }
    let message = format!("The model `{name}` does not exist.");
    Err(if status == 404 {
        ApiError::not_found(Some(param), message)
    } else {
        ApiError::bad_param(param, message)
    })
}

/// Token-id prompts from either form; text needs the server's tokenizer.
fn prompt_ids(
    ctx: &Context,
    prompt: Option<Prompt>,
    param: &'static str,
) -> Result<(Vec<Vec<u32>>, bool), ApiError> {
    let encode = |text: &str| -> Result<Vec<u32>, ApiError> {
        let codec = ctx.options.text.as_ref().ok_or_else(|| {
            ApiError::bad_param(
                param,
                "text prompts need a tokenizer (the model folder has no tokenizer.json); send \
                 token ids",
            )
        })?;
        codec
            .encode(text)
            .map_err(|e| ApiError::bad_param(param, format!("tokenizing the prompt: {e:#}")))
    };
    let (prompts, batch) = match prompt {
        None => return Err(ApiError::bad_param(param, format!("`{param}` is required"))),
        Some(Prompt::Ids(ids)) => (vec![ids], false),
        Some(Prompt::IdBatch(batch)) => (batch, true),
        Some(Prompt::Text(text)) => (vec![encode(&text)?], false),
        Some(Prompt::TextBatch(texts)) => (
            texts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
            true,
        ),
    };
    if prompts.is_empty() {
        return Err(ApiError::bad_param(param, "the prompt list is empty"));
    }
    for (i, ids) in prompts.iter().enumerate() {
        if ids.is_empty() {
            return Err(ApiError::bad_param(param, format!("prompt {i} is empty")));
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= ctx.facts.vocab_size) {
            return Err(ApiError::bad_param(
                param,
                format!(
                    "prompt {i}: token id {bad} is outside the vocabulary ({})",
                    ctx.facts.vocab_size
                ),
            ));
        }
    }
    Ok((prompts, batch))
}

/// A sampling parameter: the request's, else `generation_config.json`'s, else the default.
fn pick<T: Copy>(request: Option<T>, folder: Option<T>, default: T) -> (T, &'static str) {
    match (request, folder) {
        (Some(v), _) => (v, "the request"),
        (None, Some(v)) => (v, "generation_config.json"),
        (None, None) => (default, "the default"),
    }
}

/// The sampling parameters both routes share, resolved (request, then folder, then default)
/// and checked.
#[allow(clippy::too_many_arguments)]
fn resolve_sampling(
    ctx: &Context,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    repetition_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    n: Option<usize>,
    stop: Option<&Value>,
    min_tokens: (Option<usize>, &'static str),
) -> Result<SamplingParams, ApiError> {
    let defaults = &ctx.options.defaults;
    let (temperature, _) = pick(temperature, defaults.temperature, 1.0);
    let (top_p, _) = pick(top_p, defaults.top_p, 1.0);
    let (top_k, from) = pick(top_k, defaults.top_k, -1);
    if top_k < -1 {
        return Err(ApiError::bad_param(
            "top_k",
            format!("top_k must be -1 (off) or positive, got {top_k} (from {from})"),
        ));
    }
    let (min_p, from) = pick(min_p, defaults.min_p, 0.0);
    if min_p != 0.0 {
        return Err(ApiError::bad_param(
            "min_p",
            format!("min_p {min_p} (from {from}) is not supported by agentrl serve; only 0"),
        ));
    }
    let (repetition, from) = pick(repetition_penalty, defaults.repetition_penalty, 1.0);
    if repetition != 1.0 {
        return Err(ApiError::bad_param(
            "repetition_penalty",
            format!(
                "repetition_penalty {repetition} (from {from}) is not supported by agentrl \
                 serve; only 1"
            ),
        ));
    }
    for (name, value) in [
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
    ] {
        if let Some(v) = value.filter(|v| *v != 0.0) {
            return Err(ApiError::bad_param(
                name,
                format!("{name} {v} is not supported by agentrl serve; only 0"),
            ));
        }
    }
    if let Some(n) = n.filter(|n| *n != 1) {
        return Err(ApiError::bad_param(
            "n",
            format!("n = {n} is not supported; send one request per sample"),
        ));
    }
    let stop_strings = match stop {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(list)) => !list.is_empty(),
        Some(_) => true,
    };
    if stop_strings {
        return Err(ApiError::bad_param(
            "stop",
            "stop strings are not supported by agentrl serve; use stop_token_ids",
        ));
    }
    if let Some(m) = min_tokens.0.filter(|m| *m > 0) {
        return Err(ApiError::bad_param(
            min_tokens.1,
            format!("{} = {m} is not supported; only 0", min_tokens.1),
        ));
    }
    let temperature = ctx.options.force_temperature.unwrap_or(temperature);
    let params = SamplingParams {
        temperature,
        top_p,
        top_k: top_k.max(0) as usize,
    };
    params
        .validate()
        .map_err(|e| ApiError::bad(format!("{e:#}")))?;
    Ok(params)
}

fn stop_ids(ctx: &Context, requested: &[u32], with_eos: bool) -> Vec<u32> {
    let mut stop = requested.to_vec();
    if with_eos {
        stop.extend(&ctx.options.defaults.eos_token_ids);
    }
    stop.sort_unstable();
    stop.dedup();
    stop
}

fn seed_for(ctx: &Context, seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| {
        // A fixed sequence per server run: reproducible, and different per request.
        0x5eed_0000_0000_0000 ^ ctx.seed.fetch_add(1, Ordering::SeqCst)
    })
}

fn check_length(
    ctx: &Context,
    prompts: &[Vec<u32>],
    max_tokens: usize,
    param: &'static str,
) -> Result<(), ApiError> {
    for ids in prompts {
        let total = ids.len() + max_tokens;
        if total > ctx.facts.max_seq || (max_tokens > 0 && ids.len() >= ctx.facts.max_seq) {
            return Err(ApiError::bad_param(
                param,
                format!(
                    "This model's maximum context length is {} tokens. However, you requested \
                     {total} tokens ({} in the prompt, {max_tokens} in the completion). Please \
                     reduce the length of the prompt or completion.",
                    ctx.facts.max_seq,
                    ids.len()
                ),
            ));
        }
    }
    Ok(())
}

fn check_logprobs(ctx: &Context, param: &'static str, k: Option<usize>) -> Result<(), ApiError> {
    match k {
        Some(k) if k > ctx.options.max_logprobs => Err(ApiError::bad_param(
            param,
            format!(
                "{param} = {k} exceeds the server's maximum of {}",
                ctx.options.max_logprobs
            ),
        )),
        _ => Ok(()),
    }
}

/// JSON has no infinities: vLLM clips log-probs at -9999.
fn clip(logprob: f64) -> f64 {
    if logprob.is_nan() {
        LOGPROB_FLOOR
    } else {
        logprob.max(LOGPROB_FLOOR)
    }
}

fn token_name(ctx: &Context, id: u32, as_ids: bool) -> String {
    match (&ctx.options.text, as_ids) {
        (Some(codec), false) => codec
            .decode(&[id])
            .unwrap_or_else(|_| format!("token_id:{id}")),
        _ => format!("token_id:{id}"),
    }
}

fn decode_text(ctx: &Context, ids: &[u32]) -> String {
    ctx.options
        .text
        .as_ref()
        .and_then(|codec| codec.decode(ids).ok())
        .unwrap_or_default()
}

fn completions(ctx: &Context, body: &str) -> Answer {
    let req: CompletionRequest = parse(body)?;
    if req.stream == Some(true) {
        return Err(ApiError::bad_param("stream", "stream is not supported"));
    }
    if req.echo == Some(true) {
        return Err(ApiError::bad_param(
            "echo",
            "echo is not supported; use prompt_logprobs",
        ));
    }
    let adapter = resolve_adapter(ctx, req.model.as_deref(), "model", 404)?;
    let (prompts, _) = prompt_ids(ctx, req.prompt.clone(), "prompt")?;
    let sampling = resolve_sampling(
        ctx,
        req.temperature,
        req.top_p,
        req.top_k,
        req.min_p,
        req.repetition_penalty,
        req.presence_penalty,
        req.frequency_penalty,
        req.n,
        req.stop.as_ref(),
        (req.min_tokens, "min_tokens"),
    )?;
    let (max_tokens, _) = pick(req.max_tokens, ctx.options.defaults.max_new_tokens, 16);
    check_length(ctx, &prompts, max_tokens, "max_tokens")?;
    check_logprobs(ctx, "logprobs", req.logprobs)?;
    check_logprobs(ctx, "prompt_logprobs", req.prompt_logprobs)?;
    let requested_stop = req.stop_token_ids.clone().unwrap_or_default();
    let params = GenerateParams {
        sampling,
        max_tokens,
        stop: stop_ids(ctx, &requested_stop, req.ignore_eos != Some(true)),
    };
    let seed = seed_for(ctx, req.seed);
    let rows: Vec<GenerateRequest> = prompts
        .iter()
        .map(|p| GenerateRequest {
            prompt: p.clone(),
            seed,
            session: None,
        })
        .collect();
    let needs = Needs {
        top_logprobs: req.logprobs.unwrap_or(0),
        prompt_logprobs: req.prompt_logprobs.map(|k| (0, k)),
    };
    let outputs = generate_on_model(ctx, adapter, rows, params, needs)?;
    let as_ids = req.return_tokens_as_token_ids == Some(true);
    let mut usage = Usage::default();
    let mut choices = Vec::with_capacity(outputs.len());
    for (index, (out, prompt)) in outputs.iter().zip(&prompts).enumerate() {
        let c = &out.completion;
        usage.prompt_tokens += prompt.len();
        usage.completion_tokens += c.tokens.len();
        let logprobs = req.logprobs.map(|_| {
            let tokens: Vec<String> = c
                .tokens
                .iter()
                .map(|&t| token_name(ctx, t, as_ids))
                .collect();
            let mut offset = 0;
            let text_offset = tokens
                .iter()
                .map(|t| {
                    let at = offset;
                    offset += t.len();
                    at
                })
                .collect();
            let top_logprobs = c
                .tokens
                .iter()
                .zip(&c.logprobs)
                .zip(&out.top)
                .map(|((&token, &lp), alternatives)| {
                    let mut map = BTreeMap::new();
                    map.insert(token_name(ctx, token, as_ids), clip(lp as f64));
                    for &(alt, alt_lp) in alternatives {
                        map.entry(token_name(ctx, alt, as_ids))
                            .or_insert(clip(alt_lp));
                    }
                    Some(map)
                })
                .collect();
            CompletionLogprobs {
                text_offset,
                token_logprobs: c.logprobs.iter().map(|&lp| Some(clip(lp as f64))).collect(),
                tokens,
                top_logprobs,
            }
        });
        let stop_reason = match (c.finish, c.tokens.last()) {
            (FinishReason::Stop, Some(last)) if requested_stop.contains(last) => Some(json!(last)),
            _ => None,
        };
        let prompt_logprobs = req.prompt_logprobs.map(|_| {
            out.prompt
                .iter()
                .map(|entry| {
                    entry.as_ref().map(|e| {
                        let mut map = BTreeMap::new();
                        map.insert(
                            e.token.to_string(),
                            PromptLogprob {
                                logprob: clip(e.logprob),
                                rank: Some(e.rank),
                                decoded_token: Some(token_name(ctx, e.token, as_ids)),
                            },
                        );
                        for (rank, &(alt, lp)) in e.top.iter().enumerate() {
                            map.entry(alt.to_string()).or_insert(PromptLogprob {
                                logprob: clip(lp),
                                rank: Some(rank + 1),
                                decoded_token: Some(token_name(ctx, alt, as_ids)),
                            });
                        }
                        map
                    })
                })
                .collect()
        });
        let with_ids = req.return_token_ids == Some(true);
        choices.push(CompletionChoice {
            index,
            text: decode_text(ctx, &c.tokens),
            logprobs,
            finish_reason: Some(
                match c.finish {
                    FinishReason::Stop => "stop",
                    FinishReason::Length => "length",
                }
                .into(),
            ),
            stop_reason,
            token_ids: with_ids.then(|| c.tokens.clone()),
            prompt_token_ids: with_ids.then(|| prompt.clone()),
            prompt_logprobs,
        });
    }
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    let id = ctx.ids.fetch_add(1, Ordering::SeqCst);
    Ok(Reply::json(&CompletionResponse {
        id: format!("cmpl-{id:016x}"),
        object: "text_completion".into(),
        created: now_secs(),
        model: req.model.unwrap_or_else(|| ctx.facts.name.clone()),
        choices,
        usage,
    }))
}

fn sglang_generate(ctx: &Context, body: &str) -> Answer {
    let req: GenerateRequestBody = parse(body)?;
    if req.stream == Some(true) {
        return Err(ApiError::bad_param("stream", "stream is not supported"));
    }
    let (prompts, batch) = match (req.input_ids.clone(), req.text.clone()) {
        (Some(ids), None) => prompt_ids(ctx, Some(ids), "input_ids")?,
        (None, Some(text)) => prompt_ids(ctx, Some(text), "text")?,
        _ => {
            return Err(ApiError::bad(
                "exactly one of `input_ids` and `text` is required",
            ))
        }
    };
    let sp: SglangSampling = req.sampling_params.clone().unwrap_or_default();
    let sampling = resolve_sampling(
        ctx,
        sp.temperature,
        sp.top_p,
        sp.top_k,
        sp.min_p,
        sp.repetition_penalty,
        sp.presence_penalty,
        sp.frequency_penalty,
        sp.n,
        sp.stop.as_ref(),
        (sp.min_new_tokens, "min_new_tokens"),
    )?;
    let adapter = resolve_adapter(ctx, req.lora_path.as_deref(), "lora_path", 400)?;
    let (max_tokens, _) = pick(sp.max_new_tokens, ctx.options.defaults.max_new_tokens, 128);
    check_length(ctx, &prompts, max_tokens, "max_new_tokens")?;
    let return_logprob = req.return_logprob == Some(true);
    let top_k = if return_logprob {
        req.top_logprobs_num.unwrap_or(0)
    } else {
        0
    };
    check_logprobs(ctx, "top_logprobs_num", Some(top_k))?;
    // SGLang: `ignore_eos` disables the stop ids as well as EOS.
    let stop = if sp.ignore_eos == Some(true) {
        Vec::new()
    } else {
        stop_ids(ctx, &sp.stop_token_ids.clone().unwrap_or_default(), true)
    };
    let params = GenerateParams {
        sampling,
        max_tokens,
        stop,
    };
    let start = match req.logprob_start_len {
        Some(s) if return_logprob && s >= 0 => Some(s as usize),
        _ => None,
    };
    let seed = seed_for(ctx, sp.sampling_seed);
    let rows: Vec<GenerateRequest> = prompts
        .iter()
        .map(|p| GenerateRequest {
            prompt: p.clone(),
            seed,
            session: None,
        })
        .collect();
    let needs = Needs {
        top_logprobs: top_k,
        prompt_logprobs: start.map(|s| (s, top_k)),
    };
    let outputs = generate_on_model(ctx, adapter, rows, params, needs)?;
    let triple = |lp: Option<f64>, id: u32| json!([lp.map(clip), id, Value::Null]);
    let mut results = Vec::with_capacity(outputs.len());
    for (out, prompt) in outputs.iter().zip(&prompts) {
        let c = &out.completion;
        let finish = match (c.finish, c.tokens.last()) {
            (FinishReason::Stop, Some(&last)) => json!({ "type": "stop", "matched": last }),
            _ => json!({ "type": "length", "length": max_tokens }),
        };
        let id = ctx.ids.fetch_add(1, Ordering::SeqCst);
        let mut meta = json!({
            "id": format!("{id:016x}"),
            "finish_reason": finish,
            "prompt_tokens": prompt.len(),
            "completion_tokens": c.tokens.len(),
            "cached_tokens": 0,
            "weight_version": out.weight_version,
        });
        if return_logprob {
            meta["output_token_logprobs"] = c
                .tokens
                .iter()
                .zip(&c.logprobs)
                .map(|(&t, &lp)| triple(Some(lp as f64), t))
                .collect();
            if top_k > 0 {
                meta["output_top_logprobs"] = out
                    .top
                    .iter()
                    .map(|alts| {
                        alts.iter()
                            .map(|&(t, lp)| triple(Some(lp), t))
                            .collect::<Vec<Value>>()
                    })
                    .collect();
            }
            if let Some(start) = start {
                let first = start.max(1).min(prompt.len());
                let mut entries: Vec<Value> = Vec::new();
                if start == 0 {
                    entries.push(triple(None, prompt[0]));
                }
                for (entry, &token) in out.prompt.iter().flatten().zip(&prompt[first..]) {
                    entries.push(triple(Some(entry.logprob), token));
                }
                meta["input_token_logprobs"] = Value::Array(entries);
            }
        }
        results.push(json!({
            "text": decode_text(ctx, &c.tokens),
            "output_ids": c.tokens,
            "meta_info": meta,
        }));
    }
    if batch {
        Ok(Reply::json(&results))
    } else {
        Ok(Reply::json(&results.pop().unwrap_or(Value::Null)))
    }
}

fn vllm_load_lora(ctx: &Context, body: &str) -> Answer {
    let req: LoadLoraRequest = parse(body)?;
    check_lora_names(ctx, &req.lora_name, Some(&req.lora_path))?;
    let name = req.lora_name.clone();
    let inplace = req.load_inplace == Some(true);
    let path = req.lora_path.clone();
    on_model(ctx, move |model, _| {
        if !inplace && model.adapters().iter().any(|(n, _)| *n == name) {
            return Err(ApiError::bad_param(
                "lora_name",
                format!(
                    "The lora adapter '{name}' has already been loaded. If you want to load \
                     the adapter in place, set 'load_inplace' to True."
                ),
            ));
        }
        model
            .load_lora(&name, Path::new(&path))
            .map_err(|e| ApiError::bad_param("lora_path", format!("{e:#}")))
    })??;
    Ok(Reply::text(format!(
        "Success: LoRA adapter '{}' added successfully.",
        req.lora_name
    )))
}

fn vllm_unload_lora(ctx: &Context, body: &str) -> Answer {
    let req: UnloadLoraRequest = parse(body)?;
    check_lora_names(ctx, &req.lora_name, None)?;
    let name = req.lora_name.clone();
    on_model(ctx, move |model, _| {
        model.unload_lora(&name).map_err(|_| {
            ApiError::not_found(
                Some("lora_name"),
                format!("The lora adapter '{name}' cannot be found."),
            )
        })
    })??;
    Ok(Reply::text(format!(
        "Success: LoRA adapter '{}' removed successfully.",
        req.lora_name
    )))
}

fn check_lora_names(ctx: &Context, name: &str, path: Option<&str>) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::bad_param("lora_name", "lora_name is required"));
    }
    if name == ctx.facts.name {
        return Err(ApiError::bad_param(
            "lora_name",
            format!("{name:?} is the base model's name"),
        ));
    }
    if path.is_some_and(str::is_empty) {
        return Err(ApiError::bad_param("lora_path", "lora_path is required"));
    }
    Ok(())
}

/// SGLang's adapter routes answer `{success, error_message, loaded_adapters}`.
fn sglang_adapter_answer(result: Result<Vec<(String, String)>, String>) -> Reply {
    match result {
        Ok(adapters) => Reply::json(&json!({
            "success": true,
            "error_message": "",
            "loaded_adapters": adapters.into_iter().collect::<BTreeMap<_, _>>(),
        })),
        Err(message) => Reply::json_status(
            400,
            &json!({ "success": false, "error_message": message, "message": message }),
        ),
    }
}

fn sglang_load_lora(ctx: &Context, body: &str) -> Answer {
    let req: LoadLoraRequest = parse(body)?;
    check_lora_names(ctx, &req.lora_name, Some(&req.lora_path))?;
    let result = on_model(ctx, move |model, _| {
        if model.adapters().iter().any(|(n, _)| *n == req.lora_name) {
            return Err(format!(
                "LoRA adapter {:?} is already loaded; unload it first",
                req.lora_name
            ));
        }
        model
            .load_lora(&req.lora_name, Path::new(&req.lora_path))
            .map_err(|e| format!("{e:#}"))?;
        Ok(model.adapters())
    })?;
    Ok(sglang_adapter_answer(result))
}

fn sglang_unload_lora(ctx: &Context, body: &str) -> Answer {
    let req: UnloadLoraRequest = parse(body)?;
    check_lora_names(ctx, &req.lora_name, None)?;
    let result = on_model(ctx, move |model, _| {
        model
            .unload_lora(&req.lora_name)
            .map_err(|e| format!("{e:#}"))?;
        Ok(model.adapters())
    })?;
    Ok(sglang_adapter_answer(result))
}

fn update_weights(ctx: &Context, body: &str) -> Answer {
    let req: UpdateWeightsRequest = parse(body)?;
    if req.model_path.is_empty() {
        return Err(ApiError::bad_param("model_path", "model_path is required"));
    }
    let result = on_model(ctx, move |model, state| {
        model
            .load_full_weights(Path::new(&req.model_path))
            .map_err(|e| format!("{e:#}"))?;
        if let Some(version) = req.weight_version {
            state.weight_version = version;
        }
        Ok::<_, String>(())
    })?;
    Ok(match result {
        Ok(()) => Reply::json(&json!({
            "success": true,
            "message": "Succeeded to update model weights.",
            "num_paused_requests": 0,
        })),
        Err(message) => Reply::json_status(400, &json!({ "success": false, "message": message })),
    })
}
