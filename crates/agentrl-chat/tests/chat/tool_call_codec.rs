//! The `<tool_call>` codec on text: reasoning, content and calls split out, typed errors
//! for malformed calls, and format/parse round trips.

use agentrl_chat::codec::{format_tool_call, ToolCallCodec, ToolCallError};
use agentrl_chat::tools::ArgumentError;
use agentrl_gym::types::{Action, ToolCall};
use serde_json::json;

fn codec() -> ToolCallCodec {
    ToolCallCodec::bugfix().expect("bugfix specs parse")
}

#[test]
fn parses_reasoning_content_and_two_calls() {
    let text = "<think>\nRead both.\n</think>\n\nReading.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"test\", \"arguments\": {}}\n</tool_call><|im_end|>";
    let turn = codec().parse_text(text);
    assert_eq!(turn.reasoning.as_deref(), Some("\nRead both.\n"));
    assert_eq!(turn.content, "\n\nReading.\n");
    assert_eq!(
        turn.actions(),
        vec![
            Action::Call(ToolCall {
                name: "read".into(),
                arguments: json!({"path": "a.py"})
            }),
            Action::Call(ToolCall {
                name: "test".into(),
                arguments: json!({})
            }),
        ]
    );
    let message = turn.to_message();
    assert_eq!(message["reasoning_content"], "Read both.");
    assert_eq!(message["content"], "Reading.");
    assert_eq!(message["tool_calls"][1]["function"]["name"], "test");
}

#[test]
fn malformed_calls_become_typed_errors() {
    type Expectation = fn(&ToolCallError) -> bool;
    let cases: Vec<(&str, Expectation)> = vec![
        ("no call here", |e| matches!(e, ToolCallError::NoToolCall)),
        (
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}",
            |e| matches!(e, ToolCallError::Unclosed { .. }),
        ),
        (
            "<tool_call>{\"name\": \"read\", \"arguments\": {\"path\": }</tool_call>",
            |e| matches!(e, ToolCallError::InvalidJson { .. }),
        ),
        ("<tool_call>[1, 2]</tool_call>", |e| {
            matches!(e, ToolCallError::NotAnObject { .. })
        }),
        ("<tool_call>{\"arguments\": {}}</tool_call>", |e| {
            matches!(e, ToolCallError::MissingName { .. })
        }),
        (
            "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
            |e| matches!(e, ToolCallError::UnknownTool { name, .. } if name == "rm"),
        ),
        (
            "<tool_call>{\"name\": \"read\", \"arguments\": {}}</tool_call>",
            |e| matches!(e, ToolCallError::BadArguments(ArgumentError::Missing { argument, .. }) if argument == "path"),
        ),
    ];
    let codec = codec();
    for (text, is_expected) in cases {
        let turn = codec.parse_text(text);
        let err = match turn.calls.first() {
            Some(span) => span.result.clone().expect_err(text),
            None => ToolCallError::NoToolCall,
        };
        assert!(is_expected(&err), "{text}: got {err:?}");
        match turn.first_action() {
            Action::Malformed { reason, .. } => assert_eq!(reason, err.to_string()),
            other => panic!("{text}: expected a malformed action, got {other:?}"),
        }
    }
}

#[test]
fn string_arguments_are_parsed_as_objects() {
    let turn = codec().parse_text(
        "<tool_call>{\"name\": \"read\", \"arguments\": \"{\\\"path\\\": \\\"b.py\\\"}\"}</tool_call>",
    );
    assert_eq!(
        turn.first_action(),
        Action::Call(ToolCall {
            name: "read".into(),
            arguments: json!({"path": "b.py"})
        })
    );
}

#[test]
fn format_then_parse_round_trips() {
    let call = ToolCall {
        name: "edit".into(),
        arguments: json!({"path": "a.py", "old": "x = \"1\"\n", "new": "x = 'é'\n"}),
    };
    let text = format_tool_call(&call);
    assert_eq!(
        text,
        "<tool_call>\n{\"name\": \"edit\", \"arguments\": {\"path\": \"a.py\", \"old\": \"x = \\\"1\\\"\\n\", \"new\": \"x = 'é'\\n\"}}\n</tool_call>"
    );
    assert_eq!(codec().parse_text(&text).first_action(), Action::Call(call));
}
