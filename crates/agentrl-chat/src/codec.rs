//! The tool-call codec: `<tool_call>{json}</tool_call>` spans in sampled text ⇄ gym tool calls.
//!
//! Decoding sits right after sampling: the engine's ids are decoded (special tokens kept), the
//! reply is split into an optional `<think>` block, visible content and tool-call spans, and each
//! span becomes a [`ToolCall`] or a typed [`ToolCallError`]. [`ParsedTurn::actions`] hands the
//! gym [`Action::Call`] or [`Action::Malformed`]; the gym turns a malformed action into a
//! format-error observation. Encoding ([`format_tool_call`]) writes a call the way Qwen's
//! template renders it, so a scripted or replayed turn has the same text as a rendered one.

use agentrl_gym::types::{Action, ToolCall};
use serde_json::Value;

use crate::error::Result;
use crate::message::assistant_message;
use crate::qwen::QwenTokenizer;
use crate::template::python_json;
use crate::tools::{bugfix_tool_specs, ArgumentError, ToolSpec};

pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
/// Text forms of the tokens that end a turn; stripped from the end of a decoded reply.
const END_MARKERS: [&str; 2] = ["<|im_end|>", "<|endoftext|>"];

/// Why one tool-call span (or a whole reply) is not a usable call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolCallError {
    #[error("no <tool_call> in the reply")]
    NoToolCall,
    #[error("<tool_call> is never closed by </tool_call>")]
    Unclosed { raw: String },
    #[error("tool call is not valid JSON: {message}")]
    InvalidJson { raw: String, message: String },
    #[error("tool call must be a JSON object {{\"name\": ..., \"arguments\": {{...}}}}")]
    NotAnObject { raw: String },
    #[error("tool call has no string `name`")]
    MissingName { raw: String },
    #[error("unknown tool `{name}` (known: {})", known.join(", "))]
    UnknownTool { name: String, known: Vec<String> },
    #[error(transparent)]
    BadArguments(#[from] ArgumentError),
}

/// One `<tool_call>` span as found in the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSpan {
    /// The text between `<tool_call>` and `</tool_call>` (or to the end, if unclosed).
    pub raw: String,
    /// `name` and `arguments` if the span held a JSON object with a string `name`, whether or
    /// not the tool and its arguments are valid (used to re-render the turn faithfully).
    pub json: Option<ToolCall>,
    pub result: std::result::Result<ToolCall, ToolCallError>,
}

/// A decoded assistant reply, split the way Qwen's template splits it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTurn {
    /// The reply text without a trailing `<|im_end|>` / `<|endoftext|>`.
    pub text: String,
    /// Text of the `<think>` block, as sampled (not stripped), if the reply has `</think>`.
    pub reasoning: Option<String>,
    /// Visible text after the think block and before the first `<tool_call>`.
    pub content: String,
    pub calls: Vec<CallSpan>,
}

impl ParsedTurn {
    /// One action per tool-call span; a reply without any span is one malformed action.
    pub fn actions(&self) -> Vec<Action> {
        if self.calls.is_empty() {
            return vec![Action::Malformed {
                raw: self.text.clone(),
                reason: ToolCallError::NoToolCall.to_string(),
            }];
        }
        self.calls
            .iter()
            .map(|span| match &span.result {
                Ok(call) => Action::Call(call.clone()),
                Err(err) => Action::Malformed {
                    raw: span.raw.clone(),
                    reason: err.to_string(),
                },
            })
            .collect()
    }

    /// The first action of the reply: what a one-call-per-turn environment executes.
    pub fn first_action(&self) -> Action {
        self.actions()
            .into_iter()
            .next()
            .unwrap_or_else(|| Action::Malformed {
                raw: self.text.clone(),
                reason: ToolCallError::NoToolCall.to_string(),
            })
    }

    /// The assistant message this reply becomes in the conversation (HF format), so the next
    /// prompt is rendered by the template rather than pasted. Reasoning is passed with its
    /// surrounding newlines stripped and content with its newline before the first call
    /// removed, as the template adds those back. If any span is not a JSON object with a
    /// `name`, the calls cannot be structured and the text after `</think>` is kept verbatim
    /// as content.
    pub fn to_message(&self) -> Value {
        let reasoning = self.reasoning.as_deref().map(|r| r.trim_matches('\n'));
        let structured: Option<Vec<ToolCall>> =
            self.calls.iter().map(|span| span.json.clone()).collect();
        match structured {
            Some(calls) if !calls.is_empty() => {
                let content = self.content.trim_start_matches('\n').trim_end_matches('\n');
                assistant_message(content, reasoning, &calls)
            }
            Some(_) => assistant_message(self.content.trim_start_matches('\n'), reasoning, &[]),
            None => {
                let after_think = match self.text.rfind(THINK_CLOSE) {
                    Some(at) => &self.text[at + THINK_CLOSE.len()..],
                    None => self.text.as_str(),
                };
                assistant_message(after_think.trim_start_matches('\n'), reasoning, &[])
            }
        }
    }
}

