//! Token sampling: temperature, top-k and top-p shape the draw, each log-prob kind reports
//! its value, the partial sort draws what a full sort draws, and bad input is an error.

use agentrl_engine::sampling::{
    kept_tokens, most_likely, most_likely_of, sample_token, sample_token_as, scaled_log_softmax,
    SamplingParams,
};
use agentrl_engine::LogprobKind;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn temperature_top_k_and_top_p_shape_the_distribution() -> anyhow::Result<()> {
    let logits = [2.0f32, 1.0, 0.0, -1.0];
    // Greedy picks the argmax and reports its temperature-1 log-prob.
    let greedy = SamplingParams {
        temperature: 0.0,
        ..Default::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let (tok, lp) = sample_token(&logits, &greedy, &mut rng)?;
    assert_eq!(tok, 0);
    assert!((lp as f64 - scaled_log_softmax(&logits, 1.0)[0]).abs() < 1e-6);
    // top_p small enough keeps only the top token; its log-prob is not renormalised.
    let nucleus = SamplingParams {
        top_p: 0.5,
        ..Default::default()
    };
    for _ in 0..50 {
        let (tok, lp) = sample_token(&logits, &nucleus, &mut rng)?;
        assert_eq!(tok, 0);
        assert!(lp < 0.0);
    }
    // top_k = 2 never draws the two least likely tokens.
    let top2 = SamplingParams {
        top_k: 2,
        ..Default::default()
    };
    for _ in 0..200 {
        assert!(sample_token(&logits, &top2, &mut rng)?.0 < 2);
    }
    // Empirical frequencies follow softmax(logits / T).
    let hot = SamplingParams {
        temperature: 2.0,
        ..Default::default()
    };
    let want: Vec<f64> = scaled_log_softmax(&logits, 2.0)
        .iter()
        .map(|l| l.exp())
        .collect();
    let mut counts = [0usize; 4];
    let n = 20_000;
    for _ in 0..n {
        counts[sample_token(&logits, &hot, &mut rng)?.0 as usize] += 1;
    }
    for (c, p) in counts.iter().zip(&want) {
        assert!(
            (*c as f64 / n as f64 - p).abs() < 0.02,
            "{counts:?} vs {want:?}"
        );
    }
    Ok(())
}

#[test]
fn logprob_kinds_report_raw_scaled_and_renormalised_values() {
    let logits = [2.0f32, 1.0, 0.0, -1.0];
    let params = SamplingParams {
        temperature: 0.5,
        top_k: 2,
        ..Default::default()
    };
    let scaled = scaled_log_softmax(&logits, 0.5);
    let raw = scaled_log_softmax(&logits, 1.0);
    let kept_mass = scaled[0].exp() + scaled[1].exp();
    let mut drawn = [false; 2];
    for seed in 0..40 {
        let draw = |kind| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            sample_token_as(&logits, &params, kind, &mut rng).unwrap()
        };
        let (token, as_scaled) = draw(LogprobKind::TemperatureScaled);
        let (raw_token, as_raw) = draw(LogprobKind::Raw);
        let (processed_token, as_processed) = draw(LogprobKind::Processed);
        // The kind changes what is reported, never what is drawn.
        assert_eq!((token, token), (raw_token, processed_token));
        let t = token as usize;
        drawn[t] = true;
        assert!((as_scaled as f64 - scaled[t]).abs() < 1e-6);
        assert!((as_raw as f64 - raw[t]).abs() < 1e-6);
        assert!((as_processed as f64 - (scaled[t] - kept_mass.ln())).abs() < 1e-6);
    }
    assert_eq!(
        drawn,
        [true, true],
        "both kept tokens are drawn over 40 seeds"
    );
    // Greedy reports log softmax(logits) whatever the kind.
    let greedy = SamplingParams {
        temperature: 0.0,
        top_k: 2,
        ..Default::default()
    };
    for kind in [
        LogprobKind::Raw,
        LogprobKind::TemperatureScaled,
        LogprobKind::Processed,
    ] {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (token, lp) = sample_token_as(&logits, &greedy, kind, &mut rng).unwrap();
        assert_eq!(token, 0);
        assert!((lp as f64 - raw[0]).abs() < 1e-6);
    }
}

