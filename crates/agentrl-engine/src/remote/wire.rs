//! The JSON bodies of the two inference-server APIs the remote engine speaks and
//! `agentrl serve` answers: vLLM's OpenAI-compatible `/v1/completions` and SGLang's native
//! `/generate`, plus their model-info and weight-sync routes.
//!
//! Where it sits: [`super::RemoteEngine`] serialises requests and parses responses with these
//! types; [`crate::serve`] parses the same requests and writes the same responses, so the
//! loopback tests exercise exactly what goes over the wire. The field names and meanings follow
//! vLLM's `entrypoints/openai/completion/protocol.py` and SGLang's
//! `docs/basic_usage/sampling_params.md` (see `../shared/ENGINES.md`). Every request field is an
//! `Option`: the client fills every one (omitting none is the point: a server fills what is
//! omitted from `generation_config.json`), the server must know which ones were omitted.
//! Unknown fields are ignored on both sides, as vLLM and SGLang do.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// vLLM clips `-inf` log-probs to this value (JSON has no infinities).
pub const LOGPROB_FLOOR: f64 = -9999.0;

/// A `prompt` (vLLM) or `input_ids`/`text` (SGLang): token ids or text, one or a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Ids(Vec<u32>),
    IdBatch(Vec<Vec<u32>>),
    Text(String),
    TextBatch(Vec<String>),
}

/// `POST /v1/completions` (vLLM). vLLM's extra fields sit at the top level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// `-1` (or `0`) = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    /// Stop strings (a string or a list); only an empty list is accepted by `agentrl serve`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_stop_str_in_output: Option<bool>,
    /// Alternatives per sampled token; the sampled token's own log-prob is always included, so
    /// `0` = the sampled token only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Adds `choices[i].token_ids` and `prompt_token_ids` (vLLM ≥ 0.10.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_token_ids: Option<bool>,
    /// `logprobs.tokens` become `"token_id:{id}"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_tokens_as_token_ids: Option<bool>,
}

/// One prompt token's entry of `prompt_logprobs` (vLLM's `Logprob`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptLogprob {
    pub logprob: f64,
    #[serde(default)]
    pub rank: Option<usize>,
    #[serde(default)]
    pub decoded_token: Option<String>,
}

/// `choices[i].logprobs` (OpenAI's completion log-probs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionLogprobs {
    pub text_offset: Vec<usize>,
    pub token_logprobs: Vec<Option<f64>>,
    pub tokens: Vec<String>,
    pub top_logprobs: Vec<Option<BTreeMap<String, f64>>>,
}

/// One entry of `choices`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop`, `length` or `abort`.
    pub finish_reason: Option<String>,
    /// The stop token id (or string) that ended the completion; null for EOS and length.
    pub stop_reason: Option<Value>,
    pub token_ids: Option<Vec<u32>>,
    pub prompt_token_ids: Option<Vec<u32>>,
    /// Keyed by token id as a string; the first entry is null (no prefix to condition on).
    pub prompt_logprobs: Option<Vec<Option<BTreeMap<String, PromptLogprob>>>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// The body of a `/v1/completions` response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: Usage,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// The base model's path, or a LoRA adapter's folder.
    pub root: Option<String>,
    /// For a LoRA adapter: the base model's name.
    pub parent: Option<String>,
    pub max_model_len: Option<usize>,
}

/// `POST /v1/load_lora_adapter` (vLLM; SGLang's `/load_lora_adapter` takes the same two names).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadLoraRequest {
    pub lora_name: String,
    pub lora_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_inplace: Option<bool>,
}

/// `POST /v1/unload_lora_adapter`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnloadLoraRequest {
    pub lora_name: String,
}

/// SGLang's `sampling_params`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SglangSampling {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Value>,
    /// In SGLang, `ignore_eos` also disables `stop_token_ids`; the client leaves it false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_new_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// Keep the stop token in the output instead of trimming it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_stop_trim: Option<bool>,
    /// Per-request seed (SGLang ≥ 0.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
}

/// `POST /generate` (SGLang).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateRequestBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_ids: Option<Prompt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<Prompt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_params: Option<SglangSampling>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_logprob: Option<bool>,
    /// `-1` = output tokens only; `0` = every prompt token too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprob_start_len: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs_num: Option<usize>,
    /// The name of a loaded LoRA adapter to sample with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

/// `meta_info.finish_reason`: `{"type": "stop", "matched": id}`, `{"type": "length",
/// "length": n}` or `{"type": "abort", "message": ...}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SglangFinish {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One `[logprob, token_id, text]` triple of SGLang's log-prob lists (logprob null for the
/// first prompt token).
pub type SglangTokenLogprob = (Option<f64>, u32, Option<String>);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SglangMetaInfo {
    pub id: String,
    pub finish_reason: Option<SglangFinish>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// A string on SGLang (`"default"` until a sync names one); a number is accepted too.
    pub weight_version: Option<Value>,
    pub output_token_logprobs: Option<Vec<SglangTokenLogprob>>,
    pub input_token_logprobs: Option<Vec<SglangTokenLogprob>>,
}

/// One generation of a `/generate` response (a list of these for a batch).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateResponseBody {
    pub text: String,
    pub output_ids: Vec<u32>,
    pub meta_info: SglangMetaInfo,
}

/// `POST /update_weights_from_disk` (SGLang).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateWeightsRequest {
    pub model_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

/// The answer of SGLang's weight and adapter routes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SuccessResponse {
    pub success: bool,
    pub message: String,
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: u16,
}

/// The message of an error body, or the body itself when it is not one (older vLLM puts the
/// fields at the top level; SGLang answers `{"message": ...}` or text).
pub fn error_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        for pointer in ["/error/message", "/message", "/error_message", "/detail"] {
            if let Some(text) = value.pointer(pointer).and_then(Value::as_str) {
                return text.to_string();
            }
        }
    }
    let trimmed = body.trim();
    if trimmed.chars().count() > 500 {
        format!("{}…", trimmed.chars().take(500).collect::<String>())
    } else {
        trimmed.to_string()
    }
}
