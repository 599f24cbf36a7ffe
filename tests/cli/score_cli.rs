//! `agentrl score` end to end: a tiny random Qwen3 with the real Qwen3 vocabulary size, saved as
//! an HF folder next to the shared tokenizer and template, scored through the binary; the
//! output is checked against the tokenizer, the template and the differentiable forward pass.

use std::process::Command;

use agentrl_chat::qwen::QwenTokenizer;
use agentrl_chat::template::{ChatTemplate, RenderOptions};
use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use candle_core::{Device, Tensor};

fn tiny_config() -> Qwen3Config {
    Qwen3Config {
        vocab_size: 151_936,
        hidden_size: 16,
        intermediate_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        tie_word_embeddings: true,
        max_position_embeddings: 4096,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    }
}

/// Log-probs of `ids[1..]` from the differentiable (training) forward pass.
fn reference_logprobs(model: &Qwen3, ids: &[u32]) -> Vec<f32> {
    let n = ids.len();
    let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &Device::Cpu).unwrap();
    let targets = Tensor::from_slice(&ids[1..], (1, n - 1), &Device::Cpu).unwrap();
    let lp = model.token_logprobs(&inputs, &targets).unwrap();
    lp.squeeze(0).unwrap().to_vec1().unwrap()
}

fn as_u32s(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// The shared Qwen3 tokenizer and template; `None` (skip) only outside CI.
fn assets() -> Option<std::path::PathBuf> {
    agentrl_chat::qwen3_assets_for_tests()
}

fn run_score(model_dir: &std::path::Path, input: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["score", "--model"])
        .arg(model_dir)
        .arg("--input")
        .arg(input)
        .output()
        .unwrap()
}

#[test]
fn score_prints_ids_and_next_token_logprobs_for_text_and_chat_lines() {
    let Some(assets) = assets() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = Qwen3::random(tiny_config(), 5, 0.5, &LoadOptions::default()).unwrap();
    model.save(dir.path()).unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(assets.join(file), dir.path().join(file)).unwrap();
    }
    let messages = serde_json::json!([
        {"role": "user", "content": "Fix add() in calc.py"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "read", "arguments": {"path": "calc.py"}}}]},
        {"role": "tool", "content": "def add(a, b):\n    return a - b\n"},
        {"role": "assistant", "content": "Done."}
    ]);
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "read", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    let text = "def add(a, b):\n    return a + b  # ünïcode → ok";
    let input = dir.path().join("input.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n{}\n",
            serde_json::json!({"text": text}),
            serde_json::json!({"messages": messages, "tools": tools})
        ),
    )
    .unwrap();

    let output = run_score(dir.path(), &input);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "score failed: {stderr}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");

    let tokenizer = QwenTokenizer::from_dir(&assets).unwrap();
    let template = ChatTemplate::from_model_dir(&assets).unwrap();
    let rendered = template
        .render(
            messages.as_array().unwrap(),
            Some(tools.as_array().unwrap()),
            RenderOptions::default(),
        )
        .unwrap();
    assert!(!rendered.ends_with("<|im_start|>assistant\n"));
    let expected_ids = [
        tokenizer.encode(text, false).unwrap(),
        tokenizer.encode(&rendered, false).unwrap(),
    ];
    let loaded = Qwen3::load(dir.path(), &LoadOptions::default()).unwrap();
    for (line, expected) in lines.iter().zip(&expected_ids) {
        let ids = as_u32s(&line["ids"]);
        assert_eq!(&ids, expected);
        let logprobs: Vec<f32> = line["logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(logprobs.len(), ids.len() - 1);
        let reference = reference_logprobs(&loaded, &ids);
        for (ours, theirs) in logprobs.iter().zip(&reference) {
            assert!((ours - theirs).abs() <= 1e-4, "{ours} vs {theirs}");
            assert!(*ours < 0.0);
        }
    }
    // The chat line really went through the template: it starts with <|im_start|>.
    assert_eq!(
        as_u32s(&lines[1]["ids"])[0],
        tokenizer.token_id("<|im_start|>").unwrap()
    );
}

