//! `agentrl serve`'s helpers: `generation_config.json` defaults and the log-probs of each
//! server kind.

use agentrl_engine::sampling::scaled_log_softmax;
use agentrl_engine::serve::{mode_log_softmax, top_entries, GenerationDefaults};
use agentrl_engine::{LogprobKind, SamplingParams};

#[test]
fn generation_config_fills_what_it_names() {
    let d = GenerationDefaults::from_json(
        r#"{"temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [5, 6]}"#,
    )
    .unwrap();
    assert_eq!(d.temperature, Some(0.6));
    assert_eq!(d.top_k, Some(20));
    assert_eq!(d.top_p, Some(0.95));
    assert_eq!(d.eos_token_ids, vec![5, 6]);
    assert_eq!(d.max_new_tokens, None);
    let err = GenerationDefaults::from_json(r#"{"top_k": "x"}"#).unwrap_err();
    assert!(err.to_string().contains("top_k"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        GenerationDefaults::from_model_dir(dir.path()).unwrap(),
        GenerationDefaults::default()
    );
}

#[test]
fn processed_log_probs_renormalise_over_the_kept_tokens() {
    let logits = [2.0f32, 1.0, 0.0, -1.0];
    let sampling = SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 2,
    };
    let processed = mode_log_softmax(&logits, LogprobKind::Processed, &sampling);
    let kept: f64 = processed.iter().map(|x| x.exp()).sum();
    assert!((kept - 1.0).abs() < 1e-12);
    assert_eq!(processed[2], f64::NEG_INFINITY);
    let raw = mode_log_softmax(&logits, LogprobKind::Raw, &sampling);
    assert!(processed[0] > raw[0]);
    let hot = SamplingParams {
        temperature: 2.0,
        ..sampling
    };
    let scaled = mode_log_softmax(&logits, LogprobKind::TemperatureScaled, &hot);
    assert!((scaled[0] - scaled_log_softmax(&logits, 2.0)[0]).abs() < 1e-12);
    assert_eq!(
        top_entries(&raw, 2).iter().map(|e| e.0).collect::<Vec<_>>(),
        [0, 1]
    );
}
