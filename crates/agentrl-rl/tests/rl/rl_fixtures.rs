//! Compares every quantity of the RL math core with the PyTorch reference fixtures written by
//! `scripts/make_fixtures.py` (values and gradients, f32 tolerance ≤ 1e-5 relative).

use agentrl_rl::*;

use crate::common::*;

#[test]
fn policy_losses_match_reference_values_gradients_and_diagnostics() {
    let fx = fixture("policy_loss");
    let mask = t2(&fx["mask"]);
    let old = t2(&fx["old_log_probs"]);
    let adv = t2(&fx["advantages"]);
    let weights = t2(&fx["token_weights"]);
    let scale = AggScale {
        max_len: Some(f(&fx["max_len"])),
        ..Default::default()
    };
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 48);
    for case in cases {
        let loss_cfg: PolicyLoss = serde_json::from_value(case["loss"].clone()).unwrap();
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let weighted = case["weighted"].as_bool().unwrap();
        let what = format!("{loss_cfg:?} {agg:?} weighted={weighted}");
        let logp = var2(&fx["log_probs"]);
        let inputs = PolicyLossInputs {
            log_probs: logp.as_tensor(),
            old_log_probs: &old,
            advantages: &adv,
            mask: &mask,
            token_weights: weighted.then_some(&weights),
        };
        let out = compute_policy_loss(&loss_cfg, &inputs, agg, &scale).unwrap();
        assert_close(
            &format!("{what} value"),
            f64::from(scalar(&out.loss)),
            f(&case["value"]),
        );
        let grads = out.loss.backward().unwrap();
        let g = grads
            .get(logp.as_tensor())
            .expect("log_probs gets a gradient");
        assert_rows_close(&format!("{what} grad"), &rows(g), &vec2(&case["grad"]));
        let d = serde_json::to_value(out.diagnostics).unwrap();
        for (key, want) in case["diagnostics"].as_object().unwrap() {
            assert_close(&format!("{what} diag {key}"), f(&d[key]), f(want));
        }
    }
}

