//! `agentrl serve` end to end, written against vLLM's documented `/v1/completions` API rather
//! than our client: the binary serves a tiny random Qwen3 folder on a free port, and plain HTTP
//! requests with JSON bodies check the documented response shapes (OpenAI's completion object,
//! vLLM's `token_ids` / `prompt_logprobs` / `stop_reason` extras, OpenAI's error object), the
//! stop token kept in `token_ids`, and `generation_config.json` filling omitted parameters.

use crate::support::{spawn_server, Served};

use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use serde_json::{json, Value};

const VOCAB: usize = 40;

fn model_folder(dir: &std::path::Path) {
    let config = Qwen3Config {
        vocab_size: VOCAB,
        hidden_size: 16,
        intermediate_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        tie_word_embeddings: true,
        max_position_embeddings: 64,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    Qwen3::random(config, 3, 0.3, &LoadOptions::default())
        .unwrap()
        .save(dir)
        .unwrap();
    // Qwen3's own defaults: what a server applies to any parameter a request leaves out.
    std::fs::write(
        dir.join("generation_config.json"),
        r#"{"temperature": 0.6, "top_k": 20, "top_p": 0.95}"#,
    )
    .unwrap();
}

fn serve(dir: &std::path::Path, extra: &[&str]) -> Served {
    let model = dir.to_str().unwrap();
    let args = [
        &["serve", "--served-model-name", "tiny", "--model", model],
        extra,
    ]
    .concat();
    spawn_server(&args, None)
}

/// `(status, JSON body)` of a request; error statuses are answers too.
fn call(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let request = ureq::request(method, url);
    let result = match body {
        Some(body) => request
            .set("Content-Type", "application/json")
            .send_string(&body.to_string()),
        None => request.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let text = response.into_string().unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

fn completions(served: &Served, body: Value) -> (u16, Value) {
    call(
        "POST",
        &format!("{}/v1/completions", served.url),
        Some(body),
    )
}

fn ids(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn assert_openai_error(status: u16, body: &Value, want_status: u16) {
    assert_eq!(status, want_status, "{body}");
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert_eq!(error["code"], json!(want_status), "{body}");
}

#[test]
fn the_documented_vllm_api_works_against_agentrl_serve() {
    let dir = tempfile::tempdir().unwrap();
    model_folder(dir.path());
    let served = serve(dir.path(), &[]);

    let (status, models) = call("GET", &format!("{}/v1/models", served.url), None);
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny");
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["max_model_len"], 64);
    let (status, version) = call("GET", &format!("{}/version", served.url), None);
    assert_eq!(status, 200);
    assert!(version["version"].is_string());

    // Token-id prompt, every sampling parameter explicit, ids and log-probs back.
    let request = json!({
        "model": "tiny", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 1.0,
        "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "seed": 7,
        "logprobs": 0, "prompt_logprobs": 0, "skip_special_tokens": false,
        "return_token_ids": true, "user": "ignored-field"
    });
    let (status, body) = completions(&served, request.clone());
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].is_string() && body["created"].is_u64());
    assert_eq!(body["model"], "tiny");
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert!(choice["text"].is_string());
    assert_eq!(choice["finish_reason"], "length");
    let tokens = ids(&choice["token_ids"]);
    assert_eq!(tokens.len(), 5);
    assert!(tokens.iter().all(|&t| (t as usize) < VOCAB));
    assert_eq!(ids(&choice["prompt_token_ids"]), vec![1, 2, 3]);
    let logprobs = choice["logprobs"]["token_logprobs"].as_array().unwrap();
    assert_eq!(logprobs.len(), 5);
    assert!(logprobs.iter().all(|lp| lp.as_f64().unwrap() <= 0.0));
    assert_eq!(choice["logprobs"]["tokens"].as_array().unwrap().len(), 5);
    assert_eq!(
        choice["logprobs"]["top_logprobs"].as_array().unwrap().len(),
        5
    );
    let prompt_logprobs = choice["prompt_logprobs"].as_array().unwrap();
    assert_eq!(prompt_logprobs.len(), 3);
    assert!(prompt_logprobs[0].is_null());
    assert!(prompt_logprobs[1]["2"]["logprob"].as_f64().unwrap() <= 0.0);
    assert!(prompt_logprobs[2]["3"]["rank"].as_u64().unwrap() >= 1);
    assert_eq!(body["usage"]["prompt_tokens"], 3);
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(body["usage"]["total_tokens"], 8);
    // Seeded: the same request gives the same completion.
    let (_, again) = completions(&served, request.clone());
    assert_eq!(again["choices"][0]["token_ids"], choice["token_ids"]);

    // With every id a stop id, the first sampled token stops the completion and is kept.
    let all: Vec<u64> = (0..VOCAB as u64).collect();
    let (status, body) = completions(
        &served,
        json!({"model": "tiny", "prompt": [1, 2], "max_tokens": 8, "stop_token_ids": all,
               "logprobs": 0, "return_token_ids": true}),
    );
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    let tokens = ids(&choice["token_ids"]);
    assert_eq!(tokens.len(), 1);
    assert_eq!(choice["stop_reason"], json!(tokens[0]));

    // Omitted sampling parameters are generation_config.json's (T 0.6, top-k 20, top-p
    // 0.95), not vLLM's neutral defaults: the bare request equals the explicit one.
    let bare = json!({"model": "tiny", "prompt": [4, 5, 6], "max_tokens": 6, "seed": 11,
                      "return_token_ids": true});
    let mut folder = bare.clone();
    folder["temperature"] = json!(0.6);
    folder["top_k"] = json!(20);
    folder["top_p"] = json!(0.95);
    let (_, from_bare) = completions(&served, bare.clone());
    let (_, from_folder) = completions(&served, folder);
    assert_eq!(
        from_bare["choices"][0]["token_ids"],
        from_folder["choices"][0]["token_ids"]
    );
    // max_tokens defaults to 16.
    let (_, short) = completions(
        &served,
        json!({"model": "tiny", "prompt": [4], "return_token_ids": true}),
    );
    assert_eq!(ids(&short["choices"][0]["token_ids"]).len(), 16);

    // Errors in OpenAI's shape.
    let (status, body) = completions(&served, json!({"model": "nope", "prompt": [1]}));
    assert_openai_error(status, &body, 404);
    let (status, body) = completions(&served, json!({"model": "tiny"}));
    assert_openai_error(status, &body, 400);
    let (status, body) = completions(
        &served,
        json!({"model": "tiny", "prompt": [1], "max_tokens": 100}),
    );
    assert_openai_error(status, &body, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 64"));
    let (status, body) = completions(
        &served,
        json!({"model": "tiny", "prompt": [1], "stop": ["\n"]}),
    );
    assert_openai_error(status, &body, 400);
    let (status, body) = call(
        "POST",
        &format!("{}/v1/load_lora_adapter", served.url),
        Some(json!({"lora_name": "a", "lora_path": "/no/such/adapter"})),
    );
    assert_openai_error(status, &body, 400);
    let (status, body) = call(
        "POST",
        &format!("{}/v1/unload_lora_adapter", served.url),
        Some(json!({"lora_name": "a"})),
    );
    assert_openai_error(status, &body, 404);
    let (status, body) = call("GET", &format!("{}/no/such/route", served.url), None);
    assert_openai_error(status, &body, 404);
}

#[test]
fn a_forced_temperature_and_a_logprobs_mode_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    model_folder(dir.path());
    let request = json!({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 6, "seed": 5,
                         "temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0,
                         "return_token_ids": true});
    let sample = |extra: &[&str]| {
        let served = serve(dir.path(), extra);
        let (status, body) = completions(&served, request.clone());
        assert_eq!(status, 200, "{body}");
        body["choices"][0].clone()
    };
    let scaled = sample(&["--logprobs-mode", "temperature-scaled"]);
    let raw = sample(&[]);
    // At T = 1 raw and temperature-scaled log-probs agree.
    assert_eq!(scaled["token_ids"], raw["token_ids"]);
    let lps = |c: &Value| -> Vec<f64> {
        c["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    for (a, b) in lps(&scaled).iter().zip(lps(&raw)) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    // Forced to T = 0.3, the temperature-scaled log-probs are no longer those of T = 1.
    let forced = sample(&[
        "--logprobs-mode",
        "temperature-scaled",
        "--force-temperature",
        "0.3",
    ]);
    assert!(lps(&forced)
        .iter()
        .zip(lps(&raw))
        .any(|(a, b)| (a - b).abs() > 1e-3));
}

/// With a key (`--api-key-file`, as vLLM's `--api-key`), every route answers 401 in OpenAI's
/// error shape to a request without `Authorization: Bearer KEY`, and works with it.
#[test]
fn with_a_key_every_request_must_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    model_folder(dir.path());
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sesame\n").unwrap();
    let served = serve(dir.path(), &["--api-key-file", key_file.to_str().unwrap()]);
    let models = format!("{}/v1/models", served.url);
    let (status, body) = call("GET", &models, None);
    assert_openai_error(status, &body, 401);
    let (status, body) = call(
        "POST",
        &format!("{}/v1/completions", served.url),
        Some(json!({"model": "tiny", "prompt": [1, 2], "max_tokens": 1})),
    );
    assert_openai_error(status, &body, 401);
    let keyed = ureq::get(&models)
        .set("Authorization", "Bearer sesame")
        .call()
        .unwrap();
    assert_eq!(keyed.status(), 200);
}

/// `--cpu-matmul` (the run config's `engine.cpu_matmul`): `amx` with `--dtype bf16` is refused
/// at start naming the flag; where the CPU has AMX, a server on it samples the same tokens as
/// the f32 server over a 20-token prompt (past the 16 rows from which the AMX path runs) with
/// log-probs within 1e-4; without AMX, `amx` is refused naming the flag and `auto` serves f32.
#[test]
fn cpu_matmul_amx_serves_within_1e4_of_f32_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Hidden, MLP and query widths are whole 32 x 32 blocks, so those weights pack.
    let config = Qwen3Config {
        vocab_size: 64,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        tie_word_embeddings: true,
        max_position_embeddings: 64,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    Qwen3::random(config, 4, 0.1, &LoadOptions::default())
        .unwrap()
        .save(dir.path())
        .unwrap();
    let model = dir.path().to_str().unwrap();
    let refused = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentrl"))
            .args(["serve", "--model", model, "--port", "0"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} started");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(stderr.contains("--cpu-matmul"), "{extra:?}: {stderr}");
    };
    refused(&["--cpu-matmul", "amx", "--dtype", "bf16"]);
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 64).collect();
    let request = json!({"model": "tiny", "prompt": prompt, "max_tokens": 6, "seed": 2,
                         "temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0,
                         "prompt_logprobs": 0, "return_token_ids": true});
    let sample = |extra: &[&str]| {
        let served = serve(dir.path(), extra);
        let (status, body) = completions(&served, request.clone());
        assert_eq!(status, 200, "{body}");
        body["choices"][0].clone()
    };
    if !agentrl_model::fused::amx_matmul::amx_available() {
        refused(&["--cpu-matmul", "amx"]);
        sample(&["--cpu-matmul", "auto"]);
        eprintln!("no AMX on this CPU: the AMX server itself is not checked");
        return;
    }
    let f32_path = sample(&[]);
    let amx = sample(&["--cpu-matmul", "amx"]);
    assert_eq!(amx["token_ids"], f32_path["token_ids"]);
    let gap = crate::support::max_abs_gap(
        &amx["logprobs"]["token_logprobs"],
        &f32_path["logprobs"]["token_logprobs"],
    );
    eprintln!("--cpu-matmul amx against f32: max |log-prob gap| {gap:.2e}");
    assert!(gap <= 1e-4, "{gap}");
    // Two f32 servers agree to the bit; the first token's prefill ran on the AMX path.
    assert!(gap > 0.0, "the AMX path did not run");
}

/// The HTTP stack `agentrl serve` shares with `agentrl gym serve`: a declared body that never
/// arrives is answered 408 within the read time-out, and SIGTERM with a connection open and a
/// request half-sent ends the process within a few seconds, exit status 0.
#[test]
fn a_stalled_body_is_a_408_and_sigterm_exits_quickly() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    model_folder(dir.path());
    let mut served = serve(dir.path(), &["--read-timeout-s", "1"]);
    let addr = served.url.trim_start_matches("http://").to_string();
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    stalled
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: s\r\nContent-Length: 500\r\n\r\n{")
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut answer = String::new();
    let _ = stalled.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A second request left half-sent while the signal comes.
    let mut open = std::net::TcpStream::connect(&addr).unwrap();
    open.write_all(b"GET /health HTTP/1.1\r\nHost").unwrap();
    let signalled = Instant::now();
    let status = served.terminate(Duration::from_secs(10));
    assert!(
        signalled.elapsed() < Duration::from_secs(8),
        "agentrl serve took {:?} to exit on SIGTERM",
        signalled.elapsed()
    );
    assert!(status.success(), "{status}");
}
