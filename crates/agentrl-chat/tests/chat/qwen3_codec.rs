//! The Qwen3 `ChatCodec` against the real Qwen3 tokenizer and chat template: prompts as the
//! template renders them, sampled turns parsed to gym actions, observation ids that continue the
//! exact sampled ids as the template would, the think trap, truncation and drift.
//!
//! The assets come from `qwen3_assets_for_tests()` (skipped without them, failing under CI).
//! The tokenizer loads once per codec setting per test binary.

use std::sync::OnceLock;

use agentrl_chat::message::{assistant_message, system_message, tool_message, user_message};
use agentrl_chat::qwen3_codec::{default_tool_specs, truncation_marker, DEFAULT_SYSTEM_PROMPT};
use agentrl_chat::template::RenderOptions;
use agentrl_chat::tiny::TinyCodec;
use agentrl_chat::{ChatCodec, ChatError, Qwen3Codec, Qwen3CodecOptions};
use agentrl_gym::render::render_text;
use agentrl_gym::{Action, CandidateEdit, FileView, Observation, TestReport, ToolCall};
use serde_json::{json, Value};

fn options(enable_thinking: bool) -> Qwen3CodecOptions {
    Qwen3CodecOptions {
        max_action_tokens: 256,
        max_observation_tokens: 256,
        enable_thinking,
    }
}

/// The codec with thinking on (`true`) or off (`false`), loaded once each.
fn qwen3(enable_thinking: bool) -> Option<&'static Qwen3Codec> {
    static THINKING: OnceLock<Option<Qwen3Codec>> = OnceLock::new();
    static DIRECT: OnceLock<Option<Qwen3Codec>> = OnceLock::new();
    let cell = if enable_thinking { &THINKING } else { &DIRECT };
    cell.get_or_init(|| {
        let dir = agentrl_chat::qwen3_assets_for_tests()?;
        Some(Qwen3Codec::from_dir(&dir, options(enable_thinking)).expect("codec loads"))
    })
    .as_ref()
}

fn task() -> Observation {
    Observation::Task {
        task_id: "stats-mean".into(),
        prompt: "`mean` divides by zero on an empty list.".into(),
        files: vec!["stats.py".into(), "test_public.py".into()],
        candidates: vec![CandidateEdit {
            path: "stats.py".into(),
            old: "    return sum(xs) / len(xs)\n".into(),
            new: "    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)\n".into(),
        }],
    }
}

fn file_view() -> Observation {
    Observation::File(FileView {
        path: "stats.py".into(),
        lines: vec![
            "def mean(xs):".into(),
            "    return sum(xs) / len(xs)".into(),
        ],
        truncated: false,
    })
}

fn test_report() -> Observation {
    Observation::Tests(TestReport {
        passed: vec!["test_one".into()],
        failed: vec!["test_empty".into()],
        first_failure: None,
        crashed: None,
    })
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments,
    }
}

fn encode(codec: &Qwen3Codec, text: &str) -> Vec<u32> {
    codec.tokenizer().encode(text, false).expect("encode")
}

fn render(codec: &Qwen3Codec, messages: &[Value], add_generation_prompt: bool) -> String {
    codec
        .template()
        .render(
            messages,
            Some(codec.tool_specs()),
            RenderOptions {
                add_generation_prompt,
                enable_thinking: codec.options().enable_thinking,
            },
        )
        .expect("render")
}

/// A sampled turn as Qwen3 writes it: reasoning, then one call in the template's JSON spacing.
fn sampled_turn(reasoning: &str, call_json: &str) -> String {
    format!("<think>\n{reasoning}\n</think>\n\n<tool_call>\n{call_json}\n</tool_call><|im_end|>")
}