/// Parses replies against a fixed set of tool schemas.
#[derive(Debug, Clone)]
pub struct ToolCallCodec {
    specs: Vec<ToolSpec>,
}

impl ToolCallCodec {
    /// A codec for tools given in OpenAI function format (the same list the template gets).
    pub fn new(tools: &[Value]) -> Result<Self> {
        let specs = tools
            .iter()
            .map(ToolSpec::from_openai)
            .collect::<Result<_>>()?;
        Ok(Self { specs })
    }

    /// The codec for the BugFix gym's tools.
    pub fn bugfix() -> Result<Self> {
        Self::new(&bugfix_tool_specs())
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Decodes sampled ids (special tokens kept, so `<tool_call>` and `<|im_end|>` are visible)
    /// and parses the reply.
    pub fn parse_ids(&self, tokenizer: &QwenTokenizer, ids: &[u32]) -> Result<ParsedTurn> {
        Ok(self.parse_text(&tokenizer.decode(ids, false)?))
    }

    /// Splits a reply into reasoning, content and tool-call spans, and checks each call.
    pub fn parse_text(&self, text: &str) -> ParsedTurn {
        let mut text = text;
        while let Some(stripped) = END_MARKERS.iter().find_map(|m| text.strip_suffix(m)) {
            text = stripped;
        }
        // Mirrors the template: reasoning is what precedes the first `</think>` (after any
        // `<think>`), the reply proper is what follows the last `</think>`.
        let (reasoning, rest) = match (text.find(THINK_CLOSE), text.rfind(THINK_CLOSE)) {
            (Some(first), Some(last)) => {
                let before = &text[..first];
                let reasoning = match before.rfind(THINK_OPEN) {
                    Some(open) => &before[open + THINK_OPEN.len()..],
                    None => before,
                };
                (
                    Some(reasoning.to_string()),
                    &text[last + THINK_CLOSE.len()..],
                )
            }
            _ => (None, text),
        };
        let content_end = rest.find(TOOL_CALL_OPEN).unwrap_or(rest.len());
        let content = rest[..content_end].to_string();
        let mut calls = Vec::new();
        let mut cursor = content_end;
        while let Some(offset) = rest[cursor..].find(TOOL_CALL_OPEN) {
            let body_start = cursor + offset + TOOL_CALL_OPEN.len();
            match rest[body_start..].find(TOOL_CALL_CLOSE) {
                Some(len) => {
                    calls.push(self.parse_span(&rest[body_start..body_start + len]));
                    cursor = body_start + len + TOOL_CALL_CLOSE.len();
                }
                None => {
                    let raw = rest[body_start..].to_string();
                    calls.push(CallSpan {
                        raw: raw.clone(),
                        json: None,
                        result: Err(ToolCallError::Unclosed { raw }),
                    });
                    break;
                }
            }
        }
        ParsedTurn {
            text: text.to_string(),
            reasoning,
            content,
            calls,
        }
    }

    fn parse_span(&self, raw: &str) -> CallSpan {
        let fail = |err: ToolCallError| CallSpan {
            raw: raw.to_string(),
            json: None,
            result: Err(err),
        };
        let value: Value = match serde_json::from_str(raw.trim()) {
            Ok(value) => value,
            Err(err) => {
                return fail(ToolCallError::InvalidJson {
                    raw: raw.to_string(),
                    message: err.to_string(),
                })
            }
        };
        let Some(object) = value.as_object() else {
            return fail(ToolCallError::NotAnObject {
                raw: raw.to_string(),
            });
        };
        let Some(name) = object.get("name").and_then(Value::as_str) else {
            return fail(ToolCallError::MissingName {
                raw: raw.to_string(),
            });
        };
        // OpenAI-style string arguments holding a JSON object are accepted as that object.
        let arguments = match object.get("arguments") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(parsed) if parsed.is_object() => parsed,
                _ => Value::String(text.clone()),
            },
            Some(other) => other.clone(),
        };
        let call = ToolCall {
            name: name.to_string(),
            arguments,
        };
        let result = match self.specs.iter().find(|spec| spec.name == call.name) {
            None => Err(ToolCallError::UnknownTool {
                name: call.name.clone(),
                known: self.specs.iter().map(|s| s.name.clone()).collect(),
            }),
            Some(spec) => spec
                .check_arguments(&call.arguments)
                .map(|()| call.clone())
                .map_err(ToolCallError::from),
        };
        CallSpan {
            raw: raw.to_string(),
            json: Some(call),
            result,
        }
    }
}

/// A call as Qwen's template renders it: `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`
/// (Python `json.dumps` spacing, key order kept).
pub fn format_tool_call(call: &ToolCall) -> String {
    format!(
        "{TOOL_CALL_OPEN}\n{{\"name\": \"{}\", \"arguments\": {}}}\n{TOOL_CALL_CLOSE}",
        call.name,
        python_json(&call.arguments)
    )
}
