//! The BugFix tool schemas and argument validation: each `edit` form, required and
//! extra arguments, and malformed specs.

use agentrl_chat::tools::{bugfix_tool_specs, ArgumentError, ToolSpec};
use serde_json::json;

fn spec(name: &str) -> ToolSpec {
    let specs = bugfix_tool_specs();
    let found = specs
        .iter()
        .find(|s| s["function"]["name"] == name)
        .expect("tool exists");
    ToolSpec::from_openai(found).expect("spec parses")
}

#[test]
fn edit_accepts_each_form_and_rejects_others() {
    let edit = spec("edit");
    for ok in [
        json!({"path": "a.py", "old": "x", "new": "y"}),
        json!({"path": "a.py", "start_line": 1, "end_line": 2, "text": "z"}),
        json!({"path": "a.py", "text": "all"}),
        json!({"candidate": 3}),
    ] {
        assert_eq!(edit.check_arguments(&ok), Ok(()), "{ok}");
    }
    assert!(matches!(
        edit.check_arguments(&json!({"path": "a.py", "old": "x"})),
        Err(ArgumentError::NoForm { .. })
    ));
    assert!(matches!(
        edit.check_arguments(&json!({"candidate": "3"})),
        Err(ArgumentError::WrongType { ref argument, .. }) if argument == "candidate"
    ));
    assert!(matches!(
        edit.check_arguments(&json!(["a.py"])),
        Err(ArgumentError::NotAnObject { .. })
    ));
}

#[test]
fn read_requires_path() {
    let read = spec("read");
    assert_eq!(read.check_arguments(&json!({"path": "a.py"})), Ok(()));
    assert_eq!(
        read.check_arguments(&json!({})),
        Err(ArgumentError::Missing {
            tool: "read".into(),
            argument: "path".into()
        })
    );
}

#[test]
fn closed_schema_rejects_extra_arguments() {
    let closed = ToolSpec::from_openai(&json!({"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": ["integer", "null"]}},
        "additionalProperties": false}}))
    .expect("parses");
    assert_eq!(closed.check_arguments(&json!({"a": null})), Ok(()));
    assert!(matches!(
        closed.check_arguments(&json!({"b": 1})),
        Err(ArgumentError::Unexpected { .. })
    ));
}

#[test]
fn bad_specs_are_errors() {
    assert!(ToolSpec::from_openai(&json!({"function": {}})).is_err());
    assert!(ToolSpec::from_openai(&json!({"name": "f", "parameters": {"required": "a"}})).is_err());
    assert!(ToolSpec::from_openai(
        &json!({"name": "f", "parameters": {"properties": {"a": {"type": "text"}}}})
    )
    .is_err());
}
