//! SmolLM2's tokenizer and chat template read from its GGUF file, against recorded ids and text.
//!
//! The fixtures come from `crates/agentrl-model/scripts/make_smollm2_fixtures.py` (versions in
//! each file's `generated_by`): ids from llama.cpp (the model's own tokenizer, `smollm`
//! pre-tokenizer) and from transformers' GGUF conversion, and the template rendered by
//! transformers' `apply_chat_template`. The GGUF file comes from `smollm2_gguf_for_tests()`
//! (fetched by `scripts/fetch_smollm2.sh`; CI fetches it first, elsewhere the tests skip).

use std::path::PathBuf;
use std::sync::OnceLock;

use agentrl_chat::gguf::{is_gguf_file, GgufMetadata};
use agentrl_chat::gguf_tokenizer::tokenizer_json;
use agentrl_chat::qwen::QwenTokenizer;
use agentrl_chat::qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
use agentrl_chat::template::{ChatTemplate, RenderOptions, ToolFormat};
use agentrl_chat::ChatCodec;
use agentrl_gym::types::{Action, CandidateEdit, FileView, Observation, ToolCall};
use serde_json::{json, Value};

use crate::qwen3::{fixture, ids};

struct Smol {
    meta: GgufMetadata,
    tokenizer: QwenTokenizer,
    template: ChatTemplate,
    path: PathBuf,
}

fn smol() -> Option<&'static Smol> {
    static SMOL: OnceLock<Option<Smol>> = OnceLock::new();
    SMOL.get_or_init(|| {
        let path = agentrl_chat::smollm2_gguf_for_tests()?;
        let meta = GgufMetadata::read(&path).expect("the GGUF header reads");
        Some(Smol {
            tokenizer: QwenTokenizer::from_gguf_metadata(&meta).expect("the tokenizer builds"),
            template: ChatTemplate::from_gguf(&meta).expect("the template compiles"),
            meta,
            path,
        })
    })
    .as_ref()
}

fn cases(file: &str) -> Vec<Value> {
    fixture(file)["cases"]
        .as_array()
        .expect("cases array")
        .clone()
}

#[test]
fn the_header_is_smollm2s() {
    let Some(smol) = smol() else { return };
    assert!(is_gguf_file(&smol.path));
    assert_eq!(
        smol.meta.require_str("general.architecture").unwrap(),
        "llama"
    );
    assert_eq!(
        smol.meta.require_str("tokenizer.ggml.pre").unwrap(),
        "smollm"
    );
    assert_eq!(smol.tokenizer.vocab_size(), 49_152);
    let recorded = &fixture("smollm2_tokenizer_cases.json")["tokenizer_metadata"];
    for key in ["bos_token_id", "eos_token_id"] {
        let ours = smol.meta.get(&format!("tokenizer.ggml.{key}"));
        let theirs = recorded
            .get(key)
            .or_else(|| recorded.get(format!("tokenizer.ggml.{key}").as_str()));
        assert_eq!(
            ours.and_then(Value::as_u64),
            theirs.and_then(Value::as_u64),
            "{key}"
        );
    }
}

