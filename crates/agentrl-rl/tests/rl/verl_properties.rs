//! Properties of the estimators and losses ported from verl's registry: masked tokens get
//! exactly zero gradient, each loss reduces to PG/PPO at its degenerate setting, the KL
//! straight-through variants carry k2's gradient, verl's k1 rejection orientation, and the
//! bad-input errors name the argument.

use agentrl_rl::*;
use candle_core::{Device, Tensor, Var};
use proptest::prelude::*;

use crate::common::*;

type Rows = Vec<Vec<f32>>;

fn tensor(rows: &[Vec<f32>]) -> Tensor {
    Tensor::from_vec(rows.concat(), (rows.len(), rows[0].len()), &Device::Cpu).unwrap()
}

/// `(log_probs, old_log_probs, advantages, mask)`; every row has a valid first token.
fn batch() -> impl Strategy<Value = (Rows, Rows, Rows, Rows)> {
    (1usize..5, 1usize..7).prop_flat_map(|(b, t)| {
        let m = prop::collection::vec(prop::collection::vec(-3.0f32..-0.05, t), b);
        let d = prop::collection::vec(prop::collection::vec(-0.6f32..0.6, t), b);
        let a = prop::collection::vec(prop::collection::vec(-2.0f32..2.0, t), b);
        let k = prop::collection::vec(prop::collection::vec(prop::bool::ANY, t), b);
        (m, d, a, k).prop_map(|(old, delta, adv, keep)| {
            let logp: Rows = old
                .iter()
                .zip(&delta)
                .map(|(o, d)| o.iter().zip(d).map(|(x, y)| (x + y).min(-1e-3)).collect())
                .collect();
            let mut mask: Rows = keep
                .iter()
                .map(|r| r.iter().map(|&k| f32::from(u8::from(k))).collect())
                .collect();
            for r in &mut mask {
                r[0] = 1.0;
            }
            (logp, old, adv, mask)
        })
    })
}

const MODES: [AggMode; 5] = [
    AggMode::TokenMean,
    AggMode::TokenSum,
    AggMode::SeqMeanTokenSum,
    AggMode::SeqMeanTokenMean,
    AggMode::SeqMeanTokenSumNorm,
];

fn bypass(loss_type: BypassLossType, cfg: &str) -> PolicyLoss {
    let rc: RolloutCorrectionConfig = serde_json::from_str(cfg).unwrap();
    PolicyLoss::BypassMode {
        loss_type,
        clip_low: 0.2,
        clip_high: 0.28,
        clip_ratio_c: 3.0,
        rollout_correction: RolloutCorrectionSpec::from_config(&rc).unwrap(),
    }
}

fn verl_losses() -> Vec<PolicyLoss> {
    vec![
        PolicyLoss::Sapo {
            tau_pos: 1.0,
            tau_neg: 1.05,
        },
        PolicyLoss::GeoMean {
            clip_low: 0.2,
            clip_high: 0.3,
        },
        PolicyLoss::DppoTv {
            clip_low: 0.05,
            clip_high: 0.08,
            clip_ratio_c: 2.0,
        },
        PolicyLoss::DppoKl {
            clip_low: 0.02,
            clip_high: 0.03,
            clip_ratio_c: 20.0,
        },
        PolicyLoss::Gpg,
        PolicyLoss::Dro { dro_beta: 0.7 },
        bypass(
            BypassLossType::PpoClip,
            r#"{"rollout_is":"token","rollout_rs":"token_k1,seq_mean_k3","rollout_rs_threshold":"0.5_1.5,0.5"}"#,
        ),
        bypass(
            BypassLossType::Reinforce,
            r#"{"rollout_is":"sequence","rollout_is_threshold":3.0,"rollout_rs":"seq_max_k2","rollout_rs_threshold":0.5}"#,
        ),
    ]
}

fn grad(loss: &Tensor, v: &Var) -> Rows {
    rows(loss.backward().unwrap().get(v.as_tensor()).unwrap())
}

