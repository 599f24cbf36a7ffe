//! Property tests (proptest), finite-difference gradient checks and bad-input checks for the
//! RL math core.

use agentrl_rl::*;
use candle_core::{Device, Tensor, Var};
use proptest::prelude::*;

use crate::common::*;

fn tensor(rows: &[Vec<f32>]) -> Tensor {
    Tensor::from_vec(rows.concat(), (rows.len(), rows[0].len()), &Device::Cpu).unwrap()
}

type Rows = Vec<Vec<f32>>;

/// A small batch `(log_probs, old_log_probs, advantages, mask)`: 0/1 mask with at least one
/// valid token.
fn batch() -> impl Strategy<Value = (Rows, Rows, Rows, Rows)> {
    (1usize..5, 1usize..7).prop_flat_map(|(b, t)| {
        let m = prop::collection::vec(prop::collection::vec(-3.0f32..-0.01, t), b);
        let d = prop::collection::vec(prop::collection::vec(-1.0f32..1.0, t), b);
        let a = prop::collection::vec(prop::collection::vec(-2.0f32..2.0, t), b);
        let k = prop::collection::vec(prop::collection::vec(prop::bool::ANY, t), b);
        (m, d, a, k).prop_map(|(old, delta, adv, keep)| {
            let logp: Vec<Vec<f32>> = old
                .iter()
                .zip(&delta)
                .map(|(o, d)| o.iter().zip(d).map(|(x, y)| x + y).collect())
                .collect();
            let mut mask: Vec<Vec<f32>> = keep
                .iter()
                .map(|r| r.iter().map(|&k| if k { 1.0 } else { 0.0 }).collect())
                .collect();
            mask[0][0] = 1.0;
            (logp, old, adv, mask)
        })
    })
}

fn all_losses() -> Vec<PolicyLoss> {
    vec![
        PolicyLoss::Vanilla,
        PolicyLoss::ppo(0.2),
        PolicyLoss::PpoClip {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: Some(3.0),
        },
        PolicyLoss::Gspo {
            clip_low: 0.2,
            clip_high: 0.28,
        },
        PolicyLoss::GspoToken {
            clip_low: 0.2,
            clip_high: 0.28,
        },
        PolicyLoss::Cispo {
            clip_low: 1.0,
            clip_high: 0.28,
        },
    ]
}

/// Clip-Cov / KL-Cov with ratios large enough to select tokens in small batches.
fn cov_losses() -> Vec<PolicyLoss> {
    vec![
        PolicyLoss::ClipCov {
            clip_low: 0.2,
            clip_high: 0.28,
            clip_cov_ratio: 0.5,
            cov_low: 0.0,
            cov_high: 5.0,
            seed: 3,
        },
        PolicyLoss::KlCov {
            kl_cov_ratio: 0.5,
            kl_coef: 1.0,
        },
    ]
}

