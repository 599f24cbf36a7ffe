//! Compares agentrl-rl with verl's *own* functions (fixtures written by
//! `scripts/make_verl_fixtures.py` from verl 0.9.1; each fixture records its verl, torch and
//! Python versions): values, gradients and verl-named metrics at ≤ 1e-5 relative in f32.

use std::collections::BTreeMap;

use agentrl_rl::*;
use serde_json::Value;

use crate::common::*;

fn verl_fixture(name: &str) -> Value {
    let fx = fixture(name);
    assert_eq!(
        fx["versions"]["verl"].as_str(),
        Some("0.9.1"),
        "{name}: made from verl 0.9.1"
    );
    assert!(fx["versions"]["torch"].is_string() && fx["versions"]["python"].is_string());
    fx
}

fn scale_of(global: &Value) -> AggScale {
    match global.as_object() {
        Some(g) if !g.is_empty() => AggScale::verl(
            g["dp_size"].as_u64().unwrap() as usize,
            g.get("batch_num_tokens").map(f),
            g.get("global_batch_size").map(f),
            g.get("loss_scale_factor").map(f),
        ),
        _ => AggScale::default(),
    }
}

fn ids(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn masked(rows: &[Vec<f32>], mask: &[Vec<f32>]) -> Vec<Vec<f32>> {
    rows.iter()
        .zip(mask)
        .map(|(r, m)| r.iter().zip(m).map(|(a, b)| a * b).collect())
        .collect()
}

fn assert_metrics(what: &str, got: &BTreeMap<String, f64>, want: &Value) {
    let want = want.as_object().unwrap();
    let got_keys: Vec<&String> = got.keys().collect();
    let mut want_keys: Vec<&String> = want.keys().collect();
    want_keys.sort();
    assert_eq!(got_keys, want_keys, "{what}: metric names");
    for (k, v) in want {
        assert_close(&format!("{what} {k}"), got[k], f(v));
    }
}

#[test]
fn aggregation_global_batch_and_value_loss_match_verl() {
    let fx = verl_fixture("verl_aggregation");
    let mask = t2(&fx["mask"]);
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 15);
    for case in cases {
        let mode: AggMode = serde_json::from_value(case["mode"].clone()).unwrap();
        let scale = scale_of(&case["global"]);
        let what = format!("agg {mode:?} {}", case["global"]);
        let x = var2(&fx["loss_mat"]);
        let loss = aggregate(x.as_tensor(), &mask, mode, &scale).unwrap();
        assert_close(&what, f64::from(scalar(&loss)), f(&case["value"]));
        let g = loss.backward().unwrap();
        assert_rows_close(
            &what,
            &rows(g.get(x.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
    }
    let old = t2(&fx["old_values"]);
    let ret = t2(&fx["returns"]);
    for case in fx["value_cases"].as_array().unwrap() {
        let mode: AggMode = serde_json::from_value(case["mode"].clone()).unwrap();
        let scale = scale_of(&case["global"]);
        let what = format!("value loss {mode:?} {}", case["global"]);
        let v = var2(&fx["values"]);
        let out = value_loss(v.as_tensor(), &old, &ret, &mask, 0.5, mode, &scale).unwrap();
        assert_close(&what, f64::from(scalar(&out.loss)), f(&case["value"]));
        assert_close(&what, f64::from(out.clipfrac), f(&case["clipfrac"]));
        let g = out.loss.backward().unwrap();
        assert_rows_close(
            &what,
            &rows(g.get(v.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
    }
    let x = t2(&fx["masked_var_input"]);
    assert_close(
        "masked_var unbiased",
        masked_var(&x, &mask, true).unwrap(),
        f(&fx["masked_var_unbiased"]),
    );
    assert_close(
        "masked_var biased",
        masked_var(&x, &mask, false).unwrap(),
        f(&fx["masked_var_biased"]),
    );
}

#[test]
fn advantage_estimators_match_verl() {
    let fx = verl_fixture("verl_advantages");
    let mask = t2(&fx["mask"]);
    let m = rows(&mask);
    let group = ids(&fx["group_ids"]);
    let tok = t2(&fx["token_rewards"]);
    let dense = t2(&fx["dense_rewards"]);
    let inputs = AdvantageInputs {
        token_rewards: &tok,
        mask: &mask,
        group_ids: Some(&group),
        values: None,
    };
    let est = |e: &str| -> AdvantageEstimator { serde_json::from_str(e).unwrap() };
    let run = |e: &str, x: &AdvantageInputs<'_>, extras: &AdvantageExtras<'_>| {
        rows(
            &compute_advantages_with(&est(e), x, extras)
                .unwrap()
                .advantages,
        )
    };
    let none = AdvantageExtras::default();
    assert_rows_close(
        "opo",
        &run(r#"{"kind":"opo"}"#, &inputs, &none),
        &vec2(&fx["opo"]),
    );
    assert_rows_close(
        "gpg",
        &run(r#"{"kind":"gpg"}"#, &inputs, &none),
        &vec2(&fx["gpg"]),
    );
    assert_rows_close(
        "gpg f_norm",
        &run(r#"{"kind":"gpg","f_norm":2.5}"#, &inputs, &none),
        &vec2(&fx["gpg_f2"]),
    );

    let baselines = vec1(&fx["remax_baselines"]);
    let dense_inputs = AdvantageInputs {
        token_rewards: &dense,
        ..inputs
    };
    let remax = compute_advantages_with(
        &est(r#"{"kind":"remax"}"#),
        &dense_inputs,
        &AdvantageExtras {
            reward_baselines: Some(&baselines),
            ..Default::default()
        },
    )
    .unwrap();
    assert_rows_close(
        "remax advantages",
        &rows(&remax.advantages),
        &masked(&vec2(&fx["remax_advantages"]), &m),
    );
    assert_rows_close(
        "remax returns",
        &rows(remax.returns.as_ref().unwrap()),
        &masked(&vec2(&fx["remax_returns"]), &m),
    );

    let comps: Vec<Vec<f32>> = fx["gdpo_components"]
        .as_array()
        .unwrap()
        .iter()
        .map(vec1)
        .collect();
    let weights = vec1(&fx["gdpo_weights"]);
    for norm in [true, false] {
        for weighted in [false, true] {
            let extras = AdvantageExtras {
                reward_components: Some(&comps),
                reward_weights: weighted.then_some(weights.as_slice()),
                ..Default::default()
            };
            let e = format!(r#"{{"kind":"gdpo","norm_by_std":{norm}}}"#);
            let key = format!(
                "{}_{}",
                if norm { "True" } else { "False" },
                if weighted { "True" } else { "False" }
            );
            assert_rows_close(
                &format!("gdpo {key}"),
                &run(&e, &inputs, &extras),
                &vec2(&fx["gdpo"][&key]),
            );
        }
    }

    let pk_ids = ids(&fx["passk_group_ids"]);
    let pk_tok = t2(&fx["passk_token_rewards"]);
    let pk = AdvantageInputs {
        token_rewards: &pk_tok,
        mask: &mask,
        group_ids: Some(&pk_ids),
        values: None,
    };
    for (norm, key) in [(true, "True"), (false, "False")] {
        let e = format!(r#"{{"kind":"grpo_passk","norm_by_std":{norm}}}"#);
        assert_rows_close(
            &format!("passk {key}"),
            &run(&e, &pk, &none),
            &vec2(&fx["passk"][key]),
        );
    }

    // Σπ² from logits, then OTB / TIR-OTB.
    let lg: Vec<Vec<Vec<f32>>> = fx["otb_logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(vec2)
        .collect();
    let (b, t, v) = (lg.len(), lg[0].len(), lg[0][0].len());
    let flat: Vec<f32> = lg.iter().flatten().flatten().copied().collect();
    let logits = candle_core::Tensor::from_vec(flat, (b, t, v), &candle_core::Device::Cpu).unwrap();
    let spi2 = sum_pi_squared(&logits).unwrap();
    assert_rows_close("sum_pi_squared", &rows(&spi2), &vec2(&fx["sum_pi_squared"]));
    let old = t2(&fx["otb_old_log_probs"]);
    let otb_ids = ids(&fx["otb_group_ids"]);
    let is_w = t2(&fx["otb_is_weights"]);
    let otb_inputs = AdvantageInputs {
        token_rewards: &dense,
        mask: &mask,
        group_ids: Some(&otb_ids),
        values: None,
    };
    for kind in ["otb", "tir"] {
        for tail in [true, false] {
            for use_is in [false, true] {
                let name = if kind == "otb" {
                    "optimal_token_baseline"
                } else {
                    "tir_optimal_token_baseline"
                };
                let e = format!(r#"{{"kind":"{name}","handle_zero_tail":{tail}}}"#);
                let extras = AdvantageExtras {
                    old_log_probs: Some(&old),
                    sum_pi_squared: Some(&spi2),
                    rollout_is_weights: use_is.then_some(&is_w),
                    ..Default::default()
                };
                let key = format!(
                    "{kind}_{}_{}",
                    if tail { "True" } else { "False" },
                    if use_is { "True" } else { "False" }
                );
                let out = compute_advantages_with(&est(&e), &otb_inputs, &extras).unwrap();
                assert_rows_close(
                    &format!("{key} advantages"),
                    &rows(&out.advantages),
                    &vec2(&fx["otb"][&key]["advantages"]),
                );
                assert_rows_close(
                    &format!("{key} returns"),
                    &rows(out.returns.as_ref().unwrap()),
                    &masked(&vec2(&fx["otb"][&key]["returns"]), &m),
                );
            }
        }
    }
}

#[test]
fn new_policy_losses_match_verl_values_gradients_and_metrics() {
    let fx = verl_fixture("verl_policy_losses");
    let mask = t2(&fx["mask"]);
    let old = t2(&fx["old_log_probs"]);
    let adv = t2(&fx["advantages"]);
    let weights = t2(&fx["token_weights"]);
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 72 + 45);
    for case in cases {
        let loss: PolicyLoss = serde_json::from_value(case["loss"].clone()).unwrap();
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let weighted = case["weighted"].as_bool().unwrap();
        let scale = scale_of(&case["global"]);
        let what = format!("{loss:?} {agg:?} weighted={weighted} {}", case["global"]);
        let logp = var2(&fx["log_probs"]);
        let x = PolicyLossInputs {
            log_probs: logp.as_tensor(),
            old_log_probs: &old,
            advantages: &adv,
            mask: &mask,
            token_weights: weighted.then_some(&weights),
        };
        let out = compute_policy_loss(&loss, &x, agg, &scale).unwrap();
        assert_close(&what, f64::from(scalar(&out.loss)), f(&case["value"]));
        let g = out.loss.backward().unwrap();
        assert_rows_close(
            &format!("{what} grad"),
            &rows(g.get(logp.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
        if !case["metrics"].is_null() {
            assert_metrics(&what, &out.metrics, &case["metrics"]);
        }
    }
    let rollout = t2(&fx["rollout_log_probs"]);
    let bypass = fx["bypass"].as_array().unwrap();
    assert_eq!(bypass.len(), 16);
    for case in bypass {
        let loss: PolicyLoss = serde_json::from_value(case["loss"].clone()).unwrap();
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let what = format!("bypass {} {agg:?}", case["loss"]);
        let logp = var2(&fx["log_probs"]);
        let x = PolicyLossInputs {
            log_probs: logp.as_tensor(),
            old_log_probs: &rollout,
            advantages: &adv,
            mask: &mask,
            token_weights: None,
        };
        let out = compute_policy_loss(&loss, &x, agg, &AggScale::default()).unwrap();
        assert_close(&what, f64::from(scalar(&out.loss)), f(&case["value"]));
        let g = out.loss.backward().unwrap();
        assert_rows_close(
            &format!("{what} grad"),
            &rows(g.get(logp.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
        assert_metrics(&what, &out.metrics, &case["metrics"]);
    }
}

#[test]
fn kl_variants_match_verl_values_and_gradients() {
    let fx = verl_fixture("verl_kl");
    let mask = t2(&fx["mask"]);
    let reference = t2(&fx["ref_log_probs"]);
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 13);
    for case in cases {
        let est: KlEstimator = serde_json::from_value(case["name"].clone()).unwrap();
        let what = format!("kl {}", case["name"]);
        let logp = var2(&fx["log_probs"]);
        let per = kl_estimate(logp.as_tensor(), &reference, est).unwrap();
        assert_rows_close(&what, &rows(&per), &vec2(&case["per_token"]));
        let (loss, _) = kl_loss(
            logp.as_tensor(),
            &reference,
            &mask,
            est,
            1.0,
            AggMode::TokenMean,
            &AggScale::default(),
        )
        .unwrap();
        assert_close(&what, f64::from(scalar(&loss)), f(&case["loss"]));
        let g = loss.backward().unwrap();
        assert_rows_close(
            &format!("{what} grad"),
            &rows(g.get(logp.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
    }
}

#[test]
fn rollout_correction_matches_verl_weights_masks_and_metrics() {
    let fx = verl_fixture("verl_rollout_corr");
    let train = t2(&fx["train_log_probs"]);
    let rollout = t2(&fx["rollout_log_probs"]);
    let mask = t2(&fx["mask"]);
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 23);
    for case in cases {
        let what = format!("rollout_corr {}", case["config"]);
        let cfg: RolloutCorrectionConfig = serde_json::from_value(case["config"].clone()).unwrap();
        let spec = RolloutCorrectionSpec::from_config(&cfg).unwrap();
        // The parsed spec survives a round trip through verl's spelling.
        let back: RolloutCorrectionSpec =
            serde_json::from_value(serde_json::to_value(spec).unwrap()).unwrap();
        assert_eq!(back, spec, "{what}: round trip");
        let out = rollout_correction_and_rejection(&train, &rollout, &mask, &spec).unwrap();
        match (&out.weights, case["weights"].is_null()) {
            (None, true) => {}
            (Some(w), false) => assert_rows_close(&what, &rows(w), &vec2(&case["weights"])),
            (w, _) => panic!("{what}: weights presence differs (got {})", w.is_some()),
        }
        assert_rows_close(
            &format!("{what} mask"),
            &rows(&out.mask),
            &vec2(&case["mask"]),
        );
        assert_metrics(&what, &out.metrics, &case["metrics"]);
    }
    for cfg in fx["rejected_configs"].as_array().unwrap() {
        let parsed: RolloutCorrectionConfig = serde_json::from_value(cfg.clone()).unwrap();
        let err = RolloutCorrectionSpec::from_config(&parsed);
        assert!(err.is_err(), "{cfg} must be rejected as verl rejects it");
    }
}