#[test]
fn returns_gae_whitening_and_value_loss_match_reference() {
    let fx = fixture("returns");
    let mask = t2(&fx["mask"]);
    let rew = t2(&fx["token_rewards"]);
    let values = t2(&fx["values"]);
    for case in fx["cases"]["discounted"].as_array().unwrap() {
        let got = discounted_returns(&rew, &mask, f(&case["gamma"])).unwrap();
        assert_rows_close("discounted", &rows(&got), &vec2(&case["returns"]));
    }
    for case in fx["cases"]["gae"].as_array().unwrap() {
        let out = gae(&rew, &values, &mask, f(&case["gamma"]), f(&case["lambda"])).unwrap();
        assert_rows_close(
            "gae advantages",
            &rows(&out.advantages),
            &vec2(&case["advantages"]),
        );
        assert_rows_close("gae returns", &rows(&out.returns), &vec2(&case["returns"]));
    }
    let w_in = t2(&fx["whiten_input"]);
    assert_rows_close(
        "whiten",
        &rows(&masked_whiten(&w_in, &mask, true).unwrap()),
        &vec2(&fx["whitened"]),
    );
    assert_rows_close(
        "whiten no shift",
        &rows(&masked_whiten(&w_in, &mask, false).unwrap()),
        &vec2(&fx["whitened_no_shift"]),
    );
    let old_values = t2(&fx["old_values"]);
    let targets = t2(&fx["value_loss_returns"]);
    for case in fx["value_loss"].as_array().unwrap() {
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let v = var2(&fx["values"]);
        let out = value_loss(
            v.as_tensor(),
            &old_values,
            &targets,
            &mask,
            f(&fx["value_loss_clip"]),
            agg,
            &AggScale::default(),
        )
        .unwrap();
        assert_close(
            "value loss",
            f64::from(scalar(&out.loss)),
            f(&case["value"]),
        );
        assert_close(
            "value clipfrac",
            f64::from(out.clipfrac),
            f(&case["clipfrac"]),
        );
        let grads = out.loss.backward().unwrap();
        assert_rows_close(
            "value grad",
            &rows(grads.get(v.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
    }
}

#[test]
fn group_advantages_and_reinforce_pp_match_reference() {
    let fx = fixture("advantages");
    let ids: Vec<usize> = fx["group_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let rewards = vec1(&fx["rewards"]);
    for (baseline, key) in [
        (GroupBaseline::GrpoStd, "grpo"),
        (GroupBaseline::MeanOnly, "mean_only"),
        (GroupBaseline::LeaveOneOut, "rloo"),
    ] {
        let out = group_advantages(&rewards, &ids, baseline).unwrap();
        assert_slice_close(key, &out.per_sequence, &vec1(&fx[key]));
        assert_eq!(out.num_groups, fx["num_groups"].as_u64().unwrap() as usize);
        assert_eq!(
            out.zero_variance_groups,
            fx["zero_variance_groups"].as_u64().unwrap() as usize
        );
        assert_eq!(
            out.singleton_groups,
            fx["singleton_groups"].as_u64().unwrap() as usize
        );
    }
    let filter = dynamic_sampling_filter(&rewards, &ids).unwrap();
    let kept: Vec<usize> = fx["dynamic_sampling_kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(filter.kept_indices, kept);
    assert_eq!(filter.dropped_groups, 1);
    assert_eq!(filter.dropped_sequences, 2);
    let mask = t2(&fx["mask"]);
    let base = reinforce_pp_baseline_advantages(&rewards, &ids, &mask).unwrap();
    assert_rows_close(
        "reinforce++ baseline",
        &rows(&base),
        &vec2(&fx["reinforce_pp_baseline"]),
    );
    let tok = t2(&fx["token_rewards"]);
    let rpp = reinforce_pp_advantages(&tok, &mask, 1.0).unwrap();
    assert_rows_close("reinforce++", &rows(&rpp), &vec2(&fx["reinforce_pp"]));
}

#[test]
fn kl_estimators_entropy_and_controller_match_reference() {
    let fx = fixture("kl_entropy");
    let mask = t2(&fx["mask"]);
    let reference = t2(&fx["ref_log_probs"]);
    for (est, key) in [
        (KlEstimator::K1, "k1"),
        (KlEstimator::K2, "k2"),
        (KlEstimator::K3, "k3"),
    ] {
        let case = &fx["kl"][key];
        let logp = var2(&fx["log_probs"]);
        let per = kl_estimate(logp.as_tensor(), &reference, est).unwrap();
        assert_rows_close(key, &rows(&per), &vec2(&case["per_token"]));
        let (loss, mean_kl) = kl_loss(
            logp.as_tensor(),
            &reference,
            &mask,
            est,
            f(&case["loss_beta"]),
            AggMode::SeqMeanTokenMean,
            &AggScale::default(),
        )
        .unwrap();
        assert_close("kl loss", f64::from(scalar(&loss)), f(&case["loss"]));
        assert_close("kl mean", f64::from(mean_kl), f(&case["mean_kl"]));
        let grads = loss.backward().unwrap();
        assert_rows_close(
            "kl grad",
            &rows(grads.get(logp.as_tensor()).unwrap()),
            &vec2(&case["grad"]),
        );
        let rew = t2(&case["rewards"]);
        let (shaped, _) = apply_kl_to_rewards(
            &rew,
            logp.as_tensor(),
            &reference,
            &mask,
            est,
            f(&case["shaped_beta"]),
        )
        .unwrap();
        assert_rows_close("kl shaped rewards", &rows(&shaped), &vec2(&case["shaped"]));
    }

    let logits_rows: Vec<Vec<Vec<f32>>> =
        fx["logits"].as_array().unwrap().iter().map(vec2).collect();
    let (b, t, v) = (
        logits_rows.len(),
        logits_rows[0].len(),
        logits_rows[0][0].len(),
    );
    let flat: Vec<f32> = logits_rows.iter().flatten().flatten().copied().collect();
    let logits = candle_core::Var::from_vec(flat, (b, t, v), &candle_core::Device::Cpu).unwrap();
    let targets = t2(&fx["targets"])
        .to_dtype(candle_core::DType::U32)
        .unwrap();
    let ent = entropy_from_logits(logits.as_tensor()).unwrap();
    assert_rows_close("entropy", &rows(&ent), &vec2(&fx["entropy"]));
    let lp = token_log_probs(logits.as_tensor(), &targets).unwrap();
    assert_rows_close("token log-probs", &rows(&lp), &vec2(&fx["token_log_probs"]));
    let (bonus, _) = entropy_bonus_loss(
        &ent,
        &mask,
        f(&fx["entropy_coef"]),
        AggMode::TokenMean,
        &AggScale::default(),
    )
    .unwrap();
    let sft = sft_nll_loss(&lp, &mask, AggMode::TokenMean, &AggScale::default()).unwrap();
    let grads = (bonus + sft).unwrap().backward().unwrap();
    let g = grads
        .get(logits.as_tensor())
        .expect("logits get a gradient");
    let got: Vec<f32> = g.flatten_all().unwrap().to_vec1().unwrap();
    let want: Vec<f32> = fx["entropy_plus_sft_grad"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| vec2(m).concat())
        .collect();
    assert_slice_close("entropy+sft grad wrt logits", &got, &want);

    let a = &fx["adaptive"];
    let mut ctrl = KlController::Adaptive(
        AdaptiveKlController::new(f(&a["init"]), f(&a["target"]), f(&a["horizon"])).unwrap(),
    );
    for step in a["steps"].as_array().unwrap() {
        let beta = ctrl
            .update(f(&step["kl"]), step["n_steps"].as_u64().unwrap() as usize)
            .unwrap();
        assert_close("adaptive beta", beta, f(&step["beta"]));
    }
}

#[test]
fn offpolicy_weights_and_mismatch_metrics_match_reference() {
    let fx = fixture("offpolicy");
    let mask = t2(&fx["mask"]);
    let train = t2(&fx["train_log_probs"]);
    let rollout = t2(&fx["rollout_log_probs"]);
    let tis = tis_weights(&train, &rollout, &mask, f(&fx["tis_cap"])).unwrap();
    assert_rows_close("tis", &rows(&tis.weights), &vec2(&fx["tis"]));
    let (lo, hi) = (f(&fx["bounds"][0]), f(&fx["bounds"][1]));
    let (glo, ghi) = (f(&fx["geo_bounds"][0]), f(&fx["geo_bounds"][1]));
    let tok = mis_weights(&train, &rollout, &mask, MisLevel::Token, lo, hi, None).unwrap();
    assert_rows_close("mis token", &rows(&tok.weights), &vec2(&fx["mis_token"]));
    let ice = icepop_weights(&train, &rollout, &mask, lo, hi).unwrap();
    assert_rows_close("icepop", &rows(&ice.weights), &vec2(&fx["mis_token"]));
    let seq = mis_weights(&train, &rollout, &mask, MisLevel::Sequence, lo, hi, None).unwrap();
    assert_rows_close(
        "mis sequence",
        &rows(&seq.weights),
        &vec2(&fx["mis_sequence"]),
    );
    let geo = mis_weights(&train, &rollout, &mask, MisLevel::Geometric, glo, ghi, None).unwrap();
    assert_rows_close(
        "mis geometric",
        &rows(&geo.weights),
        &vec2(&fx["mis_geometric"]),
    );
    let veto = mis_weights(
        &train,
        &rollout,
        &mask,
        MisLevel::Token,
        lo,
        hi,
        Some(f(&fx["veto"])),
    )
    .unwrap();
    assert_rows_close(
        "mis token veto",
        &rows(&veto.weights),
        &vec2(&fx["mis_token_veto"]),
    );
    let m =
        serde_json::to_value(mismatch_metrics(&train, &rollout, &mask, lo, hi).unwrap()).unwrap();
    for (key, want) in fx["metrics"].as_object().unwrap() {
        assert_close(&format!("mismatch {key}"), f(&m[key]), f(want));
    }
}

#[test]
fn sft_dpo_distill_match_reference() {
    let fx = fixture("beyond");
    let mask = t2(&fx["mask"]);
    let logp = var2(&fx["log_probs"]);
    let sft = sft_nll_loss(
        logp.as_tensor(),
        &mask,
        AggMode::TokenMean,
        &AggScale::default(),
    )
    .unwrap();
    assert_close("sft", f64::from(scalar(&sft)), f(&fx["sft_loss"]));
    let grads = sft.backward().unwrap();
    assert_rows_close(
        "sft grad",
        &rows(grads.get(logp.as_tensor()).unwrap()),
        &vec2(&fx["sft_grad"]),
    );
    let seq = sequence_log_probs(logp.as_tensor(), &mask).unwrap();
    assert_slice_close(
        "sequence log-probs",
        &seq.to_vec1::<f32>().unwrap(),
        &vec1(&fx["sequence_log_probs"]),
    );

    let d = &fx["dpo"];
    let chosen = candle_core::Var::from_tensor(&t1(&d["policy_chosen"])).unwrap();
    let rejected = candle_core::Var::from_tensor(&t1(&d["policy_rejected"])).unwrap();
    let out = dpo_loss(
        chosen.as_tensor(),
        rejected.as_tensor(),
        &t1(&d["ref_chosen"]),
        &t1(&d["ref_rejected"]),
        f(&d["beta"]),
    )
    .unwrap();
    assert_close("dpo loss", f64::from(scalar(&out.loss)), f(&d["loss"]));
    assert_close(
        "dpo accuracy",
        f64::from(out.reward_accuracy),
        f(&d["reward_accuracy"]),
    );
    assert_close("dpo margin", f64::from(out.margin), f(&d["margin"]));
    let grads = out.loss.backward().unwrap();
    assert_slice_close(
        "dpo grad chosen",
        &grads
            .get(chosen.as_tensor())
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        &vec1(&d["grad_chosen"]),
    );
    assert_slice_close(
        "dpo grad rejected",
        &grads
            .get(rejected.as_tensor())
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        &vec1(&d["grad_rejected"]),
    );

    let teacher = t2(&fx["teacher_log_probs"]);
    let adv =
        distill_advantages(logp.as_tensor(), &teacher, &mask, f(&fx["distill_coef"])).unwrap();
    assert_rows_close(
        "distill advantages",
        &rows(&adv),
        &vec2(&fx["distill_advantages"]),
    );
}

#[test]
fn pass_estimators_and_overlong_penalty_match_reference() {
    let fx = fixture("eval");
    for case in fx["pass"].as_array().unwrap() {
        let (n, c, k) = (
            case["n"].as_u64().unwrap() as usize,
            case["c"].as_u64().unwrap() as usize,
            case["k"].as_u64().unwrap() as usize,
        );
        let at = pass_at_k(n, c, k).unwrap();
        assert!(
            (at - f(&case["pass_at_k"])).abs() <= 1e-12,
            "pass@{k} n={n} c={c}: {at}"
        );
        let hat = pass_hat_k(n, c, k).unwrap();
        assert!(
            (hat - f(&case["pass_hat_k"])).abs() <= 1e-12,
            "pass^{k} n={n} c={c}: {hat}"
        );
    }
    for case in fx["overlong"].as_array().unwrap() {
        let p = soft_overlong_penalty(
            case["len"].as_u64().unwrap() as usize,
            case["max_len"].as_u64().unwrap() as usize,
            case["cache_len"].as_u64().unwrap() as usize,
        )
        .unwrap();
        assert_close("overlong", f64::from(p), f(&case["penalty"]));
    }
}

#[test]
fn clip_cov_and_kl_cov_match_reference_values_gradients_and_selection_counts() {
    let fx = fixture("cov_gkd");
    let mask = t2(&fx["mask"]);
    let old = t2(&fx["old_log_probs"]);
    let adv = t2(&fx["advantages"]);
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for case in cases {
        let loss_cfg: PolicyLoss = serde_json::from_value(case["loss"].clone()).unwrap();
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let what = format!("{loss_cfg:?} {agg:?}");
        let logp = var2(&fx["log_probs"]);
        let inputs = PolicyLossInputs {
            log_probs: logp.as_tensor(),
            old_log_probs: &old,
            advantages: &adv,
            mask: &mask,
            token_weights: None,
        };
        let out = compute_policy_loss(&loss_cfg, &inputs, agg, &AggScale::default()).unwrap();
        assert_close(
            &format!("{what} value"),
            f64::from(scalar(&out.loss)),
            f(&case["value"]),
        );
        let grads = out.loss.backward().unwrap();
        let g = grads
            .get(logp.as_tensor())
            .expect("log_probs gets a gradient");
        assert_rows_close(&format!("{what} grad"), &rows(g), &vec2(&case["grad"]));
        let d = serde_json::to_value(out.diagnostics).unwrap();
        for (key, want) in case["diagnostics"].as_object().unwrap() {
            assert_close(&format!("{what} diag {key}"), f(&d[key]), f(want));
        }
    }
}

#[test]
fn gkd_generalized_jsd_matches_trl_reference_values_and_student_gradients() {
    let fx = fixture("cov_gkd");
    let gkd = &fx["gkd"];
    let to3 = |v: &serde_json::Value| {
        let planes: Vec<Vec<Vec<f32>>> = v.as_array().unwrap().iter().map(vec2).collect();
        let (b, t, n) = (planes.len(), planes[0].len(), planes[0][0].len());
        let flat: Vec<f32> = planes.into_iter().flatten().flatten().collect();
        candle_core::Tensor::from_vec(flat, (b, t, n), &candle_core::Device::Cpu).unwrap()
    };
    let teacher = to3(&gkd["teacher_logits"]);
    let mask = t2(&gkd["mask"]);
    let cases = gkd["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 16);
    for case in cases {
        let (beta, temp) = (f(&case["beta"]), f(&case["temperature"]));
        let agg: AggMode = serde_json::from_value(case["agg"].clone()).unwrap();
        let what = format!("gkd beta={beta} T={temp} {agg:?}");
        let student = candle_core::Var::from_tensor(&to3(&gkd["student_logits"])).unwrap();
        let per = gkd_jsd_per_token(student.as_tensor(), &teacher, beta, temp).unwrap();
        assert_rows_close(
            &format!("{what} per-token"),
            &rows(&per),
            &vec2(&case["per_token"]),
        );
        let loss = gkd_loss(
            student.as_tensor(),
            &teacher,
            &mask,
            beta,
            temp,
            agg,
            &AggScale::default(),
        )
        .unwrap();
        assert_close(
            &format!("{what} value"),
            f64::from(scalar(&loss)),
            f(&case["value"]),
        );
        let grads = loss.backward().unwrap();
        let g = grads
            .get(student.as_tensor())
            .expect("student gets a gradient");
        let want: Vec<Vec<Vec<f32>>> = case["grad"].as_array().unwrap().iter().map(vec2).collect();
        let got = g.to_vec3::<f32>().unwrap();
        for (i, (gp, wp)) in got.iter().zip(&want).enumerate() {
            assert_rows_close(&format!("{what} grad[{i}]"), gp, wp);
        }
    }
}
