//! The chat template's Python compatibility: `raise_exception`, Python string methods,
//! `strftime` formats and the error for a model folder without a template.

use std::collections::BTreeMap;

use agentrl_chat::template::{strftime_utc, ChatTemplate, RenderOptions};
use agentrl_chat::ChatError;

#[test]
fn raise_exception_and_python_methods() {
    let template = ChatTemplate::from_source(
        "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}{{ messages[0].content.strip().split(',')[1].upper() }}".into(),
        BTreeMap::new(),
        "inline".into(),
    )
    .expect("compiles");
    let ok = template
        .render(
            &[serde_json::json!({"role": "user", "content": "  a,b  "})],
            None,
            RenderOptions::default(),
        )
        .expect("renders");
    assert_eq!(ok, "B");
    let err = template
        .render(
            &[serde_json::json!({"role": "system", "content": "x"})],
            None,
            RenderOptions::default(),
        )
        .expect_err("raises");
    assert!(
        err.to_string().contains("first message must be user"),
        "{err}"
    );
}

#[test]
fn strftime_formats_known_instants() {
    // 2024-02-29 13:05:09 UTC was a Thursday, day 60 of the year.
    let t = 1_709_211_909;
    assert_eq!(
        strftime_utc("%Y-%m-%d %H:%M:%S", t).unwrap(),
        "2024-02-29 13:05:09"
    );
    assert_eq!(
        strftime_utc("%d %b %Y, %A %-I%p %j", t).unwrap(),
        "29 Feb 2024, Thursday 1PM 060"
    );
    assert_eq!(strftime_utc("%a %B %-d", 0).unwrap(), "Thu January 1");
    assert!(strftime_utc("%Q", 0).is_err());
}

#[test]
fn missing_template_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").expect("write");
    let err = ChatTemplate::from_model_dir(dir.path()).expect_err("no template");
    assert!(matches!(err, ChatError::MissingTemplate { .. }), "{err}");
}