#[test]
fn prompt_is_the_templates_render_of_system_user_and_tools() {
    for thinking in [true, false] {
        let Some(codec) = qwen3(thinking) else { return };
        let messages = vec![
            system_message(DEFAULT_SYSTEM_PROMPT),
            user_message(&render_text(&task())),
        ];
        let want = render(codec, &messages, true);
        assert_eq!(codec.prompt_text(&task()).expect("prompt"), want);
        assert_eq!(
            codec.prompt_ids(&task()).expect("prompt ids"),
            encode(codec, &want)
        );
        // Ends exactly where the assistant's first sampled token goes.
        let tail = if thinking {
            "<|im_start|>assistant\n"
        } else {
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        };
        assert!(want.ends_with(tail), "{want}");
        // The four BugFix tools are offered as JSON-schema functions; exploit is not.
        let names: Vec<&str> = codec
            .tool_specs()
            .iter()
            .map(|spec| spec["function"]["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["read", "test", "edit", "submit"]);
        assert!(want.contains("\"anyOf\": [{\"required\": [\"path\", \"old\", \"new\"]}"));
        assert!(!want.contains("\"name\": \"exploit\""));
        assert!(want.contains("Task stats-mean: `mean` divides by zero"));
    }
}

#[test]
fn well_formed_turns_parse_to_every_tool_and_argument_form() {
    let Some(codec) = qwen3(true) else { return };
    let calls = [
        call("read", json!({"path": "stats.py"})),
        call("test", json!({})),
        call(
            "edit",
            json!({"path": "stats.py", "old": "/ len(xs)", "new": "/ max(len(xs), 1)"}),
        ),
        call(
            "edit",
            json!({"path": "stats.py", "start_line": 2, "end_line": 2, "text": "    return 0.0\n"}),
        ),
        call(
            "edit",
            json!({"path": "stats.py", "text": "def mean(xs):\n    return 0.0\n"}),
        ),
        call("edit", json!({"candidate": 0})),
        call("submit", json!({})),
    ];
    for want in calls {
        let json_text = format!(
            "{{\"name\": \"{}\", \"arguments\": {}}}",
            want.name,
            agentrl_chat::template::python_json(&want.arguments)
        );
        let ids = encode(codec, &sampled_turn("Next step.", &json_text));
        assert_eq!(
            codec.parse_action(&ids, &task()),
            Action::Call(want.clone()),
            "{json_text}"
        );
        // A demonstration is the template's own assistant turn for the call and parses back.
        let demo = codec.demonstration_ids(&want).expect("demonstration");
        assert_eq!(demo.last(), Some(&codec.special_tokens().im_end));
        assert_eq!(codec.parse_action(&demo, &task()), Action::Call(want));
    }
    // The `<|endoftext|>` stop ends a turn too.
    let mut ids = encode(
        codec,
        "<tool_call>\n{\"name\": \"test\", \"arguments\": {}}\n</tool_call>",
    );
    ids.push(codec.special_tokens().endoftext);
    assert_eq!(
        codec.parse_action(&ids, &task()),
        Action::Call(call("test", json!({})))
    );
}

#[test]
fn several_calls_in_one_turn_execute_the_first() {
    let Some(codec) = qwen3(true) else { return };
    let text = "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"test\", \"arguments\": {}}\n</tool_call><|im_end|>";
    assert_eq!(
        codec.parse_action(&encode(codec, text), &task()),
        Action::Call(call("read", json!({"path": "stats.py"})))
    );
}

#[test]
fn demonstrations_are_formatted_as_the_template_formats_tool_calls() {
    let Some(codec) = qwen3(true) else { return };
    let read = call("read", json!({"path": "stats.py"}));
    assert_eq!(
        codec.demonstration_text(&read).expect("demonstration"),
        "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}\n</tool_call><|im_end|>"
    );
    let Some(direct) = qwen3(false) else { return };
    // Without thinking the empty block is part of the generation prompt, not of the turn.
    assert_eq!(
        direct.demonstration_text(&read).expect("demonstration"),
        "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}\n</tool_call><|im_end|>"
    );
}

#[test]
fn malformed_turns_name_their_fault() {
    let Some(codec) = qwen3(true) else { return };
    let cases = [
        (
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": }\n</tool_call><|im_end|>",
            "not valid JSON",
        ),
        (
            "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call><|im_end|>",
            "unknown tool `rm` (known: read, test, edit, submit)",
        ),
        (
            "<tool_call>\n{\"name\": \"exploit\", \"arguments\": {}}\n</tool_call><|im_end|>",
            "unknown tool `exploit`",
        ),
        (
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call><|im_end|>",
            "tool `read`: missing required argument `path`",
        ),
        (
            "<tool_call>\n{\"name\": \"edit\", \"arguments\": {\"path\": \"stats.py\", \"old\": \"x\"}}\n</tool_call><|im_end|>",
            "tool `edit`: arguments fit none of its forms",
        ),
        (
            "<tool_call>\n{\"name\": \"edit\", \"arguments\": {\"candidate\": \"0\"}}\n</tool_call><|im_end|>",
            "argument `candidate` must be integer",
        ),
        (
            "<think>\nHmm.\n</think>\n\nI think the bug is in mean.<|im_end|>",
            "no <tool_call> in the reply",
        ),
        (
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}\n</tool_call>",
            "without <|im_end|> (action limit 256)",
        ),
    ];
    for (text, fault) in cases {
        match codec.parse_action(&encode(codec, text), &task()) {
            Action::Malformed { reason, .. } => {
                assert!(reason.contains(fault), "{text}: reason {reason:?}")
            }
            other => panic!("{text}: expected a malformed action, got {other:?}"),
        }
    }
}

#[test]
fn observation_ids_continue_the_sampled_ids_as_the_template_renders_the_conversation() {
    let Some(codec) = qwen3(true) else { return };
    let turn1 = sampled_turn(
        "Read the module first.",
        "{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}",
    );
    let turn2 = sampled_turn("Run the tests.", "{\"name\": \"test\", \"arguments\": {}}");
    let (sampled1, sampled2) = (encode(codec, &turn1), encode(codec, &turn2));
    let observation1 = codec.observation_ids(&file_view()).expect("observation");
    let observation2 = codec.observation_ids(&test_report()).expect("observation");
    // The model stops at <|im_end|>; the "\n" after it (id 198) is the observation's first id.
    assert_eq!(sampled1.last(), Some(&codec.special_tokens().im_end));
    assert_eq!(observation1[0], 198);
    assert_eq!(codec.decode(&observation1[..1]), "\n");
    let mut stream = codec.prompt_ids(&task()).expect("prompt");
    for ids in [&sampled1, &observation1, &sampled2, &observation2] {
        stream.extend_from_slice(ids);
    }
    let messages = vec![
        system_message(DEFAULT_SYSTEM_PROMPT),
        user_message(&render_text(&task())),
        codec.parse_turn(&sampled1).expect("parse").to_message(),
        tool_message(&render_text(&file_view())),
        codec.parse_turn(&sampled2).expect("parse").to_message(),
        tool_message(&render_text(&test_report())),
    ];
    let rendered = render(codec, &messages, true);
    assert_eq!(stream, encode(codec, &rendered), "{rendered}");
    assert_eq!(
        codec.observation_text(&test_report()).expect("text"),
        format!(
            "\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
            render_text(&test_report())
        )
    );
}

#[test]
fn observation_suffix_is_immune_to_the_think_trap() {
    for thinking in [true, false] {
        let Some(codec) = qwen3(thinking) else { return };
        // The trap is there: a placeholder assistant turn renders with an empty <think> block
        // when it is last and without one when a tool message follows, so the render without
        // the tool message is not a prefix of the render with it.
        let history = vec![
            system_message(DEFAULT_SYSTEM_PROMPT),
            user_message("task"),
            assistant_message("", None, &[call("test", json!({}))]),
        ];
        let without = render(codec, &history, false);
        let mut with_tool = history.clone();
        with_tool.push(tool_message("result"));
        let with = render(codec, &with_tool, true);
        assert!(!with.starts_with(&without), "{without:?}\n{with:?}");
        // The derived suffix is the template's rendering of what follows the turn anyway.
        let generation = if thinking {
            "<|im_start|>assistant\n"
        } else {
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        };
        let content = render_text(&file_view());
        assert_eq!(
            codec.observation_text(&file_view()).expect("text"),
            format!(
                "\n<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n{generation}"
            )
        );
        assert!(with.ends_with(&format!(
            "<tool_call>\n{{\"name\": \"test\", \"arguments\": {{}}}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nresult\n</tool_response><|im_end|>\n{generation}"
        )));
    }
    // An episode whose turns carry <think>…</think>: the stream equals the template's render
    // of the same messages with their reasoning, and the observation ids do not depend on it.
    let Some(codec) = qwen3(true) else { return };
    let reasoning_turn = sampled_turn(
        "The divisor can be zero; look at the file.",
        "{\"name\": \"read\", \"arguments\": {\"path\": \"stats.py\"}}",
    );
    let sampled = encode(codec, &reasoning_turn);
    let observation = codec.observation_ids(&file_view()).expect("observation");
    let mut stream = codec.prompt_ids(&task()).expect("prompt");
    stream.extend(&sampled);
    stream.extend(&observation);
    let message = codec.parse_turn(&sampled).expect("parse").to_message();
    assert_eq!(
        message["reasoning_content"],
        "The divisor can be zero; look at the file."
    );
    let messages = vec![
        system_message(DEFAULT_SYSTEM_PROMPT),
        user_message(&render_text(&task())),
        message,
        tool_message(&render_text(&file_view())),
    ];
    assert_eq!(stream, encode(codec, &render(codec, &messages, true)));
    let drift = codec
        .retokenization_drift(&task(), &[(&sampled, Some(&file_view()))])
        .expect("drift");
    assert_eq!(drift, Some(false));
}

#[test]
fn long_tool_output_keeps_head_and_tail_around_a_marker() {
    let Some(codec) = qwen3(true) else { return };
    let lines: Vec<String> = (0..400)
        .map(|i| format!("x{i} = compute({i}) + {i}"))
        .collect();
    let long = Observation::File(FileView {
        path: "big.py".into(),
        lines,
        truncated: false,
    });
    let full = render_text(&long);
    let content = codec.observation_content(&long).expect("content");
    let max = codec.options().max_observation_tokens;
    assert!(encode(codec, &full).len() > max);
    assert!(encode(codec, &content).len() <= max, "{content}");
    let (head, rest) = content
        .split_once("\n[... ")
        .expect("marker line after the head");
    let (count, tail) = rest
        .split_once(" characters truncated ...]\n")
        .expect("marker line before the tail");
    let removed: usize = count.parse().expect("a count of characters");
    assert!(full.starts_with(head) && head.starts_with("big.py:\n   1 | x0 = compute(0)"));
    assert!(full.ends_with(tail) && tail.ends_with("400 | x399 = compute(399) + 399\n"));
    assert_eq!(
        head.chars().count() + removed + tail.chars().count(),
        full.chars().count()
    );
    assert!(content.contains(&truncation_marker(removed)));
    // The truncated text is what the tool message carries.
    assert!(codec
        .observation_text(&long)
        .expect("text")
        .contains(&format!("<tool_response>\n{content}\n</tool_response>")));
    // Short output is untouched.
    assert_eq!(
        codec.observation_content(&file_view()).expect("content"),
        render_text(&file_view())
    );
}

#[test]
fn drift_is_reported_for_a_non_canonical_tokenisation_only() {
    let Some(codec) = qwen3(true) else { return };
    let tests = test_report();
    let text = "<think>\nHello there.\n</think>\n\n<tool_call>\n{\"name\": \"test\", \"arguments\": {}}\n</tool_call><|im_end|>";
    let canonical = encode(codec, text);
    let hello = encode(codec, "Hello");
    assert_eq!(hello.len(), 1);
    let at = canonical
        .iter()
        .position(|&id| id == hello[0])
        .expect("Hello is one token of the turn");
    // The same text, with "Hello" sampled as "Hel" + "lo".
    let mut split = canonical[..at].to_vec();
    split.extend(encode(codec, "Hel"));
    split.extend(encode(codec, "lo"));
    split.extend(&canonical[at + 1..]);
    assert_eq!(codec.decode(&split), codec.decode(&canonical));
    let second = encode(
        codec,
        &sampled_turn("Done.", "{\"name\": \"submit\", \"arguments\": {}}"),
    );
    let stable: Vec<(&[u32], Option<&Observation>)> =
        vec![(&canonical, Some(&tests)), (&second, None)];
    assert_eq!(
        codec.retokenization_drift(&task(), &stable).expect("drift"),
        Some(false)
    );
    let unstable: Vec<(&[u32], Option<&Observation>)> =
        vec![(&split, Some(&tests)), (&second, None)];
    assert_eq!(
        codec
            .retokenization_drift(&task(), &unstable)
            .expect("drift"),
        Some(true)
    );
    let report = codec.drift_report(&task(), &unstable).expect("report");
    let prompt_len = codec.prompt_ids(&task()).expect("prompt").len();
    assert_eq!(report.first_difference, Some(prompt_len + at));
    // Without thinking, Qwen3 drops the generation prompt's empty <think> block from earlier
    // turns when it re-renders: one turn is stable, two drift.
    let Some(direct) = qwen3(false) else { return };
    let call_turn = encode(
        direct,
        "<tool_call>\n{\"name\": \"test\", \"arguments\": {}}\n</tool_call><|im_end|>",
    );
    let one: Vec<(&[u32], Option<&Observation>)> = vec![(&call_turn, None)];
    assert_eq!(
        direct.retokenization_drift(&task(), &one).expect("drift"),
        Some(false)
    );
    let two: Vec<(&[u32], Option<&Observation>)> =
        vec![(&call_turn, Some(&tests)), (&call_turn, None)];
    assert_eq!(
        direct.retokenization_drift(&task(), &two).expect("drift"),
        Some(true)
    );
}

#[test]
fn codec_basics_and_load_errors() {
    let Some(codec) = qwen3(true) else { return };
    let special = codec.special_tokens();
    assert_eq!(codec.stop_ids(), vec![special.im_end, special.endoftext]);
    assert_eq!(codec.pad_id(), special.endoftext);
    assert_eq!(codec.max_action_tokens(), 256);
    assert!(codec
        .decode(&encode(codec, "<tool_call>\n{}\n</tool_call><|im_end|>"))
        .contains("<tool_call>"));
    assert_eq!(default_tool_specs().len(), 4);
    // TinyAgent has no template: no drift to report.
    assert_eq!(
        TinyCodec::for_gym()
            .retokenization_drift(&task(), &[])
            .expect("drift"),
        None
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let err = Qwen3Codec::from_dir(dir.path(), options(true)).expect_err("no tokenizer");
    assert!(
        err.to_string().contains("tokenizer.json"),
        "the error names the file: {err}"
    );
    let bad = Qwen3CodecOptions {
        max_observation_tokens: 4,
        ..options(true)
    };
    let err = Qwen3Codec::from_dir(dir.path(), bad).expect_err("too small");
    assert!(
        matches!(
            err,
            ChatError::InvalidOption {
                option: "max_observation_tokens",
                ..
            }
        ),
        "{err}"
    );
}
