//! The remote engine's response parsing (vLLM and SGLang, trimmed stop tokens) and its
//! config errors.

use agentrl_engine::remote::{
    parse_sglang_completion, parse_vllm_completion, Balance, Protocol, RemoteConfig,
};
use agentrl_engine::SamplingParams;
use agentrl_engine::{FinishReason, GenerateParams, LogprobKind};

fn params(stop: &[u32]) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams::default(),
        max_tokens: 8,
        stop: stop.to_vec(),
    }
}

#[test]
fn vllm_responses_parse_with_and_without_token_ids() {
    let with_ids = r#"{"choices": [{"index": 0, "text": "", "finish_reason": "stop",
        "stop_reason": 7, "token_ids": [3, 7],
        "logprobs": {"token_logprobs": [-0.5, -1.0], "tokens": ["a", "b"]}}]}"#;
    let (tokens, lps, finish, _) = parse_vllm_completion(with_ids, &params(&[7])).unwrap();
    assert_eq!(
        (tokens, lps, finish),
        (vec![3, 7], vec![-0.5, -1.0], FinishReason::Stop)
    );
    let old = r#"{"choices": [{"finish_reason": "length",
        "logprobs": {"token_logprobs": [-0.5], "tokens": ["token_id:4"]}}]}"#;
    assert_eq!(parse_vllm_completion(old, &params(&[])).unwrap().0, vec![4]);
    let trimmed = r#"{"choices": [{"finish_reason": "stop", "stop_reason": 7,
        "token_ids": [3], "logprobs": {"token_logprobs": [-0.5]}}]}"#;
    let err = parse_vllm_completion(trimmed, &params(&[7])).err().unwrap();
    assert!(!err.retryable && err.error.to_string().contains("left it out"));
    let aborted = r#"{"choices": [{"finish_reason": "abort", "token_ids": []}]}"#;
    assert!(
        parse_vllm_completion(aborted, &params(&[]))
            .err()
            .unwrap()
            .retryable
    );
}

#[test]
fn sglang_responses_restore_a_trimmed_stop_token() {
    let trimmed = r#"{"text": "", "output_ids": [3], "meta_info": {
        "finish_reason": {"type": "stop", "matched": 7}, "weight_version": "5",
        "output_token_logprobs": [[-0.5, 3, null], [-1.0, 7, null]]}}"#;
    let (tokens, lps, finish, version) = parse_sglang_completion(trimmed, &params(&[7])).unwrap();
    assert_eq!(tokens, vec![3, 7]);
    assert_eq!(lps, vec![-0.5, -1.0]);
    assert_eq!(finish, FinishReason::Stop);
    assert_eq!(version, Some(5));
    let mismatched = r#"{"output_ids": [3], "meta_info": {
        "finish_reason": {"type": "length"}, "output_token_logprobs": [[-0.5, 4, null]]}}"#;
    assert!(parse_sglang_completion(mismatched, &params(&[]))
        .err()
        .unwrap()
        .error
        .to_string()
        .contains("is for token 4"));
}

#[test]
fn config_errors_name_the_field() {
    let mut config = RemoteConfig::new(Protocol::Vllm, vec![], "m");
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("endpoints"));
    config.endpoints = vec!["https://x".into()];
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("http://"));
    config.endpoints = vec!["http://x".into()];
    config.max_in_flight = 0;
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("max_in_flight"));
    let parsed: RemoteConfig = toml_like(
        r#"{"protocol": "sglang", "endpoints": ["http://a:1"], "model": "m",
            "balance": "round-robin", "logprob_kind": "processed"}"#,
    );
    assert_eq!(parsed.balance, Balance::RoundRobin);
    assert_eq!(parsed.logprob_kind, Some(LogprobKind::Processed));
    assert_eq!(parsed.retries, 3);
}

fn toml_like(json: &str) -> RemoteConfig {
    serde_json::from_str(json).unwrap()
}