fn rows_near(a: &Rows, b: &Rows, tol: f32) -> std::result::Result<(), TestCaseError> {
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        prop_assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn masked_tokens_receive_exactly_zero_gradient((logp, old, adv, mask) in batch()) {
        let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&adv), tensor(&mask));
        let weights = mask_t.affine(0.5, 0.75).unwrap();
        for loss in verl_losses() {
            for agg in MODES {
                let lp = Var::from_tensor(&tensor(&logp)).unwrap();
                let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old_t, advantages: &adv_t, mask: &mask_t, token_weights: Some(&weights) };
                let out = compute_policy_loss(&loss, &x, agg, &AggScale::default()).unwrap();
                let mut total = out.loss.clone();
                for est in [KlEstimator::Abs, KlEstimator::K1Plus, KlEstimator::K3Plus, KlEstimator::AbsPlus] {
                    let (kl, _) = kl_loss(lp.as_tensor(), &old_t, &mask_t, est, 0.1, agg, &AggScale::default()).unwrap();
                    total = (total + kl).unwrap();
                }
                let g = grad(&total, &lp);
                for (i, row) in g.iter().enumerate() {
                    for (t, v) in row.iter().enumerate() {
                        prop_assert!(v.is_finite());
                        if mask[i][t] == 0.0 {
                            prop_assert!(*v == 0.0, "{loss:?} {agg:?}: masked [{i},{t}] got {v}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn losses_have_the_pg_gradient_at_ratio_one((logp, _old, adv, mask) in batch()) {
        let lp = Var::from_tensor(&tensor(&logp)).unwrap();
        let old = lp.as_tensor().detach();
        let (adv, mask) = (tensor(&adv), tensor(&mask));
        let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old, advantages: &adv, mask: &mask, token_weights: None };
        for agg in MODES {
            let pg = grad(&vanilla_pg_loss(&x, agg, &AggScale::default()).unwrap().loss, &lp);
            for loss in [
                PolicyLoss::DppoTv { clip_low: 0.05, clip_high: 0.08, clip_ratio_c: 2.0 },
                PolicyLoss::DppoKl { clip_low: 0.02, clip_high: 0.03, clip_ratio_c: 20.0 },
                PolicyLoss::Gpg,
                PolicyLoss::Dro { dro_beta: 0.7 },
            ] {
                let out = compute_policy_loss(&loss, &x, agg, &AggScale::default()).unwrap();
                rows_near(&grad(&out.loss, &lp), &pg, 1e-5)?;
            }
        }
        // SAPO always aggregates seq-mean-token-mean; its gate has slope 1 at r = 1.
        let pg = grad(&vanilla_pg_loss(&x, AggMode::SeqMeanTokenMean, &AggScale::default()).unwrap().loss, &lp);
        let sapo = sapo_loss(&x, 1.3, 2.0, &AggScale::default()).unwrap();
        rows_near(&grad(&sapo.loss, &lp), &pg, 1e-5)?;
    }

    #[test]
    fn bypass_without_correction_is_ppo_or_pg_on_the_rollout_ratio((logp, old, adv, mask) in batch()) {
        let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&adv), tensor(&mask));
        for agg in MODES {
            let lp = Var::from_tensor(&tensor(&logp)).unwrap();
            let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old_t, advantages: &adv_t, mask: &mask_t, token_weights: None };
            let ppo = ppo_clip_loss(&x, 0.2, 0.28, Some(3.0), agg, &AggScale::default()).unwrap();
            let by = compute_policy_loss(&bypass(BypassLossType::PpoClip, "{}"), &x, agg, &AggScale::default()).unwrap();
            prop_assert_eq!(scalar(&by.loss), scalar(&ppo.loss));
            prop_assert_eq!(grad(&by.loss, &lp), grad(&ppo.loss, &lp));
            let gpg = gpg_loss(&x, agg, &AggScale::default()).unwrap();
            let re = compute_policy_loss(&bypass(BypassLossType::Reinforce, "{}"), &x, agg, &AggScale::default()).unwrap();
            prop_assert_eq!(scalar(&re.loss), scalar(&gpg.loss));
            prop_assert_eq!(grad(&re.loss, &lp), grad(&gpg.loss, &lp));
        }
    }

    #[test]
    fn gmpo_with_a_loose_clip_equals_gspo_on_sequence_advantages((logp, old, adv, mask) in batch()) {
        // one advantage per sequence, clip never binding: GMPO's geometric-mean ratio is GSPO's
        let seq_adv: Rows = adv.iter().map(|r| vec![r[0]; r.len()]).collect();
        let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&seq_adv), tensor(&mask));
        let lp = Var::from_tensor(&tensor(&logp)).unwrap();
        let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old_t, advantages: &adv_t, mask: &mask_t, token_weights: None };
        let gm = geo_mean_loss(&x, 5.0, 5.0).unwrap();
        let gs = gspo_loss(&x, 10.0, 10.0, AggMode::SeqMeanTokenMean, &AggScale::default()).unwrap();
        prop_assert!((scalar(&gm.loss) - scalar(&gs.loss)).abs() <= 1e-5 * (1.0 + scalar(&gs.loss).abs()));
        rows_near(&grad(&gm.loss, &lp), &grad(&gs.loss, &lp), 1e-4)?;
    }

    #[test]
    fn straight_through_kl_has_base_value_and_k2_gradient((logp, old, _adv, mask) in batch()) {
        let (reference, mask_t) = (tensor(&old), tensor(&mask));
        for (plus, base) in [
            (KlEstimator::K1Plus, KlEstimator::K1),
            (KlEstimator::K2Plus, KlEstimator::K2),
            (KlEstimator::K3Plus, KlEstimator::K3),
            (KlEstimator::AbsPlus, KlEstimator::Abs),
        ] {
            let lp = Var::from_tensor(&tensor(&logp)).unwrap();
            let (lplus, _) = kl_loss(lp.as_tensor(), &reference, &mask_t, plus, 1.0, AggMode::TokenMean, &AggScale::default()).unwrap();
            let (lbase, _) = kl_loss(lp.as_tensor(), &reference, &mask_t, base, 1.0, AggMode::TokenMean, &AggScale::default()).unwrap();
            let (lk2, _) = kl_loss(lp.as_tensor(), &reference, &mask_t, KlEstimator::K2, 1.0, AggMode::TokenMean, &AggScale::default()).unwrap();
            prop_assert!((scalar(&lplus) - scalar(&lbase)).abs() <= 1e-6 * (1.0 + scalar(&lbase).abs()));
            rows_near(&grad(&lplus, &lp), &grad(&lk2, &lp), 1e-6)?;
        }
    }

    #[test]
    fn global_batch_normalisation_sums_over_ranks((logp, _old, _adv, mask) in batch(), extra in batch()) {
        // two "ranks", each scaled by dp_size with the global counts: the mean of the rank
        // losses (what DDP's gradient averaging computes) equals the unsplit loss.
        let t = logp[0].len().min(extra.0[0].len());
        let cut = |m: &Rows| m.iter().map(|r| r[..t].to_vec()).collect::<Rows>();
        let (l1, m1, l2, m2) = (cut(&logp), cut(&mask), cut(&extra.0), cut(&extra.3));
        let all_l: Rows = l1.iter().chain(&l2).cloned().collect();
        let all_m: Rows = m1.iter().chain(&m2).cloned().collect();
        let tokens: f32 = all_m.iter().flatten().sum();
        for mode in MODES {
            let full = aggregate(&tensor(&all_l), &tensor(&all_m), mode, &AggScale { max_len: Some(9.0), ..Default::default() }).unwrap();
            let scale = AggScale::verl(2, Some(f64::from(tokens)), Some(all_m.len() as f64), Some(9.0));
            let r1 = aggregate(&tensor(&l1), &tensor(&m1), mode, &scale).unwrap();
            let r2 = aggregate(&tensor(&l2), &tensor(&m2), mode, &scale).unwrap();
            let mean = (scalar(&r1) + scalar(&r2)) / 2.0;
            let want = scalar(&full);
            prop_assert!((mean - want).abs() <= 1e-4 * (1.0 + want.abs()), "{mode:?}: {mean} vs {want}");
        }
    }
}

