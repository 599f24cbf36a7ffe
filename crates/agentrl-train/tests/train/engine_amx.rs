//! `engine.cpu_matmul = "amx"`: the local engine samples from a Qwen3 copy of its own, packed
//! for the CPU's AMX unit, whose reported log-probs stay within 1e-4 of the trainer's f32 ones;
//! the copy is packed again at every weight sync, and the trainer's own model is never packed
//! (its inference forwards give the old and reference log-probs). On a CPU without AMX the
//! setting is an error naming the key, and `"auto"` falls back to f32 and says so.

use agentrl_engine::{Completion, Engine, GenerateParams, GenerateRequest, LogprobKind};
use agentrl_model::fused::amx_matmul;
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use agentrl_train::config::{load_config, Config};
use agentrl_train::engine_sync::{EngineSync, EngineWeights};

/// A tiny random Qwen3 whose every weight is a whole number of 32 x 32 blocks (so all of it
/// packs, the LM head included), with a LoRA adapter on every projection as a Qwen3 run
/// trains it (a frozen base), its B factors nonzero (a trained adapter). Weights of std 0.1
/// (measured gap 3.4e-5; at 0.2, a sharper model, 1.02e-4, past the bound: the AMX path's error
/// grows with how peaked the distributions are, docs/performance.md).
fn policy() -> Qwen3 {
    let config = Qwen3Config {
        vocab_size: 256,
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings: false,
        max_position_embeddings: 128,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    };
    let mut model = Qwen3::random(config, 11, 0.1, &LoadOptions::default()).unwrap();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        target_modules: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
        ]
        .map(String::from)
        .to_vec(),
    };
    model.add_lora(&lora, 3).unwrap();
    nudge_adapters(&model, 0.05);
    model
}

/// Moves every LoRA factor by `by`: a trainer update.
fn nudge_adapters(model: &Qwen3, by: f64) {
    for (_, var) in model.lora_vars() {
        var.set(&(var.as_tensor() + by).unwrap()).unwrap();
    }
}

fn config(cpu_matmul: &str) -> Config {
    load_config(
        None,
        &[
            "model.kind=\"qwen3\"".to_string(),
            format!("engine.cpu_matmul={cpu_matmul:?}"),
        ],
    )
    .unwrap()
}

/// 20 rows (past the 16 from which the AMX path runs, in decoding steps too) at T = 1.
fn sample(sync: &EngineSync, policy: &Qwen3, version: u64) -> Vec<(Vec<u32>, Completion)> {
    let EngineWeights::Copy(copy) = sync.weights(policy, version) else {
        panic!("an AMX engine samples from a copy of its own");
    };
    let mut engine = copy
        .replica
        .engine(LogprobKind::TemperatureScaled, copy.version)
        .unwrap();
    let prompts: Vec<Vec<u32>> = (0..20u32)
        .map(|r| {
            (0..5 + r % 7)
                .map(|i| (r * 31 + i * 17 + 3) % 256)
                .collect()
        })
        .collect();
    let requests: Vec<GenerateRequest> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| GenerateRequest {
            prompt: p.clone(),
            seed: 100 + i as u64,
            session: None,
        })
        .collect();
    let params = GenerateParams {
        sampling: Default::default(),
        max_tokens: 6,
        stop: Vec::new(),
    };
    let completions = engine.generate(&requests, &params).unwrap();
    prompts.into_iter().zip(completions).collect()
}

/// Largest |engine log-prob − trainer log-prob| over every sampled token, the trainer's
/// scored by its own (f32) inference forward.
fn worst_gap(policy: &Qwen3, samples: &[(Vec<u32>, Completion)]) -> f64 {
    let mut worst = 0f64;
    for (prompt, completion) in samples {
        let seq: Vec<u32> = prompt.iter().chain(&completion.tokens).copied().collect();
        let trainer = policy.score_sequence(&seq).unwrap();
        let trainer = &trainer[prompt.len() - 1..];
        assert_eq!(trainer.len(), completion.logprobs.len());
        for (a, b) in completion.logprobs.iter().zip(trainer) {
            worst = worst.max((a - b).abs() as f64);
        }
    }
    worst
}

#[test]
fn an_amx_engine_matches_the_f32_trainer_and_stays_packed_across_syncs() {
    // This target computes on one thread (`main.rs`), fixed before any tensor work.
    agentrl_train::threads::apply(1).unwrap();
    let policy = policy();
    let tmp = tempfile::tempdir().unwrap();
    if !amx_matmul::amx_available() {
        let err = EngineSync::new(&config("amx"), &policy, tmp.path())
            .err()
            .expect("\"amx\" without AMX is an error");
        assert!(format!("{err:#}").contains("engine.cpu_matmul"), "{err:#}");
        let auto = EngineSync::new(&config("auto"), &policy, tmp.path()).unwrap();
        assert!(!auto.amx().packed && !auto.has_own_weights());
        assert!(auto.amx().note.as_deref().unwrap().contains("no AMX"));
        eprintln!("no AMX on this CPU: the AMX engine itself is not checked");
        return;
    }
    for setting in ["amx", "auto"] {
        let mut sync = EngineSync::new(&config(setting), &policy, tmp.path()).unwrap();
        eprintln!("{}", sync.amx().note.as_deref().unwrap());
        assert!(sync.amx().packed);
        // A synchronous f32 run would sample from the trainer's weights; AMX takes a copy.
        assert!(sync.has_own_weights());
        assert!(sync.copy_packed_for_amx());
        sync.sync(&policy, 0).unwrap();
        assert!(sync.copy_packed_for_amx(), "the first sync re-packs");
        let before = sample(&sync, &policy, 0);
        let gap = worst_gap(&policy, &before);
        eprintln!("cpu_matmul = {setting}: max |log-prob gap| {gap:.2e} before a sync");
        assert!(gap <= 1e-4, "{gap}");

        // The trainer updates; the copy follows at the sync, still packed.
        nudge_adapters(&policy, 0.05);
        sync.sync(&policy, 1).unwrap();
        assert!(
            sync.copy_packed_for_amx(),
            "a weight sync keeps the AMX packing"
        );
        let after = sample(&sync, &policy, 1);
        assert!(after.iter().all(|(_, c)| c.weight_version == 1));
        let gap = worst_gap(&policy, &after);
        eprintln!("cpu_matmul = {setting}: max |log-prob gap| {gap:.2e} after a sync");
        assert!(gap <= 1e-4, "{gap}");
        assert_ne!(
            before.iter().map(|(_, c)| &c.logprobs).collect::<Vec<_>>(),
            after.iter().map(|(_, c)| &c.logprobs).collect::<Vec<_>>(),
            "the engine samples the new weights"
        );
        nudge_adapters(&policy, -0.05);
    }
    // The trainer's model itself is never packed: its inference forwards stay f32.
    assert!(!policy.packed_for_amx());
    // The default leaves everything as it was: no copy, nothing packed.
    let plain = EngineSync::new(&config("f32"), &policy, tmp.path()).unwrap();
    assert!(!plain.has_own_weights() && plain.amx().note.is_none());
}
