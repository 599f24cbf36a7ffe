//! Chat messages as the template reads them, built from gym values.
//!
//! The rollout keeps a conversation as a list of JSON messages (HF's format): it appends the
//! assistant turn the codec parsed and a `tool` message per observation, then renders again.

use agentrl_gym::types::ToolCall;
use serde_json::{json, Value};

/// `{"role": "system", "content": ...}`
pub fn system_message(content: &str) -> Value {
    json!({"role": "system", "content": content})
}

/// `{"role": "user", "content": ...}`
pub fn user_message(content: &str) -> Value {
    json!({"role": "user", "content": content})
}

/// A tool result, rendered by Qwen's template as `<tool_response>` inside a user turn
/// (consecutive tool messages share one turn).
pub fn tool_message(content: &str) -> Value {
    json!({"role": "tool", "content": content})
}

/// An assistant turn: visible `content`, optional `reasoning_content` (Qwen3 renders it as a
/// `<think>` block only after the last user query) and tool calls in OpenAI form
/// `{"type": "function", "function": {"name", "arguments"}}` with object arguments.
pub fn assistant_message(content: &str, reasoning: Option<&str>, calls: &[ToolCall]) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(map) = message.as_object_mut() {
        if let Some(reasoning) = reasoning {
            map.insert("reasoning_content".into(), Value::from(reasoning));
        }
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .iter()
                .map(|call| {
                    json!({"type": "function", "function": {
                        "name": call.name, "arguments": call.arguments}})
                })
                .collect();
            map.insert("tool_calls".into(), Value::from(calls));
        }
    }
    message
}
