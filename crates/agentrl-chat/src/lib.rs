//! agentrl-chat: the text side of real language models.
//!
//! It sits between the gym (plain tool calls and observations) and the model (token ids):
//!
//! ```text
//! messages + tools ──ChatTemplate::render──▶ prompt text ──QwenTokenizer::encode──▶ ids ──▶ model
//! model ──▶ sampled ids ──ToolCallCodec::parse_ids──▶ ParsedTurn ──▶ gym Action (or Malformed)
//! gym Observation ──▶ `tool` message ──▶ next render;  DriftChecker: does re-rendering change ids?
//! ```
//!
//! * [`qwen`]: the HF `tokenizers` tokenizer loaded from a model folder's `tokenizer.json`, or
//!   built from a GGUF file's metadata ([`gguf`] reads the header, [`gguf_tokenizer`] maps it).
//! * [`template`]: the model's own Jinja chat template, rendered with minijinja the way
//!   transformers' `apply_chat_template` renders it (its `pyjson` part: Python's `json.dumps`).
//! * [`tools`]: the BugFix tool schemas (OpenAI function format) and argument validation.
//! * [`codec`]: `<tool_call>{json}</tool_call>` spans ⇄ gym [`agentrl_gym::types::ToolCall`]s.
//! * [`drift`]: the retokenization drift check.
//! * [`assets`]: where tests find the shared Qwen3 assets (and fail under CI without them).
//! * [`chat_codec`]: the [`ChatCodec`] interface the rollout driver uses.
//! * [`qwen3_codec`]: [`Qwen3Codec`], the `ChatCodec` of Qwen3 chat episodes: prompt, tool
//!   results and demonstrations rendered by the model's own template, token in, token out.
//! * [`tiny`]: TinyAgent's closed word-level vocabulary, observation renderer, call format
//!   and action grammar.
//!
//! It holds no tensors and no model weights.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod assets;
pub mod chat_codec;
pub mod codec;
pub mod drift;
pub mod error;
pub mod gguf;
pub mod gguf_tokenizer;
pub mod message;
pub mod qwen;
pub mod qwen3_codec;
pub mod template;
pub mod tiny;
pub mod tools;

pub use assets::{
    find_qwen3_assets, find_smollm2_gguf, qwen3_assets_for_tests, resolve_model_path,
    smollm2_gguf_for_tests,
};
pub use chat_codec::ChatCodec;
pub use error::ChatError;
pub use qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
