//! The local KV-cached engine over TinyAgent: its log-probs against the full forward pass,
//! per-row seeding, stop and length, prefix caching and bad settings.

use agentrl_engine::SamplingParams;
use agentrl_engine::{
    Engine, FinishReason, GenerateParams, GenerateRequest, LocalEngine, LogprobKind, WeightSync,
};
use agentrl_model::TinyAgent;
use agentrl_model::TinyConfig;
use candle_core::Tensor;
use candle_core::{Device, IndexOp};

fn model() -> TinyAgent {
    let cfg = TinyConfig {
        vocab_size: 19,
        max_seq: 64,
        d_model: 16,
        n_heads: 2,
        mlp_ratio: 2,
        ..TinyConfig::for_vocab(19)
    };
    TinyAgent::new(cfg, 1, &Device::Cpu).unwrap()
}

fn params(max_tokens: usize, stop: &[u32]) -> GenerateParams {
    GenerateParams {
        sampling: SamplingParams::default(),
        max_tokens,
        stop: stop.to_vec(),
    }
}

fn requests(prompts: &[Vec<u32>], seed: u64) -> Vec<GenerateRequest> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| GenerateRequest {
            prompt: p.clone(),
            seed: seed + i as u64,
            session: Some(i as u64),
        })
        .collect()
}

/// Per-position log-probs of `tokens` under a full forward pass (the trainer's view).
fn score(model: &TinyAgent, tokens: &[u32]) -> Vec<f32> {
    let ids = Tensor::from_vec(tokens.to_vec(), (1, tokens.len()), &Device::Cpu).unwrap();
    let logits = model.forward(&ids).unwrap().logits.i(0).unwrap();
    let logp = candle_core::Tensor::log_sum_exp(&logits, 1).unwrap();
    let rows = logits.to_vec2::<f32>().unwrap();
    let lse = logp.to_vec1::<f32>().unwrap();
    let mut out = vec![0.0];
    for (pos, &tok) in tokens.iter().enumerate().skip(1) {
        out.push(rows[pos - 1][tok as usize] - lse[pos - 1]);
    }
    out
}

#[test]
fn sampled_logprobs_agree_with_the_full_forward_pass() {
    let model = model();
    let prompts = vec![vec![1, 2, 3], vec![4, 5, 6, 7, 8], vec![9]];
    let mut engine = LocalEngine::new(&model);
    let gens = engine
        .generate(&requests(&prompts, 0), &params(12, &[18]))
        .unwrap();
    for (prompt, gen) in prompts.iter().zip(&gens) {
        assert!(!gen.tokens.is_empty());
        assert_eq!(gen.logprob_kind, LogprobKind::TemperatureScaled);
        let mut seq = prompt.clone();
        seq.extend(&gen.tokens);
        let scored = score(&model, &seq);
        for (k, lp) in gen.logprobs.iter().enumerate() {
            let want = scored[prompt.len() + k];
            assert!(
                (lp - want).abs() < 1e-5,
                "token {k}: engine {lp} vs trainer {want}"
            );
        }
    }
}

#[test]
fn sampling_is_seeded_per_row_and_respects_stop_and_length() {
    let model = model();
    let prompts = vec![vec![1, 2], vec![3]];
    let run = |seed| {
        let mut engine = LocalEngine::new(&model);
        engine
            .generate(&requests(&prompts, seed), &params(10, &[5, 6, 7]))
            .unwrap()
    };
    assert_eq!(run(3), run(3));
    assert!(
        (0..8).any(|s| run(s) != run(3)),
        "different seeds should differ"
    );
    // A row's sample does not depend on its batch neighbours.
    let mut alone = LocalEngine::new(&model);
    let single = alone
        .generate(&requests(&prompts[1..], 4), &params(10, &[5, 6, 7]))
        .unwrap();
    assert_eq!(single[0], run(3)[1]);
    for gen in run(4) {
        assert!(gen.tokens.len() <= 10);
        let stops = gen.tokens.iter().filter(|t| [5, 6, 7].contains(*t)).count();
        assert_eq!(stops, usize::from(gen.finish == FinishReason::Stop));
    }
}

/// The rows' tokens are drawn in parallel, each from its own seeded generator: the same
/// completions on a pool of one thread and of three.
#[test]
fn the_draws_do_not_depend_on_the_thread_count() {
    let model = model();
    let prompts: Vec<Vec<u32>> = (0..7).map(|i| vec![1 + i % 5, 2, 3 + i % 3]).collect();
    let run = |threads| {
        let mut engine = agentrl_engine::OnThreads::new(LocalEngine::new(&model), threads).unwrap();
        engine
            .generate(&requests(&prompts, 11), &params(12, &[5]))
            .unwrap()
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn prefix_caching_gives_the_same_samples_as_a_cold_start() {
    let model = model();
    let prompts = vec![vec![1, 2, 3], vec![4, 5]];
    let mut warm = LocalEngine::new(&model);
    let first = warm
        .generate(&requests(&prompts, 0), &params(3, &[]))
        .unwrap();
    // The next turn: each prompt extended by its completion and an "observation".
    let next: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&first)
        .map(|(p, c)| {
            let mut v = p.clone();
            v.extend(&c.tokens);
            v.extend([10, 11]);
            v
        })
        .collect();
    // Reversed order, to exercise the row reordering.
    let mut reqs = requests(&next, 7);
    reqs.reverse();
    let warm_next = warm.generate(&reqs, &params(4, &[])).unwrap();
    let mut cold = LocalEngine::new(&model);
    let cold_next = cold.generate(&reqs, &params(4, &[])).unwrap();
    assert_eq!(warm_next.len(), 2);
    for (w, c) in warm_next.iter().zip(&cold_next) {
        assert_eq!(w.tokens, c.tokens);
        for (a, b) in w.logprobs.iter().zip(&c.logprobs) {
            assert!((a - b).abs() < 1e-5);
        }
    }
}

#[test]
fn rejects_bad_settings_and_overlong_prompts() {
    let model = model();
    let mut engine = LocalEngine::new(&model);
    let mut bad = params(4, &[]);
    bad.sampling.top_p = 0.0;
    assert!(engine.generate(&requests(&[vec![1]], 0), &bad).is_err());
    assert!(engine
        .generate(&requests(&[vec![1; 64]], 0), &params(8, &[]))
        .is_err());
    assert!(engine
        .generate(&requests(&[vec![]], 0), &params(8, &[]))
        .is_err());
    let err = engine
        .sync_weights(&WeightSync::FullWeights {
            dir: "x".into(),
            version: 1,
        })
        .unwrap_err();
    assert!(err.to_string().contains("in place"));
    engine
        .sync_weights(&WeightSync::Shared { version: 3 })
        .unwrap();
    assert_eq!(engine.weight_version(), 3);
}
