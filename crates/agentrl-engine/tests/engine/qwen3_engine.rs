//! The local engine over a tiny random Qwen3: sampled log-probs against the trainer's full
//! forward pass (the `TemperatureScaled` contract), stops and length caps, seeding, prefix
//! caching, the `Raw`/`Processed` log-prob modes, and bf16 and AMX replicas against the f32
//! trainer.

use agentrl_engine::{
    scaled_log_softmax, Completion, Engine, FinishReason, GenerateParams, GenerateRequest,
    LocalEngine, LogprobKind, Qwen3Replica, SamplingParams, WeightSync,
};
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use candle_core::{DType, Device, IndexOp, Tensor};

const VOCAB: usize = 97;
const MAX_POSITIONS: usize = 64;

fn trainer(seed: u64, trainable: bool) -> Qwen3 {
    let config = Qwen3Config {
        vocab_size: VOCAB,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings: false,
        max_position_embeddings: MAX_POSITIONS,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    let options = LoadOptions {
        dtype: DType::F32,
        device: Device::Cpu,
        trainable,
    };
    // std 0.5 gives peaked enough distributions that a completion is not pure noise.
    Qwen3::random(config, seed, 0.5, &options).unwrap()
}

fn sampling(temperature: f64, top_p: f64, top_k: usize) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p,
        top_k,
    }
}

fn params(sampling: SamplingParams, max_tokens: usize, stop: &[u32]) -> GenerateParams {
    GenerateParams {
        sampling,
        max_tokens,
        stop: stop.to_vec(),
    }
}

