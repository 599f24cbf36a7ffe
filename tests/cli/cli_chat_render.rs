//! `agentrl chat render` end to end: the binary renders a committed fixture conversation and
//! prints the same text and ids as transformers did (see crates/agentrl-chat/scripts).

use std::path::PathBuf;
use std::process::Command;

fn fixture_cases() -> Vec<serde_json::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/agentrl-chat/tests/fixtures/qwen3_template_cases.json");
    let text = std::fs::read_to_string(&path).expect("fixture is committed");
    let value: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    value["cases"].as_array().cloned().expect("cases list")
}

fn render(
    model: &std::path::Path,
    case: &serde_json::Value,
    dir: &std::path::Path,
) -> serde_json::Value {
    let messages = dir.join("messages.json");
    std::fs::write(&messages, case["messages"].to_string()).expect("write messages");
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentrl"));
    command
        .args(["chat", "render", "--model"])
        .arg(model)
        .arg("--messages")
        .arg(&messages);
    if case["tools"].is_array() {
        let tools = dir.join("tools.json");
        std::fs::write(&tools, case["tools"].to_string()).expect("write tools");
        command.arg("--tools").arg(&tools);
    }
    if case["add_generation_prompt"] == true {
        command.arg("--add-generation-prompt");
    }
    if case["enable_thinking"] == false {
        command.arg("--no-thinking");
    }
    let output = command.output().expect("agentrl runs");
    assert!(
        output.status.success(),
        "agentrl chat render failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON object")
}

#[test]
fn chat_render_prints_transformers_text_and_ids() {
    let Some(model) = agentrl_chat::qwen3_assets_for_tests() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = fixture_cases();
    for name in [
        "two_tool_calls_one_turn_consecutive_results",
        "thinking_off_with_tools",
        "non_ascii",
    ] {
        let case = cases
            .iter()
            .find(|c| c["name"] == name)
            .expect("case exists");
        let printed = render(&model, case, dir.path());
        assert_eq!(printed["text"], case["text"], "{name}: text");
        assert_eq!(printed["ids"], case["ids"], "{name}: ids");
    }
}

#[test]
fn chat_render_names_a_missing_model_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let messages = dir.path().join("m.json");
    std::fs::write(&messages, r#"[{"role": "user", "content": "hi"}]"#).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args([
            "chat",
            "render",
            "--model",
            "/nonexistent/model-dir",
            "--messages",
        ])
        .arg(&messages)
        .output()
        .expect("agentrl runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/model-dir"), "{stderr}");
}

#[test]
fn an_unknown_chat_role_is_an_error_naming_the_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let messages = dir.path().join("m.json");
    std::fs::write(
        &messages,
        r#"[{"role": "user", "content": "hi"}, {"role": "narrator", "content": "x"}]"#,
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args([
            "chat",
            "render",
            "--model",
            "/nonexistent/model-dir",
            "--messages",
        ])
        .arg(&messages)
        .output()
        .expect("agentrl runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("message 1") && stderr.contains("narrator"),
        "{stderr}"
    );
}
