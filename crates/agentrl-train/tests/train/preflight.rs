//! The engine preflight's verdicts on synthetic log-probs: matching semantics pass, other
//! temperatures, other weights and an unrequested top-k are refused by name.

use agentrl_engine::{LogprobKind, SamplingParams};
use agentrl_train::preflight::{compare, log_softmax_at, PreflightSetup};

fn rows(n: usize, vocab: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            (0..vocab)
                .map(|v| ((v * 7 + i * 13) % 17) as f32 * 0.3 - 2.0)
                .collect()
        })
        .collect()
}

fn setup(t: f64) -> PreflightSetup {
    PreflightSetup {
        prompts: vec![],
        sampling: SamplingParams {
            temperature: t,
            ..SamplingParams::default()
        },
        stop: vec![],
        max_tokens: 4,
        declared: LogprobKind::TemperatureScaled,
        model_defaults: None,
        seed: 0,
    }
}

fn sampled(rows: &[Vec<f32>], f: impl Fn(&[f32], usize) -> f64) -> Vec<(u32, f64, Vec<f32>)> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let token = (i * 5) % r.len();
            (token as u32, f(r, token), r.clone())
        })
        .collect()
}

#[test]
fn matching_semantics_pass_and_other_temperatures_are_named() {
    let rows = rows(40, 50);
    let good = sampled(&rows, |r, t| log_softmax_at(r, 0.7, t));
    let report = compare(&good, &setup(0.7), LogprobKind::TemperatureScaled);
    assert!(report.refusal.is_none(), "{:?}", report.refusal);
    assert!(report.expected.mean_abs_gap < 1e-9);

    let raw = sampled(&rows, |r, t| log_softmax_at(r, 1.0, t));
    let report = compare(&raw, &setup(0.7), LogprobKind::TemperatureScaled);
    let reason = report
        .refusal
        .expect("raw log-probs at T = 0.7 are refused");
    assert!(reason.contains("raw"), "{reason}");

    let hot = sampled(&rows, |r, t| log_softmax_at(r, 1.5, t));
    let report = compare(&hot, &setup(1.0), LogprobKind::TemperatureScaled);
    let reason = report
        .refusal
        .expect("T = 1.5 against a config of 1.0 is refused");
    assert!(reason.contains("T = 1.50"), "{reason}");
    assert!((report.fitted_temperature - 1.5).abs() < 1e-6);
}

#[test]
fn small_numeric_drift_is_reported_not_refused_and_other_weights_are_named() {
    let rows = rows(40, 50);
    let drift = sampled(&rows, |r, t| log_softmax_at(r, 1.0, t) + 0.004);
    let report = compare(&drift, &setup(1.0), LogprobKind::TemperatureScaled);
    assert!(report.refusal.is_none());
    assert!((report.expected.mean_abs_gap - 0.004).abs() < 1e-6);

    let other = sampled(&rows, |r, t| {
        log_softmax_at(r, 1.0, (t + 3) % r.len()) - 2.5
    });
    let report = compare(&other, &setup(1.0), LogprobKind::TemperatureScaled);
    let reason = report.refusal.expect("other weights are refused");
    assert!(
        reason.contains("not sampling with the trainer's weights"),
        "{reason}"
    );
}

#[test]
fn a_top_k_the_config_did_not_ask_for_is_seen_in_the_ranks() {
    // A flat 2000-token distribution: sampling 60 tokens all from the top 20 without a
    // truncation is impossible in practice.
    let vocab = 2000;
    let rows: Vec<Vec<f32>> = (0..60)
        .map(|i| {
            (0..vocab)
                .map(|v| ((v * 7919 + i * 31) % vocab) as f32 * 0.001)
                .collect()
        })
        .collect();
    let top20: Vec<(u32, f64, Vec<f32>)> = rows
        .iter()
        .map(|r| {
            let mut order: Vec<usize> = (0..vocab).collect();
            order.sort_by(|&a, &b| r[b].total_cmp(&r[a]));
            let token = order[3];
            (token as u32, log_softmax_at(r, 1.0, token), r.clone())
        })
        .collect();
    let report = compare(&top20, &setup(1.0), LogprobKind::TemperatureScaled);
    let reason = report.refusal.expect("an unrequested top-k is refused");
    assert!(reason.contains("top_k <= 5"), "{reason}");
}
