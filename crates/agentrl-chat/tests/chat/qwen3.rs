//! Parity and behaviour tests against the real Qwen3 tokenizer and chat template.
//!
//! The expected text and ids come from transformers (`scripts/make_qwen3_fixtures.py`); the
//! assets come from `qwen3_assets_for_tests()`. Without the assets the tests print why and
//! skip, except under CI (`CI` set), where they fail. The 11 MB tokenizer loads once per test
//! binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use agentrl_chat::codec::{format_tool_call, ToolCallCodec};
use agentrl_chat::drift::DriftChecker;
use agentrl_chat::message::{assistant_message, system_message, tool_message, user_message};
use agentrl_chat::qwen::{QwenSpecialTokens, QwenTokenizer};
use agentrl_chat::template::{python_json, ChatTemplate, RenderOptions};
use agentrl_chat::tools::bugfix_tool_specs;
use agentrl_gym::types::{Action, ToolCall};
use serde_json::{json, Value};

struct Qwen {
    tokenizer: QwenTokenizer,
    template: ChatTemplate,
    codec: ToolCallCodec,
}

fn qwen() -> Option<&'static Qwen> {
    static QWEN: OnceLock<Option<Qwen>> = OnceLock::new();
    QWEN.get_or_init(|| {
        let dir = agentrl_chat::qwen3_assets_for_tests()?;
        Some(Qwen {
            tokenizer: QwenTokenizer::from_dir(&dir).expect("tokenizer.json loads"),
            template: ChatTemplate::from_model_dir(&dir).expect("chat template loads"),
            codec: ToolCallCodec::bugfix().expect("bugfix tool specs parse"),
        })
    })
    .as_ref()
}

pub(crate) fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture file is committed");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn values(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