/// The plain definition: sort the whole vocabulary, keep the top k, then the nucleus.
fn reference_sample(logits: &[f32], params: &SamplingParams, u: f64) -> (u32, f32) {
    let logp = scaled_log_softmax(logits, params.temperature);
    assert!(
        params.truncates(),
        "the reference walks the kept set by probability"
    );
    let order = kept_tokens(&logp, params);
    let cumulative: f64 = order.iter().map(|&i| logp[i].exp()).sum();
    let target = u * cumulative;
    let mut walked = 0.0;
    for &i in &order {
        walked += logp[i].exp();
        if target < walked {
            return (i as u32, logp[i] as f32);
        }
    }
    let last = order[order.len() - 1];
    (last as u32, logp[last] as f32)
}

#[test]
fn partial_sorting_draws_exactly_what_a_full_sort_draws() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let knobs = [
        (0.9, 0),
        (0.5, 0),
        (0.999, 0),
        (0.9, 30),
        (1.0, 10),
        (0.95, 20),
    ];
    for case in 0..60 {
        // Flat rows force the nucleus past the first partition width; peaked rows do not.
        let spread = if case % 2 == 0 { 0.2 } else { 6.0 };
        let logits: Vec<f32> = (0..500)
            .map(|_| (rng.random::<f32>() - 0.5) * spread)
            .collect();
        for &(top_p, top_k) in &knobs {
            let params = SamplingParams {
                temperature: 0.8,
                top_p,
                top_k,
            };
            let seed = case as u64 * 31 + top_k as u64;
            let u = ChaCha8Rng::seed_from_u64(seed).random::<f64>();
            let mut draw_rng = ChaCha8Rng::seed_from_u64(seed);
            let got = sample_token(&logits, &params, &mut draw_rng).unwrap();
            assert_eq!(got, reference_sample(&logits, &params, u), "{params:?}");
        }
    }
}

/// The one-pass top-`width` ranking is a full sort's prefix, ties (many equal scores, as a
/// quantised row has) ranked by id, at every width from 0 past the row's length.
#[test]
fn the_top_width_ranking_is_a_full_sorts_prefix() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for case in 0..40 {
        let len = 1 + case * 7;
        // Few distinct values in half the rows: ties everywhere, also at the cut.
        let levels = if case % 2 == 0 { 4.0 } else { 1e6 };
        let scores: Vec<f64> = (0..len)
            .map(|_| (rng.random::<f64>() * levels).floor() - levels / 2.0)
            .collect();
        let mut full: Vec<usize> = (0..len).collect();
        full.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        for width in [
            0,
            1,
            2,
            3,
            5,
            17,
            64,
            len / 2,
            len.saturating_sub(1),
            len,
            len + 3,
        ] {
            assert_eq!(
                most_likely(&scores, width),
                full[..width.min(len)].to_vec(),
                "row of {len}, width {width}"
            );
        }
    }
}

/// The sampler ranks the raw f32 logits instead of the f64 scaled ones it used to build: the
/// same order at every temperature, ties (equal logits, signed zeros) included.
#[test]
fn ranking_the_f32_logits_is_ranking_the_scaled_ones() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for case in 0..30 {
        let len = 50 + case * 13;
        let levels = if case % 3 == 0 { 6.0 } else { 1e5 };
        let mut logits: Vec<f32> = (0..len)
            .map(|_| ((rng.random::<f32>() * levels).floor() - levels / 2.0) / 7.0)
            .collect();
        logits[len / 2] = -0.0;
        logits[len / 3] = 0.0;
        logits[len / 4] = f32::NEG_INFINITY;
        for temperature in [0.07, 0.7, 1.0, 1.3] {
            let scaled: Vec<f64> = logits.iter().map(|&x| x as f64 / temperature).collect();
            for width in [1, 7, 20, 64, len] {
                assert_eq!(
                    most_likely_of(&logits, width),
                    most_likely(&scaled, width),
                    "row of {len}, T = {temperature}, width {width}"
                );
            }
        }
    }
}

#[test]
fn nan_logits_and_bad_knobs_are_errors() {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let err = sample_token(&[0.0, f32::NAN], &SamplingParams::default(), &mut rng)
        .unwrap_err()
        .to_string();
    assert!(err.contains("NaN"), "{err}");
    let bad = SamplingParams {
        top_p: 0.0,
        ..Default::default()
    };
    assert!(bad.validate().unwrap_err().to_string().contains("top_p"));
    let bad = SamplingParams {
        temperature: -1.0,
        ..Default::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("temperature"));
}