/// The model's own tokenization (llama.cpp's `smollm` pre-tokenizer: every digit alone) on
/// every recorded string: code, unicode, whitespace runs, digits, special tokens.
#[test]
fn token_ids_equal_llama_cpps_on_every_recorded_string() {
    let Some(smol) = smol() else { return };
    let cases = cases("smollm2_tokenizer_cases.json");
    assert!(cases.len() >= 1000, "{} cases", cases.len());
    let mut mismatches = Vec::new();
    for case in &cases {
        let text = case["text"].as_str().expect("text");
        let ours = smol.tokenizer.encode(text, false).expect("encodes");
        if ours != ids(&case["llama_cpp"]) {
            mismatches.push(format!(
                "{text:?}: ours {ours:?}, llama.cpp {:?}",
                case["llama_cpp"]
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} strings differ, first: {}",
        mismatches.len(),
        cases.len(),
        mismatches.first().map_or("", String::as_str)
    );
}

/// The other side of the digit rule: transformers' GGUF conversion merges digit runs. Without
/// the `Digits` step our tokenizer reproduces it exactly, and the two recorded tokenizations
/// differ only on strings with a numeric character (Unicode `N`: digits, ½, ①) in them, and
/// on some of those, so both sides are seen.
#[test]
fn transformers_gguf_ids_differ_from_the_models_only_by_splitting_digits() {
    let Some(smol) = smol() else { return };
    let mut document = tokenizer_json(&smol.meta).expect("tokenizer document");
    document["pre_tokenizer"] = json!({"type": "ByteLevel", "add_prefix_space": false,
        "trim_offsets": true, "use_regex": true});
    let merged_digits: tokenizers::Tokenizer =
        serde_json::from_value(document).expect("the variant builds");
    let mut differing = 0;
    for case in cases("smollm2_tokenizer_cases.json") {
        let text = case["text"].as_str().expect("text");
        let transformers = ids(&case["transformers"]);
        let ours = merged_digits.encode(text, false).expect("encodes");
        assert_eq!(ours.get_ids(), transformers.as_slice(), "{text:?}");
        if transformers != ids(&case["llama_cpp"]) {
            differing += 1;
            // `\p{N}`: not only ASCII digits but ½, ①, Arabic-Indic digits, superscripts.
            assert!(
                text.chars().any(char::is_numeric),
                "{text:?} differs between the two without a numeric character"
            );
        }
    }
    assert!(differing > 0, "no recorded string shows the digit rule");
}

#[test]
fn decoding_the_ids_gives_the_text_back() {
    let Some(smol) = smol() else { return };
    for case in cases("smollm2_tokenizer_cases.json") {
        let text = case["text"].as_str().expect("text");
        let decoded = smol
            .tokenizer
            .decode(&ids(&case["llama_cpp"]), false)
            .expect("decodes");
        assert_eq!(decoded, text);
    }
}

#[test]
fn the_chat_template_renders_as_transformers_does() {
    let Some(smol) = smol() else { return };
    let recorded = fixture("smollm2_template_cases.json");
    let cases = recorded["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20, "{} cases", cases.len());
    assert_eq!(
        smol.meta.require_str("tokenizer.chat_template").unwrap(),
        recorded["chat_template"].as_str().expect("template text")
    );
    assert_eq!(smol.template.tool_format(), ToolFormat::InPrompt);
    for case in cases {
        let messages = case["messages"].as_array().expect("messages");
        let options = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().expect("flag"),
            enable_thinking: false,
        };
        let text = smol
            .template
            .render(messages, None, options)
            .expect("renders");
        assert_eq!(text, case["text"].as_str().expect("text"), "{messages:?}");
    }
}

fn codec(smol: &Smol) -> Qwen3Codec {
    Qwen3Codec::from_dir(
        &smol.path,
        Qwen3CodecOptions {
            max_action_tokens: 96,
            max_observation_tokens: 256,
            enable_thinking: false,
        },
    )
    .expect("the codec loads from the GGUF file")
}

fn task() -> Observation {
    Observation::Task {
        task_id: "calc-add".into(),
        prompt: "`add(2, 3)` returns 6.".into(),
        files: vec!["calc.py".into(), "test_public.py".into()],
        candidates: vec![CandidateEdit {
            path: "calc.py".into(),
            old: "    return a * b\n".into(),
            new: "    return a + b\n".into(),
        }],
    }
}

fn file_view() -> Observation {
    Observation::File(FileView {
        path: "calc.py".into(),
        lines: vec!["def add(a, b):".into(), "    return a * b".into()],
        truncated: false,
    })
}

/// The tool list goes into the system turn, and a demonstrated call parses back to itself.
#[test]
fn the_codec_lists_tools_in_the_system_prompt_and_reads_calls_back() {
    let Some(smol) = smol() else { return };
    let codec = codec(smol);
    let prompt = codec.prompt_text(&task()).expect("prompt");
    let system_end = prompt.find("<|im_end|>").expect("a closed system turn");
    let system = &prompt[..system_end];
    assert!(system.starts_with("<|im_start|>system\n"), "{prompt}");
    for tool in ["\"read\"", "\"test\"", "\"edit\"", "\"submit\""] {
        assert!(system.contains(tool), "{tool} missing from {system}");
    }
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt}");
    let call = ToolCall {
        name: "read".into(),
        arguments: json!({"path": "calc.py"}),
    };
    let demo = codec.demonstration_ids(&call).expect("demonstration");
    assert_eq!(demo.last(), Some(&codec.special_tokens().im_end));
    match codec.parse_action(&demo, &task()) {
        Action::Call(parsed) => assert_eq!(parsed, call),
        other => panic!("the demonstration parses as {other:?}"),
    }
}

/// The observation suffix closes the assistant turn and opens a user turn with the result.
#[test]
fn a_tool_result_comes_back_as_a_tool_response_in_a_user_turn() {
    let Some(smol) = smol() else { return };
    let codec = codec(smol);
    let content = codec.observation_content(&file_view()).expect("content");
    assert!(content.contains("return a * b"), "{content}");
    let suffix = codec.observation_text(&file_view()).expect("suffix");
    assert_eq!(
        suffix,
        format!(
            "\n<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
}

/// A canonical turn re-renders to the same ids; one with other JSON spacing drifts, and the
/// check says so (the phenomenon the drift check exists for).
#[test]
fn the_drift_check_sees_a_re_rendered_call_that_differs_from_the_sampled_one() {
    let Some(smol) = smol() else { return };
    let codec = codec(smol);
    let call = ToolCall {
        name: "read".into(),
        arguments: json!({"path": "calc.py"}),
    };
    let canonical = codec.demonstration_ids(&call).expect("demonstration");
    let result = file_view();
    let clean = codec
        .retokenization_drift(&task(), &[(&canonical, Some(&result))])
        .expect("drift check");
    assert_eq!(clean, Some(false));
    let compact = smol
        .tokenizer
        .encode(
            "<tool_call>{\"name\":\"read\",\"arguments\":{\"path\":\"calc.py\"}}</tool_call><|im_end|>",
            false,
        )
        .expect("encodes");
    assert!(matches!(
        codec.parse_action(&compact, &task()),
        Action::Call(_)
    ));
    let drifted = codec
        .retokenization_drift(&task(), &[(&compact, Some(&result))])
        .expect("drift check");
    assert_eq!(drifted, Some(true));
}

#[test]
fn a_truncated_or_foreign_file_is_refused_naming_the_file() {
    let Some(smol) = smol() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&smol.path).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..4096]).unwrap();
    let err = GgufMetadata::read(&truncated).unwrap_err().to_string();
    assert!(
        err.contains("truncated.gguf") && err.contains("truncated header"),
        "{err}"
    );
    let foreign = dir.path().join("model.gguf");
    std::fs::write(&foreign, b"PK\x03\x04 not a gguf").unwrap();
    assert!(!is_gguf_file(&foreign));
    let err = GgufMetadata::read(&foreign).unwrap_err().to_string();
    assert!(err.contains("model.gguf") && err.contains("magic"), "{err}");
}