#[test]
fn k1_rejection_bounds_use_verls_orientation() {
    // ρ = π_train/π_rollout per token: 2.5, 1.8, 1.0, 0.7, 0.6
    let rho = [2.5f64, 1.8, 1.0, 0.7, 0.6];
    let train = Tensor::from_vec(
        rho.iter().map(|r| r.ln() as f32 - 1.0).collect::<Vec<_>>(),
        (1, 5),
        &Device::Cpu,
    )
    .unwrap();
    let rollout = Tensor::from_vec(vec![-1.0f32; 5], (1, 5), &Device::Cpu).unwrap();
    let mask = Tensor::ones((1, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
    let cfg: RolloutCorrectionConfig =
        serde_json::from_str(r#"{"rollout_rs":"token_k1","rollout_rs_threshold":"0.5_1.5"}"#)
            .unwrap();
    let spec = RolloutCorrectionSpec::from_config(&cfg).unwrap();
    let out = rollout_correction_and_rejection(&train, &rollout, &mask, &spec).unwrap();
    // kept iff 0.5 <= π_rollout/π_train = 1/ρ <= 1.5, i.e. 1/1.5 <= ρ <= 2
    assert_eq!(rows(&out.mask), vec![vec![0.0, 1.0, 1.0, 1.0, 0.0]]);
    // the older ρ-oriented MIS with the same numbers keeps 0.5 <= ρ <= 1.5
    let mis = mis_weights(&train, &rollout, &mask, MisLevel::Token, 0.5, 1.5, None).unwrap();
    let kept: Vec<bool> = rows(&mis.weights)[0].iter().map(|&w| w > 0.0).collect();
    assert_eq!(kept, vec![false, false, true, true, true]);
}

#[test]
fn bad_inputs_name_the_argument() {
    let d = &Device::Cpu;
    let lp = Tensor::new(&[[-1.0f32, -2.0]], d).unwrap();
    let mask = Tensor::new(&[[1.0f32, 1.0]], d).unwrap();
    let x = PolicyLossInputs {
        log_probs: &lp,
        old_log_probs: &lp,
        advantages: &lp,
        mask: &mask,
        token_weights: None,
    };
    let msg = |e: RlError| e.to_string();
    assert!(msg(sapo_loss(&x, 0.0, 1.0, &AggScale::default()).unwrap_err()).contains("tau_pos"));
    assert!(
        msg(dro_loss(&x, 0.0, AggMode::TokenMean, &AggScale::default()).unwrap_err())
            .contains("dro_beta")
    );
    assert!(msg(geo_mean_loss(&x, -1.0, 0.2).unwrap_err()).contains("clip_low"));
    assert!(msg(dppo_loss(
        &x,
        DppoDivergence::Tv,
        0.1,
        0.1,
        0.0,
        AggMode::TokenMean,
        &AggScale::default()
    )
    .unwrap_err())
    .contains("clip_ratio_c"));
    let scale = AggScale {
        dp_size: Some(2),
        ..Default::default()
    };
    assert!(
        msg(aggregate(&lp, &mask, AggMode::TokenMean, &scale).unwrap_err())
            .contains("batch_num_tokens")
    );
    assert!(
        msg(aggregate(&lp, &mask, AggMode::SeqMeanTokenMean, &scale).unwrap_err())
            .contains("global_batch_size")
    );
    assert!(aggregate(&lp, &mask, AggMode::TokenSum, &scale).is_ok());
    assert!(
        msg(masked_var(&lp, &Tensor::new(&[[1.0f32, 0.0]], d).unwrap(), true).unwrap_err())
            .contains("mask")
    );
    assert!(
        msg(grpo_passk_advantages(&[1.0, 0.0, 1.0], &[0, 0, 1], true).unwrap_err())
            .contains("group_ids")
    );
    assert!(msg(gpg_advantages(&[1.0, 0.0], &[0, 0], 0.0).unwrap_err()).contains("f_norm"));
    assert!(msg(opo_advantages(&[1.0, 0.0], &[1.0], &[0, 0]).unwrap_err()).contains("lengths"));
    assert!(
        msg(remax_advantages(&lp, &[0.0, 1.0], &mask).unwrap_err()).contains("reward_baselines")
    );
    let est = AdvantageEstimator::Remax;
    let inputs = AdvantageInputs {
        token_rewards: &lp,
        mask: &mask,
        group_ids: None,
        values: None,
    };
    assert!(msg(compute_advantages(&est, &inputs).unwrap_err()).contains("reward_baselines"));
    let bad = |j: &str| -> String {
        let c: RolloutCorrectionConfig = serde_json::from_str(j).unwrap();
        msg(RolloutCorrectionSpec::from_config(&c).unwrap_err())
    };
    assert!(bad(r#"{"rollout_rs":"token_k9","rollout_rs_threshold":1.0}"#).contains("rollout_rs"));
    assert!(
        bad(r#"{"rollout_rs":"token_k2","rollout_rs_threshold":"0.1_0.2"}"#)
            .contains("rollout_rs_threshold")
    );
    assert!(
        bad(r#"{"rollout_is":"token","rollout_is_threshold":"2_1"}"#)
            .contains("rollout_is_threshold")
    );
    let empty = Tensor::zeros((1, 2), candle_core::DType::F32, d).unwrap();
    assert!(
        rollout_correction_and_rejection(&lp, &lp, &empty, &RolloutCorrectionSpec::default())
            .is_err()
    );
}

#[test]
fn verl_names_select_every_new_option() {
    for (name, want) in [
        ("\"abs\"", KlEstimator::Abs),
        ("\"k1+\"", KlEstimator::K1Plus),
        ("\"kl+\"", KlEstimator::K1Plus),
        ("\"k3+\"", KlEstimator::K3Plus),
        ("\"low_var_kl+\"", KlEstimator::K3Plus),
        ("\"low_var_kl\"", KlEstimator::K3),
        ("\"abs+\"", KlEstimator::AbsPlus),
        ("\"mse\"", KlEstimator::K2),
    ] {
        assert_eq!(serde_json::from_str::<KlEstimator>(name).unwrap(), want);
    }
    assert_eq!(
        serde_json::from_str::<AggMode>("\"token-sum\"").unwrap(),
        AggMode::TokenSum
    );
    let d = RolloutCorrectionSpec::default();
    let back: RolloutCorrectionSpec =
        serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
    assert_eq!(back, d);
    for (json, ok) in [
        (r#"{"kind":"opo"}"#, AdvantageEstimator::Opo),
        (
            r#"{"kind":"grpo_vectorized","norm_by_std":true}"#,
            AdvantageEstimator::Grpo { norm_by_std: true },
        ),
        (r#"{"kind":"gpg"}"#, AdvantageEstimator::Gpg { f_norm: 1.0 }),
        (r#"{"kind":"remax"}"#, AdvantageEstimator::Remax),
        (
            r#"{"kind":"gdpo"}"#,
            AdvantageEstimator::Gdpo { norm_by_std: true },
        ),
        (
            r#"{"kind":"grpo_passk"}"#,
            AdvantageEstimator::GrpoPassk { norm_by_std: true },
        ),
        (
            r#"{"kind":"optimal_token_baseline"}"#,
            AdvantageEstimator::OptimalTokenBaseline {
                handle_zero_tail: true,
            },
        ),
        (
            r#"{"kind":"tir_optimal_token_baseline","handle_zero_tail":false}"#,
            AdvantageEstimator::TirOptimalTokenBaseline {
                handle_zero_tail: false,
            },
        ),
        (
            r#"{"kind":"reinforce_plus_plus","gamma":1.0}"#,
            AdvantageEstimator::ReinforcePlusPlus { gamma: 1.0 },
        ),
        (
            r#"{"kind":"gae","gamma":1.0,"lam":0.95}"#,
            AdvantageEstimator::Gae {
                gamma: 1.0,
                lambda: 0.95,
            },
        ),
    ] {
        assert_eq!(
            serde_json::from_str::<AdvantageEstimator>(json).unwrap(),
            ok,
            "{json}"
        );
    }
    for json in [
        r#"{"kind":"sapo","tau_pos":1.0,"tau_neg":1.05}"#,
        r#"{"kind":"geo_mean","clip_low":0.4,"clip_high":0.4}"#,
        r#"{"kind":"dppo_tv","clip_low":0.05,"clip_high":0.05,"clip_ratio_c":20.0}"#,
        r#"{"kind":"dppo_kl","clip_low":0.05,"clip_high":0.05,"clip_ratio_c":20.0}"#,
        r#"{"kind":"gpg"}"#,
        r#"{"kind":"dro","dro_beta":0.5}"#,
        r#"{"kind":"bypass_mode","loss_type":"reinforce","clip_low":0.2,"clip_high":0.2,"clip_ratio_c":3.0,"rollout_correction":{"rollout_is":"sequence","rollout_is_threshold":2.0,"rollout_rs":"token_k1,seq_mean_k3","rollout_rs_threshold":"0.5_1.5,0.02"}}"#,
    ] {
        let l: PolicyLoss = serde_json::from_str(json).unwrap();
        let back: PolicyLoss = serde_json::from_value(serde_json::to_value(l).unwrap()).unwrap();
        assert_eq!(back, l, "{json}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// At their degenerate settings the new estimators are the group-mean (Dr. GRPO) baseline:
    /// OPO with equal lengths, GPG when every reward is non-zero, OTB / TIR-OTB with equal
    /// lengths and a constant path-variance proxy (outcome reward on the last token), and
    /// GDPO with one component is the whitened GRPO advantage.
    #[test]
    fn new_estimators_reduce_to_group_baselines(
        rewards in prop::collection::vec(0.1f32..3.0, 2..10),
        ngroups in 1usize..4,
        len in 1usize..5,
        hole in prop::bool::ANY,
    ) {
        let b = rewards.len();
        let ids: Vec<usize> = (0..b).map(|i| i % ngroups).collect();
        let mean_only = group_advantages(&rewards, &ids, GroupBaseline::MeanOnly).unwrap().per_sequence;
        let near = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs()));
        let lengths = vec![len as f32; b];
        prop_assert!(near(&opo_advantages(&rewards, &lengths, &ids).unwrap(), &mean_only));
        prop_assert!(near(&gpg_advantages(&rewards, &ids, 1.0).unwrap(), &mean_only));

        // [B, T] with the same number of valid tokens per row (a tool-output hole optional)
        let t = len + usize::from(hole) + 1;
        let mut mask = vec![vec![0.0f32; t]; b];
        let mut tok = vec![vec![0.0f32; t]; b];
        for i in 0..b {
            let mut k = 0;
            for pos in 0..t {
                if k < len && !(hole && pos == 1 && len > 1) {
                    mask[i][pos] = 1.0;
                    k += 1;
                    if k == len {
                        tok[i][pos] = rewards[i];
                    }
                }
            }
        }
        let (mask_t, tok_t) = (tensor(&mask), tensor(&tok));
        let old = tensor(&vec![vec![(0.3f32).ln(); t]; b]);
        let spi2 = tensor(&vec![vec![0.2f32; t]; b]);
        let want = rows(&broadcast_to_tokens(&mean_only, &mask_t).unwrap());
        for tail in [false, true] {
            let x = OtbInputs { token_rewards: &tok_t, mask: &mask_t, group_ids: &ids, old_log_probs: &old, sum_pi_squared: &spi2, rollout_is_weights: None, handle_zero_tail: tail };
            let (a, _) = tir_optimal_token_baseline_advantages(&x).unwrap();
            rows_near(&rows(&a), &want, 1e-4)?;
            if !hole {
                let (a, _) = optimal_token_baseline_advantages(&x).unwrap();
                rows_near(&rows(&a), &want, 1e-4)?;
            }
        }
        if b * len >= 2 {
            let grpo = group_advantages(&rewards, &ids, GroupBaseline::GrpoStd).unwrap().per_sequence;
            let whitened = masked_whiten(&broadcast_to_tokens(&grpo, &mask_t).unwrap(), &mask_t, true);
            let gdpo = gdpo_advantages(std::slice::from_ref(&rewards), None, &ids, &mask_t, true);
            match (whitened, gdpo) {
                (Ok(w), Ok(g)) => rows_near(&rows(&g), &rows(&w), 1e-4)?,
                (Err(_), Err(_)) => {}
                (w, g) => prop_assert!(false, "whiten {:?} vs gdpo {:?}", w.is_ok(), g.is_ok()),
            }
        }
    }
}
