//! # agentrl-chat: the text side of real language models.
//!
//! It sits between the gym (plain tool calls and observations) and the model (token ids):
//!
//! ```text
//! messages + tools ──ChatTemplate::render──▶ prompt text ──QwenTokenizer::encode──▶ ids ──▶ model
//! model ──▶ sampled ids ──ToolCallCodec::parse_ids──▶ ParsedTurn ──▶ gym Action (or Malformed)
//! gym Observation ──▶ `tool` message ──▶ next render;  DriftChecker: does re-rendering change ids?
//! ```
//!
//! Where it sits in task → episode → batch → loss → update: inside the episode. The rollout
//! driver asks a [`ChatCodec`] for the ids of the prompt and of each tool result, and for the
//! action that the sampled ids express; the episode it records is these ids. Batches, losses
//! and updates never see text.
//!
//! A user starts from a codec: [`tiny::TinyCodec`] (TinyAgent's closed word-level vocabulary
//! and action grammar) or [`Qwen3Codec`] (a real model's own tokenizer and chat template, from
//! its model folder). [`codec::ToolCallCodec`] parses `<tool_call>{json}</tool_call>` turns.
//!
//! ```rust
//! use agentrl_chat::codec::ToolCallCodec;
//! use agentrl_chat::tiny::TinyCodec;
//! use agentrl_chat::ChatCodec;
//! use agentrl_gym::{Action, Split, TaskSet, ToolCall};
//!
//! let tasks = TaskSet::builtin()?;
//! let first = tasks.split(Split::Train)[0].observation();
//! // Through the trait, as the rollout driver sees any codec.
//! let codec: &dyn ChatCodec = &TinyCodec::for_gym();
//! let prompt = codec.prompt_ids(&first)?; // the task, as ids the policy reads
//! assert!(!prompt.is_empty());
//!
//! // A call as the ids a policy would sample, and back.
//! let submit = ToolCall { name: "submit".into(), arguments: serde_json::json!({}) };
//! let ids = codec.encode_call(&submit)?;
//! assert_eq!(codec.parse_action(&ids, &first), Action::Call(submit.clone()));
//!
//! // A language model's turn, as text.
//! let turn = ToolCallCodec::bugfix()?.parse_text("<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>");
//! assert_eq!(turn.first_action(), Action::Call(submit));
//! # anyhow::Ok(())
//! ```
//!
//! The modules:
//! * [`qwen`]: the HF `tokenizers` tokenizer loaded from a model folder's `tokenizer.json`, or
//!   built from a GGUF file's metadata (`gguf` reads the header, `gguf_tokenizer` maps it).
//! * [`template`]: the model's own Jinja chat template, rendered with minijinja the way
//!   transformers' `apply_chat_template` renders it (its `pyjson` part: Python's `json.dumps`).
//! * [`tools`]: the BugFix tool schemas (OpenAI function format) and argument validation.
//! * [`codec`]: `<tool_call>{json}</tool_call>` spans ⇄ gym [`agentrl_gym::ToolCall`]s.
//! * `drift`: the retokenization drift check.
//! * `assets`: where tests find the shared Qwen3 assets (and fail under CI without them).
//! * [`ChatCodec`]: the interface the rollout driver uses.
//! * [`qwen3_codec`]: [`Qwen3Codec`], the `ChatCodec` of Qwen3 chat episodes: prompt, tool
//!   results and demonstrations rendered by the model's own template, token in, token out.
//! * [`tiny`]: TinyAgent's closed word-level vocabulary, observation renderer, call format
//!   and action grammar.
//!
//! The modules in plain type are internals, hidden from these docs (public for the tests, the
//! other crates and the binary). It holds no tensors and no model weights.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod codec;
pub mod message;
pub mod qwen;
pub mod qwen3_codec;
pub mod template;
pub mod tiny;
pub mod tools;

mod chat_codec;
mod error;

// Internals, public for the integration tests (crates/agentrl-chat/tests/), the other crates
// and the binary.
#[doc(hidden)]
pub mod assets;
#[doc(hidden)]
pub mod drift;
#[doc(hidden)]
pub mod gguf;
#[doc(hidden)]
pub mod gguf_tokenizer;

pub use assets::{find_qwen3_assets, resolve_model_path};
// Test helpers (they fail under CI when the shared assets are missing).
#[doc(hidden)]
pub use assets::{find_smollm2_gguf, qwen3_assets_for_tests, smollm2_gguf_for_tests};
pub use chat_codec::ChatCodec;
pub use error::ChatError;
pub use qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