pub(crate) fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn chat_template_matches_transformers_on_all_fixture_conversations() {
    let Some(q) = qwen() else { return };
    let fixtures = fixture("qwen3_template_cases.json");
    let cases = values(&fixtures["cases"]);
    assert!(cases.len() >= 15, "need at least 15 conversations");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let messages = values(&case["messages"]);
        let tools = case["tools"].as_array().cloned();
        let options = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().expect("flag"),
            // `null` means the script did not pass enable_thinking: the template's default (on).
            enable_thinking: case["enable_thinking"].as_bool().unwrap_or(true),
        };
        let text = q
            .template
            .render(&messages, tools.as_deref(), options)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let want_text = case["text"].as_str().expect("text");
        if text != want_text {
            failures.push(format!(
                "{name}: text differs\n--- rust\n{text:?}\n--- transformers\n{want_text:?}"
            ));
            continue;
        }
        let got = q.tokenizer.encode(&text, false).expect("encodes");
        if got != ids(&case["ids"]) {
            failures.push(format!("{name}: ids differ"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn tokenizer_matches_transformers_encode_and_decode() {
    let Some(q) = qwen() else { return };
    for case in values(&fixture("qwen3_tokenizer_cases.json")["cases"]) {
        let text = case["text"].as_str().expect("text");
        let want = ids(&case["ids"]);
        assert_eq!(
            q.tokenizer.encode(text, false).expect("encode"),
            want,
            "{text:?}"
        );
        assert_eq!(
            q.tokenizer.decode(&want, false).expect("decode"),
            case["decoded"].as_str().expect("decoded"),
            "{text:?}"
        );
        assert_eq!(
            q.tokenizer.decode(&want, true).expect("decode"),
            case["decoded_skip_special"].as_str().expect("decoded"),
            "{text:?}"
        );
    }
}

#[test]
fn decoding_keeps_tool_call_and_think_but_skips_chat_markers() {
    let Some(q) = qwen() else { return };
    let special = QwenSpecialTokens::from_tokenizer(&q.tokenizer).expect("markers exist");
    assert_eq!(
        (
            special.im_start,
            special.im_end,
            special.tool_call,
            special.think_end
        ),
        (151644, 151645, 151657, 151668)
    );
    let text = "<think>\nx\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>";
    let ids = q.tokenizer.encode(text, false).expect("encode");
    assert!(ids.contains(&special.think) && ids.contains(&special.tool_call_end));
    let skipped = q.tokenizer.decode(&ids, true).expect("decode");
    assert_eq!(
        skipped,
        "<think>\nx\n</think>\n\n<tool_call>\n{}\n</tool_call>"
    );
    assert_eq!(q.tokenizer.vocab_size(), 151_669);
}

#[test]
fn bugfix_tool_specs_equal_the_fixture_scripts_list_in_order() {
    let committed = values(&fixture("bugfix_tools.json")["tools"]);
    let ours = bugfix_tool_specs();
    assert!(
        !committed.is_empty(),
        "the fixture lists the tools under `tools`"
    );
    assert_eq!(ours.len(), committed.len());
    for (a, b) in ours.iter().zip(&committed) {
        // python_json keeps key order, so this also checks the order the template will print.
        assert_eq!(python_json(a), python_json(b));
    }
}

#[test]
fn codec_parses_calls_from_sampled_ids() {
    let Some(q) = qwen() else { return };
    let call = ToolCall {
        name: "edit".into(),
        arguments: json!({"path": "stats.py", "start_line": 2, "end_line": 2, "text": "    return sum(xs) / len(xs)"}),
    };
    let reply = format!(
        "<think>\nOff by one.\n</think>\n\nFixing it.\n{}<|im_end|>",
        format_tool_call(&call)
    );
    let ids = q.tokenizer.encode(&reply, false).expect("encode");
    let turn = q.codec.parse_ids(&q.tokenizer, &ids).expect("decode");
    assert_eq!(turn.actions(), vec![Action::Call(call)]);
    let bad = q
        .tokenizer
        .encode(
            "<tool_call>\n{\"name\": \"delete_all\", \"arguments\": {}}\n</tool_call>",
            false,
        )
        .expect("encode");
    match q
        .codec
        .parse_ids(&q.tokenizer, &bad)
        .expect("decode")
        .first_action()
    {
        Action::Malformed { reason, .. } => assert!(reason.contains("unknown tool `delete_all`")),
        other => panic!("expected malformed, got {other:?}"),
    }
}

fn bugfix_history() -> Vec<Value> {
    vec![
        system_message("You fix bugs."),
        user_message("Fix `mean` in stats.py."),
    ]
}

/// The ids a turn has when rendered by the template itself: no drift by construction.
fn canonical_turn_ids(q: &Qwen, history: &[Value], message: Value, tools: &[Value]) -> Vec<u32> {
    let prompt = q
        .template
        .render(history, Some(tools), RenderOptions::generation(true))
        .expect("render prompt");
    let mut conversation = history.to_vec();
    conversation.push(message);
    let full = q
        .template
        .render(&conversation, Some(tools), RenderOptions::default())
        .expect("render turn");
    let rest = full.strip_prefix(&prompt).expect("prompt is a prefix");
    // The template writes "<|im_end|>\n"; the engine stops at <|im_end|>.
    let turn = rest.strip_suffix('\n').expect("turn ends with a newline");
    q.tokenizer.encode(turn, false).expect("encode")
}

#[test]
fn drift_check_finds_no_drift_in_a_canonical_turn() {
    let Some(q) = qwen() else { return };
    let tools = bugfix_tool_specs();
    let checker = DriftChecker::new(&q.tokenizer, &q.template, &q.codec);
    let message = assistant_message(
        "I'll read it.",
        Some("Start with the file."),
        &[ToolCall {
            name: "read".into(),
            arguments: json!({"path": "stats.py"}),
        }],
    );
    let sampled = canonical_turn_ids(q, &bugfix_history(), message, &tools);
    let drift = checker
        .check_turn(&bugfix_history(), Some(&tools), &sampled, true)
        .expect("check");
    assert!(!drift.report.drifted, "{:#?}", drift.report);
    assert_eq!(
        drift.message["tool_calls"][0]["function"]["arguments"]["path"],
        "stats.py"
    );
}

#[test]
fn drift_check_reports_a_non_canonical_bpe_split() {
    let Some(q) = qwen() else { return };
    let tools = bugfix_tool_specs();
    let checker = DriftChecker::new(&q.tokenizer, &q.template, &q.codec);
    let sampled_head = q
        .tokenizer
        .encode("<think>\n\n</think>\n\n", false)
        .expect("encode");
    // "Hello" is one token; a sampler may still emit "Hel" + "lo".
    let hello = q.tokenizer.encode("Hello", false).expect("encode");
    assert_eq!(hello.len(), 1);
    let split: Vec<u32> = ["Hel", "lo"]
        .iter()
        .flat_map(|piece| q.tokenizer.encode(piece, false).expect("encode"))
        .collect();
    let im_end = q.tokenizer.require_token_id("<|im_end|>").expect("im_end");
    let sampled: Vec<u32> = sampled_head
        .iter()
        .chain(&split)
        .copied()
        .chain([im_end])
        .collect();
    let drift = checker
        .check_turn(&bugfix_history(), Some(&tools), &sampled, true)
        .expect("check");
    let report = &drift.report;
    assert!(report.drifted);
    assert_eq!(
        report.first_difference,
        Some(drift.prompt_len + sampled_head.len())
    );
    assert_eq!(report.sampled_run[..2], split[..]);
    assert_eq!(report.rerendered_run[0], hello[0]);
    assert!(
        report.sampled_text.starts_with("Hello") && report.rerendered_text.starts_with("Hello")
    );
}

#[test]
fn drift_check_reports_compact_tool_call_json() {
    let Some(q) = qwen() else { return };
    let tools = bugfix_tool_specs();
    let checker = DriftChecker::new(&q.tokenizer, &q.template, &q.codec);
    let reply = "<think>\nRead.\n</think>\n\n<tool_call>\n{\"name\":\"read\",\"arguments\":{\"path\":\"stats.py\"}}\n</tool_call><|im_end|>";
    let sampled = q.tokenizer.encode(reply, false).expect("encode");
    let drift = checker
        .check_turn(&bugfix_history(), Some(&tools), &sampled, true)
        .expect("check");
    let report = &drift.report;
    assert!(report.drifted);
    // The split is inside the JSON: the sampled side has no space after the colon.
    assert!(report.sampled_text.contains("\":\"read\""), "{report:#?}");
    assert!(
        report.rerendered_text.contains("\": \"read\""),
        "{report:#?}"
    );
    let prefix = q
        .tokenizer
        .encode("<think>\nRead.\n</think>\n\n<tool_call>\n{\"name", false)
        .expect("encode");
    assert!(report.first_difference.expect("index") >= drift.prompt_len + prefix.len() - 1);
}

#[test]
fn drift_check_reports_reasoning_dropped_from_an_earlier_turn() {
    let Some(q) = qwen() else { return };
    let checker = DriftChecker::new(&q.tokenizer, &q.template, &q.codec);
    // Turn 1, as sampled: with reasoning. Then the user speaks again and turn 2 is sampled.
    let first = vec![user_message("What is 2+2?")];
    let reply1 = "<think>\nAdd them.\n</think>\n\n4<|im_end|>";
    let prompt1 = q
        .template
        .render(&first, None, RenderOptions::generation(true))
        .expect("render");
    let mut stream = q.tokenizer.encode(&prompt1, false).expect("encode");
    let reply1_ids = q.tokenizer.encode(reply1, false).expect("encode");
    stream.extend(&reply1_ids);
    let turn1 = q.codec.parse_text(reply1).to_message();
    // The rollout appends the observation turn and the next generation prompt as text.
    stream.extend(
        q.tokenizer
            .encode(
                "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
                false,
            )
            .expect("encode"),
    );
    let reply2 = "<think>\nAdd again.\n</think>\n\n6<|im_end|>";
    stream.extend(q.tokenizer.encode(reply2, false).expect("encode"));
    let messages = vec![
        first[0].clone(),
        turn1,
        user_message("And 3+3?"),
        q.codec.parse_text(reply2).to_message(),
    ];
    let report = checker
        .check_conversation(&stream, &messages, None, true)
        .expect("check");
    assert!(report.drifted);
    let prompt1_len = q.tokenizer.encode(&prompt1, false).expect("encode").len();
    assert_eq!(report.first_difference, Some(prompt1_len), "{report:#?}");
    assert!(report.sampled_text.starts_with("<think>"), "{report:#?}");
    assert!(report.rerendered_text.starts_with('4'), "{report:#?}");
    // Without the second user turn the first reply is the last one and keeps its reasoning.
    let single = checker
        .check_conversation(
            &stream[..prompt1_len + reply1_ids.len()],
            &messages[..2],
            None,
            true,
        )
        .expect("check");
    assert!(!single.drifted, "{single:#?}");
}

#[test]
fn tool_results_go_back_as_tool_messages() {
    let Some(q) = qwen() else { return };
    let tools = bugfix_tool_specs();
    let messages = vec![
        user_message("Run the tests."),
        assistant_message(
            "",
            None,
            &[ToolCall {
                name: "test".into(),
                arguments: json!({}),
            }],
        ),
        tool_message("FAILED test_mean"),
        tool_message("second result"),
    ];
    let text = q
        .template
        .render(&messages, Some(&tools), RenderOptions::generation(false))
        .expect("render");
    assert!(text.ends_with(
        "<|im_start|>user\n<tool_response>\nFAILED test_mean\n</tool_response>\n<tool_response>\nsecond result\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ), "{text}");
}
