//! The tool-call format for chat templates that know no tools (SmolLM2's ChatML template, and
//! any template that never reads `tools` or `tool_calls`): the conversation is rewritten into
//! plain `system` / `user` / `assistant` messages before the template renders it.
//!
//! Where it sits: inside [`super::ChatTemplate::render`], between the codec's messages (with
//! `tools`, assistant `tool_calls` and `tool` results) and the template. The format is Qwen2.5's
//! (and Hermes'), written out here because the template cannot:
//!
//! * **Tools** are listed at the end of the system message:
//!   `"\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n`
//!   `You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n`
//!   one JSON schema per line `\n</tools>\n\nFor each function call, return a json object with`
//!   ` function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n`
//!   `{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>"`. Without a
//!   system message, one holding only that block (less its leading blank line) is put first.
//! * **A call** is appended to the assistant content as
//!   `<tool_call>\n{"name": "read", "arguments": {…}}\n</tool_call>`, after a newline when the
//!   turn has visible content, calls separated by newlines.
//! * **Tool results** become one `user` message per run of consecutive `tool` messages, each
//!   result as `<tool_response>\n…\n</tool_response>`, results separated by a newline.
//!
//! JSON is written as Python's `json.dumps` writes it ([`super::python_json`]), as Qwen's
//! template does through `tojson`. The codec parses calls from sampled text
//! ([`crate::codec::ToolCallCodec`]) the same way whichever template rendered the prompt, and
//! its drift check re-renders through this same rewrite.

use serde_json::{json, Value};

use super::python_json;

/// The system-message block that lists the tools (Qwen2.5's wording).
fn tools_block(tools: &[Value]) -> String {
    let mut block = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        block.push('\n');
        block.push_str(&python_json(tool));
    }
    block.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": \
         <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    block
}

/// One call as the model writes it: `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`.
pub fn call_text(name: &str, arguments: &Value) -> String {
    let arguments = match arguments {
        // OpenAI's wire form carries arguments as a JSON string; the template writes them as
        // they are, as Qwen's does.
        Value::String(text) => text.clone(),
        other => python_json(other),
    };
    format!(
        "<tool_call>\n{{\"name\": {}, \"arguments\": {arguments}}}\n</tool_call>",
        python_json(&Value::from(name))
    )
}

fn text_of(message: &Value, key: &str) -> String {
    message
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `messages` and `tools` as plain messages in the format of the module doc.
pub fn rewrite(messages: &[Value], tools: Option<&[Value]>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let tools = tools.filter(|tools| !tools.is_empty());
    if let Some(tools) = tools {
        let first_is_system = messages
            .first()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            == Some("system");
        if !first_is_system {
            out.push(json!({"role": "system", "content": tools_block(tools)}));
        }
    }
    let mut pending_results: Vec<String> = Vec::new();
    let flush = |pending: &mut Vec<String>, out: &mut Vec<Value>| {
        if !pending.is_empty() {
            let content = pending
                .drain(..)
                .map(|result| format!("<tool_response>\n{result}\n</tool_response>"))
                .collect::<Vec<_>>()
                .join("\n");
            out.push(json!({"role": "user", "content": content}));
        }
    };
    for (index, message) in messages.iter().enumerate() {
        let role = text_of(message, "role");
        if role == "tool" {
            pending_results.push(text_of(message, "content"));
            continue;
        }
        flush(&mut pending_results, &mut out);
        let mut content = text_of(message, "content");
        if role == "system" && index == 0 {
            if let Some(tools) = tools {
                content = format!("{content}\n\n{}", tools_block(tools));
            }
        }
        if role == "assistant" {
            let calls: Vec<String> = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .map(|call| {
                            let function = call.get("function").unwrap_or(call);
                            call_text(
                                function
                                    .get("name")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default(),
                                function.get("arguments").unwrap_or(&Value::Null),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !calls.is_empty() {
                if !content.is_empty() {
                    content.push('\n');
                }
                content.push_str(&calls.join("\n"));
            }
        }
        out.push(json!({"role": role, "content": content}));
    }
    flush(&mut pending_results, &mut out);
    out
}
