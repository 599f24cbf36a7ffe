//! The OpenAI-style wire types: prompt forms, error bodies and omitted fields.

use agentrl_engine::remote::wire::{error_message, CompletionRequest, Prompt};

#[test]
fn prompts_and_errors_parse_in_every_documented_form() {
    let ids: Prompt = serde_json::from_str("[1, 2, 3]").unwrap();
    assert_eq!(ids, Prompt::Ids(vec![1, 2, 3]));
    let batch: Prompt = serde_json::from_str("[[1], [2, 3]]").unwrap();
    assert_eq!(batch, Prompt::IdBatch(vec![vec![1], vec![2, 3]]));
    let text: Prompt = serde_json::from_str("\"hi\"").unwrap();
    assert_eq!(text, Prompt::Text("hi".into()));
    assert_eq!(
        error_message(r#"{"error": {"message": "bad", "type": "BadRequestError"}}"#),
        "bad"
    );
    assert_eq!(
        error_message(r#"{"object": "error", "message": "old"}"#),
        "old"
    );
    assert_eq!(error_message("plain"), "plain");
    let long = "é".repeat(600);
    assert!(error_message(&long).ends_with('…'));
}

#[test]
fn omitted_fields_stay_omitted_on_the_wire() {
    let body = serde_json::to_value(CompletionRequest {
        max_tokens: Some(4),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(body, serde_json::json!({"max_tokens": 4}));
}