const MODES: [AggMode; 4] = [
    AggMode::TokenMean,
    AggMode::SeqMeanTokenSum,
    AggMode::SeqMeanTokenMean,
    AggMode::SeqMeanTokenSumNorm,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn grpo_advantages_sum_to_zero_per_group(rewards in prop::collection::vec(-3.0f32..3.0, 2..24), ngroups in 1usize..5) {
        let ids: Vec<usize> = (0..rewards.len()).map(|i| (i * 7) % ngroups).collect();
        for baseline in [GroupBaseline::GrpoStd, GroupBaseline::MeanOnly, GroupBaseline::LeaveOneOut] {
            let out = group_advantages(&rewards, &ids, baseline).unwrap();
            for g in 0..ngroups {
                let members: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] == g).collect();
                if members.len() < 2 { continue; }
                let sum: f64 = members.iter().map(|&i| f64::from(out.per_sequence[i])).sum();
                prop_assert!(sum.abs() < 1e-3, "{baseline:?} group {g} sums to {sum}");
            }
        }
    }

    #[test]
    fn rloo_is_k_over_k_minus_1_times_centred_reward(rewards in prop::collection::vec(-3.0f32..3.0, 2..12)) {
        let ids = vec![0usize; rewards.len()];
        let rloo = group_advantages(&rewards, &ids, GroupBaseline::LeaveOneOut).unwrap().per_sequence;
        let centred = group_advantages(&rewards, &ids, GroupBaseline::MeanOnly).unwrap().per_sequence;
        let k = rewards.len() as f32;
        for (r, c) in rloo.iter().zip(&centred) {
            prop_assert!((r - k / (k - 1.0) * c).abs() <= 1e-4 * (1.0 + c.abs()));
        }
        // and each one is R_i minus the mean of the others
        for i in 0..rewards.len() {
            let others: f32 = rewards.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, r)| r).sum::<f32>() / (k - 1.0);
            prop_assert!((rloo[i] - (rewards[i] - others)).abs() <= 1e-4);
        }
    }

    #[test]
    fn ppo_equals_vanilla_pg_when_ratio_is_one((logp, _old, adv, mask) in batch()) {
        let lp = Var::from_tensor(&tensor(&logp)).unwrap();
        let old = lp.as_tensor().detach();
        let (adv, mask) = (tensor(&adv), tensor(&mask));
        for agg in MODES {
            let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old, advantages: &adv, mask: &mask, token_weights: None };
            let ppo = ppo_clip_loss(&x, 0.2, 0.2, Some(3.0), agg, &AggScale::default()).unwrap();
            let van = vanilla_pg_loss(&x, agg, &AggScale::default()).unwrap();
            prop_assert!((scalar(&ppo.loss) - scalar(&van.loss)).abs() < 1e-5);
            prop_assert_eq!(ppo.diagnostics.clipfrac, 0.0);
            let gp = ppo.loss.backward().unwrap();
            let gv = van.loss.backward().unwrap();
            let (gp, gv) = (rows(gp.get(lp.as_tensor()).unwrap()), rows(gv.get(lp.as_tensor()).unwrap()));
            for (a, b) in gp.iter().flatten().zip(gv.iter().flatten()) {
                prop_assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn clip_cov_with_zero_ratio_equals_ppo_and_selection_is_seeded((logp, old, adv, mask) in batch(), seed in 0u64..1000) {
        let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&adv), tensor(&mask));
        let valid: f32 = mask.iter().flatten().sum();
        for agg in MODES {
            let lp = Var::from_tensor(&tensor(&logp)).unwrap();
            let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old_t, advantages: &adv_t, mask: &mask_t, token_weights: None };
            let params = ClipCovParams { clip_low: 0.2, clip_high: 0.28, clip_cov_ratio: 0.0, cov_low: -10.0, cov_high: 10.0, seed };
            let cc = clip_cov_loss(&x, params, agg, &AggScale::default()).unwrap();
            let ppo = ppo_clip_loss(&x, 0.2, 0.28, None, agg, &AggScale::default()).unwrap();
            prop_assert_eq!(scalar(&cc.loss), scalar(&ppo.loss));
            prop_assert_eq!(cc.diagnostics.cov_selected, 0.0);
            let (gc, gp) = (cc.loss.backward().unwrap(), ppo.loss.backward().unwrap());
            prop_assert_eq!(rows(gc.get(lp.as_tensor()).unwrap()), rows(gp.get(lp.as_tensor()).unwrap()));
            // with every token in range, exactly ⌊r·N⌋ of the PPO-unclipped ones are dropped,
            // the same ones for the same seed
            let wide = ClipCovParams { clip_cov_ratio: 0.5, ..params };
            let a = clip_cov_loss(&x, wide, agg, &AggScale::default()).unwrap();
            let b = clip_cov_loss(&x, wide, agg, &AggScale::default()).unwrap();
            let unclipped = valid - ppo.diagnostics.clipfrac * valid;
            let want = (0.5 * valid).floor().min(unclipped.round());
            prop_assert_eq!(a.diagnostics.cov_selected, want);
            prop_assert_eq!(rows(&a.per_token), rows(&b.per_token));
            let zeroed = rows(&a.per_token).iter().flatten().zip(mask.iter().flatten())
                .zip(rows(&ppo.per_token).iter().flatten())
                .filter(|((v, m), p)| **m > 0.0 && **v == 0.0 && **p != 0.0).count();
            prop_assert_eq!(zeroed as f32, want);
        }
    }

    #[test]
    fn masked_tokens_receive_exactly_zero_gradient((logp, old, adv, mask) in batch()) {
        let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&adv), tensor(&mask));
        let weights = mask_t.affine(0.5, 0.75).unwrap();
        for loss in all_losses().into_iter().chain(cov_losses()) {
            for agg in MODES {
                let lp = Var::from_tensor(&tensor(&logp)).unwrap();
                let x = PolicyLossInputs { log_probs: lp.as_tensor(), old_log_probs: &old_t, advantages: &adv_t, mask: &mask_t, token_weights: Some(&weights) };
                let out = compute_policy_loss(&loss, &x, agg, &AggScale::default()).unwrap();
                let (kl, _) = kl_loss(lp.as_tensor(), &old_t, &mask_t, KlEstimator::K3, 0.1, agg, &AggScale::default()).unwrap();
                let total = (out.loss + kl).unwrap();
                let g = total.backward().unwrap();
                let g = rows(g.get(lp.as_tensor()).unwrap());
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
    fn token_mean_under_4_way_accumulation_equals_unsplit((logp, old, adv, mask) in batch(), extra in batch()) {
        // build a batch of at least 4 rows with a shared width
        let t = logp[0].len().min(extra.0[0].len());
        let cut = |m: &Vec<Vec<f32>>| m.iter().map(|r| r[..t].to_vec()).collect::<Vec<_>>();
        let mut l = cut(&logp); l.extend(cut(&extra.0)); l.extend(cut(&logp));
        let mut o = cut(&old); o.extend(cut(&extra.1)); o.extend(cut(&old));
        let mut a = cut(&adv); a.extend(cut(&extra.2)); a.extend(cut(&adv));
        let mut m = cut(&mask); m.extend(cut(&extra.3)); m.extend(cut(&mask));
        while l.len() < 4 { l.push(l[0].clone()); o.push(o[0].clone()); a.push(a[0].clone()); m.push(m[0].clone()); }
        let b = l.len();
        let loss = PolicyLoss::PpoClip { clip_low: 0.2, clip_high: 0.28, dual_clip: Some(3.0) };
        for agg in MODES {
            let full_var = Var::from_tensor(&tensor(&l)).unwrap();
            let (ot, at, mt) = (tensor(&o), tensor(&a), tensor(&m));
            let x = PolicyLossInputs { log_probs: full_var.as_tensor(), old_log_probs: &ot, advantages: &at, mask: &mt, token_weights: None };
            let full = compute_policy_loss(&loss, &x, agg, &AggScale::default()).unwrap();
            let full_grad = rows(full.loss.backward().unwrap().get(full_var.as_tensor()).unwrap());
            // 4 micro-batches (contiguous, possibly uneven)
            let bounds: Vec<usize> = (0..=4).map(|k| k * b / 4).collect();
            let masks: Vec<Tensor> = (0..4).map(|k| tensor(&m[bounds[k]..bounds[k + 1]])).collect();
            let scale = step_scale(&masks.iter().collect::<Vec<_>>(), None).unwrap();
            let mut sum = 0.0f32;
            let mut grads: Vec<Vec<f32>> = Vec::new();
            for k in 0..4 {
                let r = bounds[k]..bounds[k + 1];
                let v = Var::from_tensor(&tensor(&l[r.clone()])).unwrap();
                let (ot, at) = (tensor(&o[r.clone()]), tensor(&a[r.clone()]));
                let x = PolicyLossInputs { log_probs: v.as_tensor(), old_log_probs: &ot, advantages: &at, mask: &masks[k], token_weights: None };
                let out = compute_policy_loss(&loss, &x, agg, &scale).unwrap();
                sum += scalar(&out.loss);
                grads.extend(rows(out.loss.backward().unwrap().get(v.as_tensor()).unwrap()));
            }
            prop_assert!((sum - scalar(&full.loss)).abs() <= 1e-5 * (1.0 + scalar(&full.loss).abs()), "{agg:?}: {sum} vs {}", scalar(&full.loss));
            for (g, h) in grads.iter().flatten().zip(full_grad.iter().flatten()) {
                prop_assert!((g - h).abs() <= 1e-5 * (1.0 + h.abs()));
            }
        }
    }

    #[test]
    fn pass_at_k_is_monotone_and_matches_binomials(n in 1usize..25, c_frac in 0.0f64..=1.0) {
        let c = ((n as f64) * c_frac).round() as usize;
        let binom = |n: usize, k: usize| -> f64 { if k > n { 0.0 } else { (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product() } };
        let mut prev = -1.0;
        for k in 1..=n {
            let p = pass_at_k(n, c, k).unwrap();
            prop_assert!(p >= prev - 1e-12, "pass@{k} = {p} < pass@{} = {prev}", k - 1);
            prev = p;
            let exact = 1.0 - binom(n - c, k) / binom(n, k);
            prop_assert!((p - exact).abs() < 1e-9, "n={n} c={c} k={k}: {p} vs {exact}");
            let hat = pass_hat_k(n, c, k).unwrap();
            prop_assert!((hat - binom(c, k) / binom(n, k)).abs() < 1e-9);
            prop_assert!(hat <= p + 1e-12);
        }
    }
}

/// Central differences in f32 against autograd, for every loss on a fixed batch with holes.
#[test]
fn finite_difference_gradients_match_autograd() {
    let logp = vec![
        vec![-1.2f32, -0.4, -2.0, -0.9, -1.5],
        vec![-0.3, -1.1, -0.8, -2.5, -0.6],
        vec![-1.0, -1.3, -0.2, -0.7, -1.9],
    ];
    let old = vec![
        vec![-1.0f32, -0.7, -1.6, -0.9, -1.2],
        vec![-0.5, -0.9, -1.0, -2.0, -0.6],
        vec![-1.1, -1.8, -0.3, -0.4, -1.5],
    ];
    let adv = vec![
        vec![0.8f32, 0.8, 0.8, 0.8, 0.8],
        vec![-1.1, -0.4, 0.6, -0.9, 1.5],
        vec![-0.7, -0.7, -0.7, -0.7, -0.7],
    ];
    let mask = vec![
        vec![1.0f32, 1.0, 0.0, 1.0, 0.0],
        vec![1.0, 1.0, 1.0, 1.0, 1.0],
        vec![1.0, 0.0, 1.0, 1.0, 0.0],
    ];
    let (old_t, adv_t, mask_t) = (tensor(&old), tensor(&adv), tensor(&mask));
    // old values shifted off the clip boundary (|V − V_old| = ε_v exactly is a kink)
    let old_values = (&old_t + 0.13).unwrap();
    let teacher = tensor(&old).unsqueeze(0).unwrap().affine(1.5, 0.2).unwrap();
    let gkd_mask = tensor(&[vec![1.0f32, 0.0, 1.0]]);
    type LossFn<'a> = Box<dyn Fn(&Tensor) -> Tensor + 'a>;
    let mut fns: Vec<(String, LossFn)> = Vec::new();
    // GSPO-token's value uses stop-gradients, so its gradient is not the derivative of its own
    // value; with sequence-constant advantages it must equal the derivative of GSPO's value.
    let seq_adv_t = tensor(&[vec![0.8f32; 5], vec![-1.1f32; 5], vec![-0.7f32; 5]]);
    let mut gspo_pairs: Vec<(String, LossFn, LossFn)> = Vec::new();
    for loss in all_losses() {
        for agg in MODES {
            let (o, a, m) = (&old_t, &adv_t, &mask_t);
            if matches!(loss, PolicyLoss::GspoToken { .. }) {
                let sa = &seq_adv_t;
                gspo_pairs.push((
                    format!("{loss:?} {agg:?}"),
                    Box::new(move |lp: &Tensor| {
                        let x = PolicyLossInputs {
                            log_probs: lp,
                            old_log_probs: o,
                            advantages: sa,
                            mask: m,
                            token_weights: None,
                        };
                        compute_policy_loss(&loss, &x, agg, &AggScale::default())
                            .unwrap()
                            .loss
                    }),
                    Box::new(move |lp: &Tensor| {
                        let x = PolicyLossInputs {
                            log_probs: lp,
                            old_log_probs: o,
                            advantages: sa,
                            mask: m,
                            token_weights: None,
                        };
                        gspo_loss(&x, 0.2, 0.28, agg, &AggScale::default())
                            .unwrap()
                            .loss
                    }),
                ));
                continue;
            }
            if matches!(loss, PolicyLoss::Cispo { .. }) {
                // CISPO's IS weight is detached: its gradient is the derivative of
                // `−w₀·Â·log π` with the weight frozen at the evaluation point.
                let w0 = token_ratio(&tensor(&logp), o)
                    .unwrap()
                    .clamp(0.0, 1.28)
                    .unwrap();
                gspo_pairs.push((
                    format!("{loss:?} {agg:?}"),
                    Box::new(move |lp: &Tensor| {
                        let x = PolicyLossInputs {
                            log_probs: lp,
                            old_log_probs: o,
                            advantages: a,
                            mask: m,
                            token_weights: None,
                        };
                        compute_policy_loss(&loss, &x, agg, &AggScale::default())
                            .unwrap()
                            .loss
                    }),
                    Box::new(move |lp: &Tensor| {
                        let per_token = w0.mul(a).unwrap().mul(lp).unwrap().neg().unwrap();
                        aggregate(&per_token, m, agg, &AggScale::default()).unwrap()
                    }),
                ));
                continue;
            }
            fns.push((
                format!("{loss:?} {agg:?}"),
                Box::new(move |lp: &Tensor| {
                    let x = PolicyLossInputs {
                        log_probs: lp,
                        old_log_probs: o,
                        advantages: a,
                        mask: m,
                        token_weights: None,
                    };
                    compute_policy_loss(&loss, &x, agg, &AggScale::default())
                        .unwrap()
                        .loss
                }),
            ));
        }
    }
    for (name, token_level, sequence_level) in &gspo_pairs {
        let v = Var::from_tensor(&tensor(&logp)).unwrap();
        let loss = token_level(v.as_tensor());
        let auto = rows(loss.backward().unwrap().get(v.as_tensor()).unwrap());
        let gap = (scalar(&loss) - scalar(&sequence_level(v.as_tensor()))).abs();
        assert!(
            gap < 1e-5,
            "{name}: value differs from the reference form by {gap}"
        );
        let numeric = finite_difference(|t| f64::from(scalar(&sequence_level(t))), &logp, 1e-2);
        for (a, n) in auto.iter().flatten().zip(numeric.iter().flatten()) {
            let ok = (f64::from(*a) - n).abs() <= 2e-2 * (1.0 + n.abs());
            assert!(
                ok,
                "{name}: autograd {a} vs finite-difference of the reference form {n}"
            );
        }
    }
    for est in [KlEstimator::K1, KlEstimator::K2, KlEstimator::K3] {
        let (o, m) = (&old_t, &mask_t);
        fns.push((
            format!("kl {est:?}"),
            Box::new(move |lp: &Tensor| {
                kl_loss(lp, o, m, est, 0.5, AggMode::TokenMean, &AggScale::default())
                    .unwrap()
                    .0
            }),
        ));
    }
    {
        let (a, m) = (&adv_t, &mask_t);
        let o = &old_values;
        fns.push((
            "value loss".into(),
            Box::new(move |v: &Tensor| {
                value_loss(
                    v,
                    o,
                    a,
                    m,
                    0.5,
                    AggMode::SeqMeanTokenMean,
                    &AggScale::default(),
                )
                .unwrap()
                .loss
            }),
        ));
        fns.push((
            "sft".into(),
            Box::new(move |lp: &Tensor| {
                sft_nll_loss(lp, m, AggMode::TokenMean, &AggScale::default()).unwrap()
            }),
        ));
        fns.push((
            "dpo".into(),
            Box::new(move |lp: &Tensor| {
                let seq = sequence_log_probs(lp, m).unwrap();
                let c = seq.narrow(0, 0, 1).unwrap();
                let r = seq.narrow(0, 1, 1).unwrap();
                let rc = Tensor::new(&[-2.0f32], &Device::Cpu).unwrap();
                let rr = Tensor::new(&[-4.5f32], &Device::Cpu).unwrap();
                dpo_loss(&c, &r, &rc, &rr, 0.5).unwrap().loss
            }),
        ));
        fns.push((
            "entropy bonus".into(),
            Box::new(move |lp: &Tensor| {
                // treat the [3, 5] input as logits of 3 positions over a 5-token vocabulary
                let logits = lp.unsqueeze(0).unwrap();
                let ent = entropy_from_logits(&logits).unwrap();
                let m = Tensor::ones((1, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
                entropy_bonus_loss(&ent, &m, 0.3, AggMode::TokenMean, &AggScale::default())
                    .unwrap()
                    .0
            }),
        ));
    }
    for loss in cov_losses() {
        let (o, a, m) = (&old_t, &adv_t, &mask_t);
        fns.push((
            format!("{loss:?}"),
            Box::new(move |lp: &Tensor| {
                let x = PolicyLossInputs {
                    log_probs: lp,
                    old_log_probs: o,
                    advantages: a,
                    mask: m,
                    token_weights: None,
                };
                compute_policy_loss(&loss, &x, AggMode::SeqMeanTokenMean, &AggScale::default())
                    .unwrap()
                    .loss
            }),
        ));
    }
    // GKD: the [3, 5] input as student logits of 3 positions over a 5-token vocabulary.
    for beta in [0.0, 0.3, 1.0] {
        let (t, m) = (&teacher, &gkd_mask);
        fns.push((
            format!("gkd beta={beta}"),
            Box::new(move |lp: &Tensor| {
                gkd_loss(
                    &lp.unsqueeze(0).unwrap(),
                    t,
                    m,
                    beta,
                    0.9,
                    AggMode::TokenMean,
                    &AggScale::default(),
                )
                .unwrap()
            }),
        ));
    }
    for (name, func) in &fns {
        let v = Var::from_tensor(&tensor(&logp)).unwrap();
        let loss = func(v.as_tensor());
        let auto = rows(
            loss.backward()
                .unwrap()
                .get(v.as_tensor())
                .unwrap_or(&v.as_tensor().zeros_like().unwrap()),
        );
        let numeric = finite_difference(|t| f64::from(scalar(&func(t))), &logp, 1e-2);
        for (i, (ar, nr)) in auto.iter().zip(&numeric).enumerate() {
            for (t, (a, n)) in ar.iter().zip(nr).enumerate() {
                let (a, n) = (f64::from(*a), *n);
                // f32 forward with eps = 1e-2: allow O(eps²) curvature plus rounding; skip
                // points within eps of a clip boundary (kinks) by a loose absolute slack.
                assert!(
                    (a - n).abs() <= 2e-2 * (1.0 + n.abs()),
                    "{name} [{i},{t}]: autograd {a} vs finite-difference {n}"
                );
            }
        }
    }
}

#[test]
fn bootstrap_is_seeded_and_brackets_the_estimate() {
    let tasks: Vec<(usize, usize)> = (0..40).map(|i| (8, (i * 5) % 9)).collect();
    let stat = |t: &[(usize, usize)]| mean_pass_at_k(t, 2);
    let a = bootstrap_ci(&tasks, stat, 2000, 0.95, 7).unwrap();
    let b = bootstrap_ci(&tasks, stat, 2000, 0.95, 7).unwrap();
    assert_eq!(a, b);
    assert!(a.low < a.estimate && a.estimate < a.high, "{a:?}");
    let c = bootstrap_ci(&tasks, stat, 2000, 0.95, 8).unwrap();
    assert_ne!(a.low, c.low);
    let narrow = bootstrap_ci(&tasks, stat, 2000, 0.5, 7).unwrap();
    assert!(narrow.high - narrow.low < a.high - a.low);
}

#[test]
fn bad_inputs_return_clear_errors() {
    let m = Tensor::ones((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
    let wrong = Tensor::ones((2, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    let x = PolicyLossInputs {
        log_probs: &m,
        old_log_probs: &m,
        advantages: &wrong,
        mask: &m,
        token_weights: None,
    };
    let e = ppo_clip_loss(&x, 0.2, 0.2, None, AggMode::TokenMean, &AggScale::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("advantages") && e.contains("[2, 4]"), "{e}");
    let x = PolicyLossInputs {
        log_probs: &m,
        old_log_probs: &m,
        advantages: &m,
        mask: &m,
        token_weights: None,
    };
    let e = ppo_clip_loss(
        &x,
        0.2,
        0.2,
        Some(0.5),
        AggMode::TokenMean,
        &AggScale::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("dual_clip"), "{e}");
    let params = ClipCovParams {
        cov_low: 5.0,
        cov_high: 1.0,
        ..Default::default()
    };
    let e = clip_cov_loss(&x, params, AggMode::TokenMean, &AggScale::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("clip_cov_loss") && e.contains("cov_low"), "{e}");
    let e = kl_cov_loss(&x, 1.5, 1.0, AggMode::TokenMean, &AggScale::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("kl_cov_ratio"), "{e}");
    let logits = Tensor::zeros((1, 2, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    let other = Tensor::zeros((1, 2, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
    let e = gkd_jsd_per_token(&logits, &other, 0.5, 0.9)
        .unwrap_err()
        .to_string();
    assert!(e.contains("teacher_logits"), "{e}");
    let e = gkd_jsd_per_token(&logits, &logits, 0.5, 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("temperature"), "{e}");
    let e = gkd_jsd_per_token(&logits, &logits, 1.5, 0.9)
        .unwrap_err()
        .to_string();
    assert!(e.contains("beta"), "{e}");
    let bad_mask = (&m * 0.5).unwrap();
    let x = PolicyLossInputs {
        log_probs: &m,
        old_log_probs: &m,
        advantages: &m,
        mask: &bad_mask,
        token_weights: None,
    };
    assert!(
        vanilla_pg_loss(&x, AggMode::TokenMean, &AggScale::default())
            .unwrap_err()
            .to_string()
            .contains("mask")
    );
    let e = group_advantages(&[], &[], GroupBaseline::GrpoStd)
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty"), "{e}");
    let e = group_advantages(&[1.0, f32::NAN], &[0, 0], GroupBaseline::GrpoStd)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rewards") && e.contains("index 1"), "{e}");
    let e = group_advantages(&[1.0, 2.0], &[0], GroupBaseline::LeaveOneOut)
        .unwrap_err()
        .to_string();
    assert!(e.contains("group_ids"), "{e}");
    let e = pass_at_k(5, 2, 6).unwrap_err().to_string();
    assert!(e.contains("k=6") && e.contains("n=5"), "{e}");
    assert!(pass_at_k(5, 6, 1).is_err());
    assert!(pass_hat_k(0, 0, 1).is_err());
    assert!(mean_pass_at_k(&[], 1).is_err());
    assert!(soft_overlong_penalty(10, 8, 16).is_err());
    assert!(gae(&m, &wrong, &m, 1.0, 1.0)
        .unwrap_err()
        .to_string()
        .contains("values"));
    assert!(gae(&m, &m, &m, 1.5, 1.0).is_err());
    let one = Tensor::new(&[[1.0f32, 0.0]], &Device::Cpu).unwrap();
    assert!(masked_whiten(&one, &one, true)
        .unwrap_err()
        .to_string()
        .contains("at least 2"));
    let nan = Tensor::new(&[[f32::NAN, 0.0, 1.0], [0.0, 0.0, 0.0]], &Device::Cpu).unwrap();
    assert!(discounted_returns(&nan, &m, 1.0)
        .unwrap_err()
        .to_string()
        .contains("non-finite"));
    assert!(tis_weights(&m, &wrong, &m, 2.0).is_err());
    assert!(mis_weights(&m, &m, &m, MisLevel::Token, 2.0, 1.0, None).is_err());
    let v = Tensor::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
    let w = Tensor::new(&[1.0f32], &Device::Cpu).unwrap();
    assert!(dpo_loss(&v, &w, &v, &v, 0.1)
        .unwrap_err()
        .to_string()
        .contains("policy_rejected"));
    assert!(entropy_from_logits(&m).is_err());
    let logits = Tensor::zeros((1, 2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
    let ids = Tensor::new(&[[0u32, 3]], &Device::Cpu).unwrap();
    assert!(token_log_probs(&logits, &ids)
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(bootstrap_ci::<f64>(&[], |_| Ok(0.0), 10, 0.9, 1).is_err());
    assert!(AdaptiveKlController::new(0.1, 0.0, 10.0).is_err());
}

#[test]
fn degenerate_groups_and_filter_are_explicit() {
    // all-equal rewards whose float mean is not exactly representable
    let rewards = [0.1f32, 0.1, 0.1, 1.0, 0.0, 0.7];
    let ids = [4, 4, 4, 1, 1, 9];
    let out = group_advantages(&rewards, &ids, GroupBaseline::GrpoStd).unwrap();
    assert_eq!(&out.per_sequence[..3], &[0.0, 0.0, 0.0]);
    assert_eq!(out.zero_variance_groups, 1);
    assert_eq!(out.singleton_groups, 1);
    assert_eq!(out.per_sequence[5], 0.7);
    let f = dynamic_sampling_filter(&rewards, &ids).unwrap();
    assert_eq!(f.kept_indices, vec![3, 4, 5]);
    assert_eq!(
        (f.dropped_groups, f.dropped_sequences, f.kept_groups),
        (1, 3, 2)
    );
}

#[test]
fn config_enums_use_verl_kebab_case_names() {
    let agg: AggMode = serde_json::from_str("\"seq-mean-token-sum-norm\"").unwrap();
    assert_eq!(agg, AggMode::SeqMeanTokenSumNorm);
    assert_eq!(
        serde_json::to_string(&AggMode::TokenMean).unwrap(),
        "\"token-mean\""
    );
    let k: KlEstimator = serde_json::from_str("\"low-var-kl\"").unwrap();
    assert_eq!(k, KlEstimator::K3);
    let l: PolicyLoss = serde_json::from_str(
        r#"{"kind":"ppo-clip","clip_low":0.2,"clip_high":0.28,"dual_clip":3.0}"#,
    )
    .unwrap();
    assert_eq!(
        l,
        PolicyLoss::PpoClip {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: Some(3.0)
        }
    );
    let a: AdvantageEstimator =
        serde_json::from_str(r#"{"kind":"grpo","norm_by_std":false}"#).unwrap();
    assert_eq!(a, AdvantageEstimator::Grpo { norm_by_std: false });
    let kc: PolicyLoss =
        serde_json::from_str(r#"{"kind":"kl-cov","kl_cov_ratio":0.002,"kl_coef":1.0}"#).unwrap();
    assert_eq!(
        kc,
        PolicyLoss::KlCov {
            kl_cov_ratio: 0.002,
            kl_coef: 1.0
        }
    );
    let cc: PolicyLoss = serde_json::from_str(
        r#"{"kind":"clip-cov","clip_low":0.2,"clip_high":0.2,"clip_cov_ratio":0.0002,"cov_low":1.0,"cov_high":5.0,"seed":0}"#,
    )
    .unwrap();
    assert!(matches!(cc, PolicyLoss::ClipCov { seed: 0, .. }));
    let c: RolloutCorrection = serde_json::from_str(r#"{"kind":"tis","cap":2.0}"#).unwrap();
    assert_eq!(c, RolloutCorrection::Tis { cap: 2.0 });
}