#[test]
fn score_names_the_bad_line() {
    let Some(assets) = assets() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = Qwen3::random(tiny_config(), 1, 0.5, &LoadOptions::default()).unwrap();
    model.save(dir.path()).unwrap();
    std::fs::copy(
        assets.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let input = dir.path().join("bad.jsonl");
    std::fs::write(&input, "{\"text\": \"ok\"}\n{\"neither\": 1}\n").unwrap();
    let output = run_score(dir.path(), &input);
    assert!(!output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 1);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.jsonl:2"), "{stderr}");
}

/// The committed script makes a folder `score` loads; `--tokenizer` takes the tokenizer from
/// another folder when the model folder has only weights.
#[test]
fn the_tiny_qwen3_script_makes_a_folder_score_loads_and_tokenizer_is_a_flag() {
    let Some(assets) = assets() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::tiny_qwen3(dir.path(), &[]);
    let input = dir.path().join("input.jsonl");
    std::fs::write(&input, "{\"text\": \"def add(a, b): return a + b\"}\n").unwrap();
    let scored = run_score(&out, &input);
    assert!(
        scored.status.success(),
        "{}",
        String::from_utf8_lossy(&scored.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&scored.stdout).unwrap();
    let ids = as_u32s(&line["ids"]);
    assert_eq!(
        ids,
        QwenTokenizer::from_dir(&assets)
            .unwrap()
            .encode("def add(a, b): return a + b", false)
            .unwrap()
    );

    // Weights only: refused without --tokenizer, scored with it.
    let bare = dir.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(out.join(file), bare.join(file)).unwrap();
    }
    assert!(!run_score(&bare, &input).status.success());
    let with_flag = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["score", "--model"])
        .arg(&bare)
        .arg("--tokenizer")
        .arg(&assets)
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        with_flag.status.success(),
        "{}",
        String::from_utf8_lossy(&with_flag.stderr)
    );
    assert_eq!(with_flag.stdout, scored.stdout);
}

/// `--cpu-matmul` (as `agentrl serve`'s): `amx` with `--dtype bf16` is refused naming the flag;
/// where the CPU has AMX, scoring a 30-token text (past the 16 rows from which the AMX path
/// runs) gives the same ids as f32 and log-probs within 1e-4 of them, and not bit-equal (the
/// AMX path ran); without AMX, `amx` is refused naming the flag and `auto` scores as f32.
#[test]
fn score_on_amx_is_within_1e4_of_f32_or_is_refused() {
    let Some(assets) = assets() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Hidden, MLP, query and vocabulary widths are whole 32 x 32 blocks, so those weights pack.
    let config = Qwen3Config {
        hidden_size: 32,
        intermediate_size: 64,
        ..tiny_config()
    };
    Qwen3::random(config, 4, 0.1, &LoadOptions::default())
        .unwrap()
        .save(dir.path())
        .unwrap();
    std::fs::copy(
        assets.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let input = dir.path().join("input.jsonl");
    let text = "def mean(values):\n    total = sum(values)\n    return total // len(values)  # the bug: floor division";
    std::fs::write(&input, format!("{}\n", serde_json::json!({ "text": text }))).unwrap();
    let score = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentrl"))
            .args(["score", "--model"])
            .arg(dir.path())
            .arg("--input")
            .arg(&input)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = |extra: &[&str]| {
        let out = score(extra);
        assert!(!out.status.success(), "{extra:?} scored");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(stderr.contains("--cpu-matmul"), "{extra:?}: {stderr}");
    };
    let scored = |extra: &[&str]| -> serde_json::Value {
        let out = score(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?}: {stderr}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    refused(&["--cpu-matmul", "amx", "--dtype", "bf16"]);
    let f32_path = scored(&[]);
    if !agentrl_model::fused::amx_matmul::amx_available() {
        refused(&["--cpu-matmul", "amx"]);
        assert_eq!(scored(&["--cpu-matmul", "auto"]), f32_path);
        eprintln!("no AMX on this CPU: AMX scoring itself is not checked");
        return;
    }
    let amx = scored(&["--cpu-matmul", "amx"]);
    assert_eq!(amx["ids"], f32_path["ids"]);
    assert!(as_u32s(&amx["ids"]).len() > 17, "{}", amx["ids"]);
    let gap = crate::support::max_abs_gap(&amx["logprobs"], &f32_path["logprobs"]);
    eprintln!("score --cpu-matmul amx against f32: max |log-prob gap| {gap:.2e}");
    assert!(gap <= 1e-4, "{gap}");
    assert!(gap > 0.0, "the AMX path did not run");
}