fn prompts() -> Vec<Vec<u32>> {
    vec![
        (0..11).map(|i| (i * 7 + 1) % VOCAB as u32).collect(),
        vec![5, 9],
        (0..23).map(|i| (i * 13 + 4) % VOCAB as u32).collect(),
    ]
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

/// The trainer's view: full-forward logits (f32, training kernels) of `prompt + completion`,
/// rows `prompt.len() - 1 ..` (the positions that predicted each completion token).
fn completion_logits(model: &Qwen3, prompt: &[u32], completion: &[u32]) -> Vec<Vec<f32>> {
    let seq: Vec<u32> = prompt.iter().chain(completion).copied().collect();
    let input = Tensor::from_slice(&seq, (1, seq.len()), &Device::Cpu).unwrap();
    let logits: Vec<Vec<f32>> = model
        .forward(&input)
        .unwrap()
        .i(0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec2()
        .unwrap();
    logits[prompt.len() - 1..seq.len() - 1].to_vec()
}

/// The trainer's `log softmax(logits / T)[token]` for every completion token.
fn trainer_logprobs(model: &Qwen3, prompt: &[u32], completion: &[u32], t: f64) -> Vec<f64> {
    completion_logits(model, prompt, completion)
        .iter()
        .zip(completion)
        .map(|(row, &tok)| scaled_log_softmax(row, t)[tok as usize])
        .collect()
}

fn max_gap(gen: &Completion, want: &[f64]) -> f64 {
    assert_eq!(gen.logprobs.len(), want.len());
    gen.logprobs
        .iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn sampled_logprobs_are_the_trainers_temperature_scaled_logprobs() {
    let plain = trainer(1, false);
    // The same base with a LoRA adapter whose B factors are nonzero (a trained adapter).
    let mut adapted = trainer(1, false);
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    adapted.add_lora(&lora, 2).unwrap();
    for (_, var) in adapted.lora_vars() {
        var.set(&(var.as_tensor() + 0.2).unwrap()).unwrap();
    }
    let prompts = prompts();
    // Truncation changes what is drawn, never what is reported: still log softmax(z / T)
    // over the full vocabulary.
    for (model, knobs) in [
        (&plain, sampling(0.7, 1.0, 0)),
        (&plain, sampling(1.3, 0.9, 8)),
        (&adapted, sampling(1.0, 1.0, 0)),
    ] {
        let mut engine = LocalEngine::new(model);
        let gens = engine
            .generate(&requests(&prompts, 3), &params(knobs.clone(), 12, &[]))
            .unwrap();
        for (prompt, gen) in prompts.iter().zip(&gens) {
            assert_eq!(gen.logprob_kind, LogprobKind::TemperatureScaled);
            assert_eq!(gen.tokens.len(), 12);
            let want = trainer_logprobs(model, prompt, &gen.tokens, knobs.temperature);
            let gap = max_gap(gen, &want);
            assert!(gap < 1e-4, "{knobs:?}: engine vs trainer {gap}");
        }
    }
}

#[test]
fn generation_stops_on_any_stop_id_and_at_the_length_caps() {
    let model = trainer(2, false);
    let prompts = prompts();
    // A third of the vocabulary stops, so most rows stop early.
    let stop: Vec<u32> = (0..VOCAB as u32).filter(|t| t % 3 == 0).collect();
    let mut stopped = 0;
    for seed in 0..4 {
        let mut engine = LocalEngine::new(&model);
        let gens = engine
            .generate(
                &requests(&prompts, seed * 10),
                &params(sampling(1.0, 1.0, 0), 9, &stop),
            )
            .unwrap();
        for gen in &gens {
            assert!(!gen.tokens.is_empty() && gen.tokens.len() <= 9);
            let (last, body) = gen.tokens.split_last().unwrap();
            assert!(body.iter().all(|t| !stop.contains(t)), "{:?}", gen.tokens);
            match gen.finish {
                // The stop token is part of the completion.
                FinishReason::Stop => {
                    assert!(stop.contains(last));
                    stopped += 1;
                }
                FinishReason::Length => assert_eq!(gen.tokens.len(), 9),
            }
        }
    }
    assert!(stopped >= 4, "only {stopped} of 12 rows stopped");
    // The model's context caps a completion too: 60 prompt tokens leave room for 4.
    let long: Vec<u32> = (0..60).map(|i| (i * 5 + 2) % VOCAB as u32).collect();
    let mut engine = LocalEngine::new(&model);
    let gens = engine
        .generate(
            &requests(std::slice::from_ref(&long), 0),
            &params(sampling(1.0, 1.0, 0), 20, &[]),
        )
        .unwrap();
    assert_eq!(gens[0].tokens.len(), MAX_POSITIONS - long.len());
    assert_eq!(gens[0].finish, FinishReason::Length);
    assert_eq!(engine.max_seq(), MAX_POSITIONS);
}

#[test]
fn sampling_is_deterministic_per_seed_and_independent_of_the_batch() {
    let model = trainer(3, false);
    let prompts = prompts();
    let knobs = params(sampling(1.0, 0.95, 20), 10, &[]);
    let run = |seed| {
        LocalEngine::new(&model)
            .generate(&requests(&prompts, seed), &knobs)
            .unwrap()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
    // Row 2 sampled alone (same seed) draws the same tokens as in the batch.
    let batched = run(5);
    let mut alone_reqs = requests(&prompts[2..], 0);
    alone_reqs[0].seed = 5 + 2;
    let alone = LocalEngine::new(&model)
        .generate(&alone_reqs, &knobs)
        .unwrap();
    assert_eq!(alone[0].tokens, batched[2].tokens);
    assert!(
        max_gap(
            &alone[0],
            &batched[2]
                .logprobs
                .iter()
                .map(|&x| x as f64)
                .collect::<Vec<_>>()
        ) < 1e-5
    );
}

/// The next turn of every row: its prompt, its completion, and an "observation".
fn next_turn(prompts: &[Vec<u32>], gens: &[Completion]) -> Vec<Vec<u32>> {
    prompts
        .iter()
        .zip(gens)
        .enumerate()
        .map(|(i, (p, c))| {
            let mut next = p.clone();
            next.extend(&c.tokens);
            next.extend((0..=i as u32 * 3).map(|k| (k * 11 + 50) % VOCAB as u32));
            next
        })
        .collect()
}

#[test]
fn prefix_caching_across_turns_gives_the_same_samples_as_no_caching() {
    let model = trainer(4, false);
    let prompts = prompts();
    let knobs = params(sampling(0.9, 1.0, 0), 6, &[]);
    let mut warm = LocalEngine::new(&model);
    let first = warm.generate(&requests(&prompts, 0), &knobs).unwrap();
    let mut turn = next_turn(&prompts, &first);
    for round in 0..2 {
        // Reversed order exercises the cache's row reordering.
        let mut reqs = requests(&turn, 100 + round);
        reqs.reverse();
        let warm_gens = warm.generate(&reqs, &knobs).unwrap();
        let cold_gens = LocalEngine::new(&model).generate(&reqs, &knobs).unwrap();
        for (w, c) in warm_gens.iter().zip(&cold_gens) {
            assert_eq!(w.tokens, c.tokens);
            assert!(max_gap(w, &c.logprobs.iter().map(|&x| x as f64).collect::<Vec<_>>()) < 1e-5);
        }
        let mut gens = warm_gens;
        gens.reverse();
        turn = next_turn(&turn, &gens);
    }
}

#[test]
fn a_shared_prefill_gives_each_row_what_it_would_sample_alone() {
    let model = trainer(6, false);
    // A 20-token prefix common to every prompt (a system prompt), one prompt requested three
    // times (a GRPO group), and one prompt that is nothing but the prefix and a token.
    let shared: Vec<u32> = (0..20).map(|i| (i * 3 + 7) % VOCAB as u32).collect();
    let with = |tail: &[u32]| -> Vec<u32> { shared.iter().chain(tail).copied().collect() };
    let prompts = vec![
        with(&[4, 8, 15, 16]),
        with(&[23, 42]),
        with(&[4, 8, 15, 16]),
        with(&[9]),
        with(&[4, 8, 15, 16]),
    ];
    let knobs = params(sampling(1.0, 1.0, 0), 8, &[]);
    let together = LocalEngine::new(&model)
        .generate(&requests(&prompts, 40), &knobs)
        .unwrap();
    for (i, prompt) in prompts.iter().enumerate() {
        let mut alone = requests(std::slice::from_ref(prompt), 40 + i as u64);
        alone[0].session = Some(i as u64);
        let alone = LocalEngine::new(&model).generate(&alone, &knobs).unwrap();
        assert_eq!(alone[0].tokens, together[i].tokens, "row {i}");
        let want: Vec<f64> = alone[0].logprobs.iter().map(|&x| x as f64).collect();
        assert!(max_gap(&together[i], &want) < 1e-5, "row {i}");
        // And the trainer agrees, as for any other sample.
        let trainer = trainer_logprobs(&model, prompt, &together[i].tokens, 1.0);
        assert!(max_gap(&together[i], &trainer) < 1e-4, "row {i} vs trainer");
    }
}

#[test]
fn raw_and_processed_modes_report_what_they_say() {
    let model = trainer(5, false);
    let prompts = prompts();
    let (t, top_k) = (0.6, 5);
    let knobs = params(sampling(t, 1.0, top_k), 8, &[]);
    let scaled = LocalEngine::new(&model)
        .generate(&requests(&prompts, 9), &knobs)
        .unwrap();
    let raw = LocalEngine::new(&model)
        .with_logprob_kind(LogprobKind::Raw)
        .generate(&requests(&prompts, 9), &knobs)
        .unwrap();
    let mut processed_engine = LocalEngine::new(&model).with_logprob_kind(LogprobKind::Processed);
    assert_eq!(processed_engine.logprob_kind(), LogprobKind::Processed);
    let processed = processed_engine
        .generate(&requests(&prompts, 9), &knobs)
        .unwrap();
    for (row, prompt) in prompts.iter().enumerate() {
        let (s, r, p) = (&scaled[row], &raw[row], &processed[row]);
        // Same draws; only the reported log-probs and their declared kind differ.
        assert_eq!((&r.tokens, &p.tokens), (&s.tokens, &s.tokens));
        assert_eq!(r.logprob_kind, LogprobKind::Raw);
        assert_eq!(p.logprob_kind, LogprobKind::Processed);
        let logits = completion_logits(&model, prompt, &s.tokens);
        let want_raw: Vec<f64> = logits
            .iter()
            .zip(&s.tokens)
            .map(|(z, &tok)| scaled_log_softmax(z, 1.0)[tok as usize])
            .collect();
        let want_processed: Vec<f64> = logits
            .iter()
            .zip(&s.tokens)
            .map(|(z, &tok)| {
                let logp = scaled_log_softmax(z, t);
                let mut sorted = logp.clone();
                sorted.sort_by(|a, b| b.total_cmp(a));
                let kept: f64 = sorted[..top_k].iter().map(|l| l.exp()).sum();
                logp[tok as usize] - kept.ln()
            })
            .collect();
        assert!(max_gap(r, &want_raw) < 1e-4);
        assert!(max_gap(p, &want_processed) < 1e-4);
        // The mismatch a trainer scoring log softmax(z / T) would see is real, not rounding.
        assert!(max_gap(r, &trainer_logprobs(&model, prompt, &s.tokens, t)) > 0.05);
        assert!(p.logprobs.iter().zip(&s.logprobs).all(|(p, s)| p >= s));
    }
}

#[test]
fn a_bf16_replica_is_slightly_off_the_f32_trainer_and_syncs_explicitly() {
    let model = trainer(6, true);
    let prompts = prompts();
    let t = 0.8;
    let knobs = params(sampling(t, 1.0, 0), 10, &[]);
    let mut engine =
        LocalEngine::new(Qwen3Replica::new(&model, DType::BF16, &Device::Cpu).unwrap());
    assert_eq!(engine.decoder().model().dtype(), DType::BF16);
    let gens = engine.generate(&requests(&prompts, 1), &knobs).unwrap();
    let mut worst = 0f64;
    for (prompt, gen) in prompts.iter().zip(&gens) {
        worst = worst.max(max_gap(
            gen,
            &trainer_logprobs(&model, prompt, &gen.tokens, t),
        ));
    }
    eprintln!("bf16 engine vs f32 trainer: max |log-prob gap| = {worst:.3e}");
    assert!(worst > 1e-4 && worst < 0.3, "{worst}");

    // A shared sync would leave the copy stale: refused.
    let err = engine
        .sync_weights(&WeightSync::Shared { version: 1 })
        .unwrap_err()
        .to_string();
    assert!(err.contains("own copy"), "{err}");
    // The trainer moves; the replica only follows after sync_from.
    for (_, var) in model.trainable_vars() {
        var.set(&(var.as_tensor() * 1.5).unwrap()).unwrap();
    }
    let stale = engine.generate(&requests(&prompts, 1), &knobs).unwrap();
    assert_eq!(stale, gens);
    engine.sync_from(&model, 1).unwrap();
    assert_eq!(engine.weight_version(), 1);
    let fresh = engine.generate(&requests(&prompts, 1), &knobs).unwrap();
    for (prompt, gen) in prompts.iter().zip(&fresh) {
        assert_eq!(gen.weight_version, 1);
        let gap = max_gap(gen, &trainer_logprobs(&model, prompt, &gen.tokens, t));
        assert!(gap < 0.3, "after sync: {gap}");
    }
    assert_ne!(fresh, gens);
}

#[test]
fn a_shared_sync_drops_the_prefix_cache() {
    let model = trainer(7, true);
    let prompts = prompts();
    let knobs = params(sampling(1.0, 1.0, 0), 5, &[]);
    let mut engine = LocalEngine::new(&model);
    let first = engine.generate(&requests(&prompts, 0), &knobs).unwrap();
    for (_, var) in model.trainable_vars() {
        var.set(&(var.as_tensor() * 0.8).unwrap()).unwrap();
    }
    engine
        .sync_weights(&WeightSync::Shared { version: 4 })
        .unwrap();
    // The next turn extends every session; its keys and values must be recomputed with the
    // new weights, so the engine agrees with the trainer's new scores.
    let turn = next_turn(&prompts, &first);
    let gens = engine.generate(&requests(&turn, 1), &knobs).unwrap();
    for (prompt, gen) in turn.iter().zip(&gens) {
        assert_eq!(gen.weight_version, 4);
        let gap = max_gap(gen, &trainer_logprobs(&model, prompt, &gen.tokens, 1.0));
        assert!(gap < 1e-4, "{gap}");
    }
}

/// A replica packed for the CPU's AMX unit (`engine.cpu_matmul = "amx"`, `agentrl serve
/// --cpu-matmul amx`): over 20 rows (past the 16 from which the AMX path runs, in decoding
/// steps as well as prefill) its log-probs are the f32 trainer's within 1e-4 yet not the f32
/// replica's to the bit (the path ran), and after the trainer moves, `sync_from` leaves it
/// packed and on the new weights. The trainer's own model is never packed.
#[test]
fn an_amx_replica_tracks_the_f32_trainer_and_stays_packed_after_a_sync() {
    if !agentrl_model::fused::amx_matmul::amx_available() {
        eprintln!("no AMX on this CPU: skipped");
        return;
    }
    // Every weight a whole number of 32 x 32 blocks (the LM head too: 128 tokens). Weights of
    // std 0.1: at 0.3, a much sharper model, the gap reached 2.1e-4 (docs/performance.md records
    // 1.05e-4 on the sharp tiny fixtures; 3e-5 on the 0.6B shape); here it is 5-6e-5.
    let config = Qwen3Config {
        vocab_size: 128,
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings: false,
        max_position_embeddings: MAX_POSITIONS,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    let options = LoadOptions {
        dtype: DType::F32,
        device: Device::Cpu,
        trainable: true,
    };
    let model = Qwen3::random(config, 9, 0.1, &options).unwrap();
    let prompts: Vec<Vec<u32>> = (0..20u32)
        .map(|r| {
            (0..3 + r % 9)
                .map(|i| (r * 29 + i * 11 + 1) % 128)
                .collect()
        })
        .collect();
    let knobs = params(sampling(1.0, 1.0, 0), 8, &[]);
    let mut replica = Qwen3Replica::new(&model, DType::F32, &Device::Cpu).unwrap();
    assert!(replica.pack_for_amx().unwrap());
    let mut packed = LocalEngine::new(replica);
    let mut plain = LocalEngine::new(Qwen3Replica::new(&model, DType::F32, &Device::Cpu).unwrap());
    let worst = |engine: &mut LocalEngine<Qwen3Replica>, model: &Qwen3| {
        let gens = engine.generate(&requests(&prompts, 3), &knobs).unwrap();
        let mut worst = 0f64;
        for (prompt, gen) in prompts.iter().zip(&gens) {
            worst = worst.max(max_gap(
                gen,
                &trainer_logprobs(model, prompt, &gen.tokens, 1.0),
            ));
        }
        (worst, gens)
    };
    let (gap, amx) = worst(&mut packed, &model);
    let (_, f32_path) = worst(&mut plain, &model);
    eprintln!("AMX replica vs f32 trainer: max |log-prob gap| = {gap:.3e}");
    assert!(gap <= 1e-4, "{gap}");
    assert_ne!(
        amx.iter().map(|g| &g.logprobs).collect::<Vec<_>>(),
        f32_path.iter().map(|g| &g.logprobs).collect::<Vec<_>>(),
        "the AMX path ran"
    );
    assert!(!model.packed_for_amx(), "the trainer's model is not packed");

    for (_, var) in model.trainable_vars() {
        var.set(&(var.as_tensor() * 1.1).unwrap()).unwrap();
    }
    packed.sync_from(&model, 1).unwrap();
    assert!(
        packed.decoder().model().packed_for_amx(),
        "a sync keeps the packing"
    );
    let (gap, fresh) = worst(&mut packed, &model);
    eprintln!("after a sync: max |log-prob gap| = {gap:.3e}");
    assert!(gap <= 1e-4, "after sync: {gap}");
    assert!(fresh.iter().all(|g| g.weight_version == 1));
}

/// `agentrl serve --cpu-matmul amx`: a served model packed for AMX stays packed when a LoRA
/// adapter is applied (the clone shares the packed base) and when full weights are loaded
/// from a folder (SGLang's `update_weights_from_disk`: packed again); an unpacked one stays
/// unpacked.
#[test]
fn a_served_amx_model_stays_packed_through_weight_loads() {
    use agentrl_engine::serve::ServableDecoder;
    if !agentrl_model::fused::amx_matmul::amx_available() {
        eprintln!("no AMX on this CPU: skipped");
        return;
    }
    let plain = trainer(10, false);
    let mut packed = plain.clone();
    assert!(packed.pack_for_amx().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let (full, adapter) = (tmp.path().join("full"), tmp.path().join("adapter"));
    plain.save(&full).unwrap();
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "down_proj".into()],
    };
    let mut adapted = plain.clone();
    adapted.add_lora(&lora, 4).unwrap();
    adapted.save_lora_peft(&adapter, &lora, "tiny").unwrap();
    assert!(packed.with_lora(&adapter).unwrap().packed_for_amx());
    assert!(packed.load_folder(&full).unwrap().packed_for_amx());
    assert!(!plain.with_lora(&adapter).unwrap().packed_for_amx());
    assert!(!plain.load_folder(&full).unwrap().packed_for_amx());
}
