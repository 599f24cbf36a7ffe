//! Qwen3 against transformers and PEFT (committed fixtures from
//! `scripts/make_qwen3_fixtures.py`), plus the KV-cache, gradient, LoRA and save/load checks.

use std::path::{Path, PathBuf};

use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{ForwardMode, KvCache, LoadOptions, Qwen3, Qwen3Config};
use candle_core::{DType, Device, Tensor, Var};
use serde::Deserialize;

const PARITY_CONFIGS: [&str; 4] = [
    "gqa2_tied",
    "gqa4_untied_hd32",
    "mha_untied_sharded",
    "gqa4_tied_hd8_bf16",
];

#[derive(Deserialize)]
struct Reference {
    inputs: Vec<ReferenceInput>,
}

#[derive(Deserialize)]
struct ReferenceInput {
    kind: String,
    ids: Vec<u32>,
    logprobs: Vec<f32>,
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen3")
        .join(name)
}

fn reference(dir: &Path) -> Reference {
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn options(dtype: DType, trainable: bool) -> LoadOptions {
    LoadOptions {
        dtype,
        device: Device::Cpu,
        trainable,
    }
}

/// Log-probs of `ids[1..]` given the prefix, with the chosen kernels.
pub(crate) fn logprobs(model: &Qwen3, ids: &[u32], mode: ForwardMode) -> Vec<f32> {
    let n = ids.len();
    let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &Device::Cpu).unwrap();
    let targets = Tensor::from_slice(&ids[1..], (1, n - 1), &Device::Cpu).unwrap();
    let out = model.token_logprobs_mode(&inputs, &targets, mode).unwrap();
    out.to_dtype(DType::F32)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Max |ours - reference| over every input of a fixture, for both forward modes.
fn parity_margin(model: &Qwen3, reference: &Reference) -> f32 {
    let mut margin = 0f32;
    for input in &reference.inputs {
        for mode in [ForwardMode::Train, ForwardMode::Inference] {
            let ours = logprobs(model, &input.ids, mode);
            margin = margin.max(max_abs_diff(&ours, &input.logprobs));
        }
    }
    margin
}

#[test]
fn logprobs_match_transformers_on_every_tiny_config() {
    for name in PARITY_CONFIGS {
        let dir = fixture(name);
        let model = Qwen3::load(&dir, &options(DType::F32, false)).unwrap();
        let reference = reference(&dir);
        let kinds: Vec<&str> = reference.inputs.iter().map(|i| i.kind.as_str()).collect();
        assert!(
            kinds.contains(&"text") && kinds.contains(&"chat"),
            "{kinds:?}"
        );
        let margin = parity_margin(&model, &reference);
        eprintln!("parity {name}: max |logprob diff| = {margin:.3e}");
        assert!(margin <= 1e-4, "{name}: max diff {margin}");
    }
}

#[test]
fn fixtures_cover_gqa_ratios_tying_head_dims_and_sharding() {
    let configs: Vec<Qwen3Config> = PARITY_CONFIGS
        .iter()
        .map(|name| Qwen3Config::from_file(&fixture(name).join("config.json")).unwrap())
        .collect();
    let ratios: std::collections::BTreeSet<usize> = configs
        .iter()
        .map(|c| c.num_attention_heads / c.num_key_value_heads)
        .collect();
    assert!(ratios.len() >= 3, "{ratios:?}");
    assert!(configs.iter().any(|c| c.tie_word_embeddings));
    assert!(configs.iter().any(|c| !c.tie_word_embeddings));
    assert!(configs
        .iter()
        .any(|c| c.head_dim != c.hidden_size / c.num_attention_heads));
    assert!(fixture("mha_untied_sharded")
        .join("model.safetensors.index.json")
        .is_file());
}

#[test]
fn bf16_weights_load_in_bf16_and_stay_close() {
    let dir = fixture("gqa4_tied_hd8_bf16");
    let model = Qwen3::load(&dir, &options(DType::BF16, false)).unwrap();
    assert_eq!(model.dtype(), DType::BF16);
    let reference = reference(&dir);
    let mut worst = 0f32;
    for input in &reference.inputs {
        let ours = logprobs(&model, &input.ids, ForwardMode::Inference);
        worst = worst.max(max_abs_diff(&ours, &input.logprobs));
    }
    eprintln!("bf16 compute vs f32 reference: max |diff| = {worst:.3e}");
    // bf16 keeps 8 mantissa bits: a few 1e-2 on log-probs of magnitude ~8 is the expected error.
    assert!(worst < 0.25, "bf16 max diff {worst}");
}

#[test]
fn kv_cache_decoding_matches_the_full_forward_pass() {
    for name in ["gqa4_untied_hd32", "gqa2_tied"] {
        let model = Qwen3::load(&fixture(name), &options(DType::F32, false)).unwrap();
        let ids: Vec<u32> = (0..19u32).map(|i| (i * 37 + 5) % 512).collect();
        let full = model
            .forward(&Tensor::from_slice(&ids, (1, ids.len()), &Device::Cpu).unwrap())
            .unwrap();
        let mut cache = KvCache::new();
        let mut pieces = Vec::new();
        // A prompt chunk, single tokens, then another chunk.
        for range in [0..7, 7..8, 8..9, 9..10, 10..15, 15..16, 16..19] {
            let chunk = &ids[range.clone()];
            let step = Tensor::from_slice(chunk, (1, chunk.len()), &Device::Cpu).unwrap();
            pieces.push(model.forward_with_cache(&step, &mut cache).unwrap());
            assert_eq!(cache.len(), range.end);
        }
        let incremental = Tensor::cat(&pieces, 1).unwrap();
        let diff: f32 = (full - incremental)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        eprintln!("kv cache {name}: max |logit diff| = {diff:.3e}");
        assert!(diff <= 1e-4, "{name}: {diff}");
    }
}

#[test]
fn batched_forward_equals_per_sequence_forward() {
    let model = Qwen3::load(&fixture("gqa2_tied"), &options(DType::F32, false)).unwrap();
    let a: Vec<u32> = (0..9).map(|i| (i * 11 + 3) % 512).collect();
    let b: Vec<u32> = (0..9).map(|i| (i * 29 + 100) % 512).collect();
    let both = [a.clone(), b.clone()].concat();
    let batched = model
        .forward(&Tensor::from_slice(&both, (2, 9), &Device::Cpu).unwrap())
        .unwrap();
    for (row, ids) in [a, b].iter().enumerate() {
        let single = model
            .forward(&Tensor::from_slice(ids, (1, 9), &Device::Cpu).unwrap())
            .unwrap();
        let diff: f32 = (batched.narrow(0, row, 1).unwrap() - single)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(diff <= 1e-5, "row {row}: {diff}");
    }
}

fn loss_of(model: &Qwen3, ids: &[u32]) -> Tensor {
    let n = ids.len();
    let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &Device::Cpu).unwrap();
    let targets = Tensor::from_slice(&ids[1..], (1, n - 1), &Device::Cpu).unwrap();
    model
        .token_logprobs(&inputs, &targets)
        .unwrap()
        .mean_all()
        .unwrap()
        .neg()
        .unwrap()
}

fn assert_finite_nonzero_grads(vars: &[(String, Var)], grads: &candle_core::backprop::GradStore) {
    for (name, var) in vars {
        let grad = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no gradient"));
        let values: Vec<f32> = grad.flatten_all().unwrap().to_vec1().unwrap();
        assert!(
            values.iter().all(|v| v.is_finite()),
            "{name}: non-finite gradient"
        );
        assert!(
            values.iter().any(|v| *v != 0.0),
            "{name}: all-zero gradient"
        );
    }
}

#[test]
fn every_parameter_gets_a_finite_nonzero_gradient() {
    let ids: Vec<u32> = (0..12u32).map(|i| (i * 53 + 7) % 512).collect();
    for name in ["gqa2_tied", "gqa4_untied_hd32"] {
        let model = Qwen3::load(&fixture(name), &options(DType::F32, true)).unwrap();
        let vars = model.trainable_vars();
        let expected = model.config().weight_shapes().len();
        assert_eq!(vars.len(), expected, "{name}: every weight is a variable");
        let grads = loss_of(&model, &ids).backward().unwrap();
        assert_finite_nonzero_grads(&vars, &grads);
    }
}

fn peft_config() -> LoraConfig {
    LoraConfig::load_peft(&fixture("lora_peft")).unwrap()
}

#[test]
fn peft_adapter_logprobs_match_peft() {
    let mut model = Qwen3::load(&fixture("gqa2_tied"), &options(DType::F32, false)).unwrap();
    let config = model.load_lora_peft(&fixture("lora_peft")).unwrap();
    assert_eq!(config.rank, 4);
    assert_eq!(model.lora_vars().len(), 2 * 7 * 2);
    let reference = reference(&fixture("lora_peft"));
    let margin = parity_margin(&model, &reference);
    eprintln!("parity lora_peft: max |logprob diff| = {margin:.3e}");
    assert!(margin <= 1e-4, "lora max diff {margin}");
    // The adapter really changes the model: the base alone is far from PEFT's numbers.
    let base = Qwen3::load(&fixture("gqa2_tied"), &options(DType::F32, false)).unwrap();
    assert!(parity_margin(&base, &reference) > 1e-2);
}

#[test]
fn lora_trains_while_the_base_stays_frozen() {
    let mut model = Qwen3::load(&fixture("gqa2_tied"), &options(DType::F32, false)).unwrap();
    model.load_lora_peft(&fixture("lora_peft")).unwrap();
    assert!(model.base_vars().is_empty());
    let ids: Vec<u32> = (0..10u32).map(|i| (i * 41 + 2) % 512).collect();
    let grads = loss_of(&model, &ids).backward().unwrap();
    let lora_vars = model.lora_vars();
    assert_finite_nonzero_grads(&lora_vars, &grads);
    for (name, weight) in model.named_weights() {
        assert!(
            grads.get(&weight).is_none(),
            "{name} is frozen but got a gradient"
        );
    }
}

#[test]
fn fresh_lora_leaves_outputs_unchanged_and_round_trips_through_peft_layout() {
    let base = Qwen3::load(&fixture("gqa4_untied_hd32"), &options(DType::F32, false)).unwrap();
    let ids: Vec<u32> = (0..10u32).map(|i| (i * 17 + 1) % 512).collect();
    let before = logprobs(&base, &ids, ForwardMode::Train);

    let mut model = base.clone();
    let config = LoraConfig {
        rank: 2,
        alpha: 5.0,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    assert_eq!(model.add_lora(&config, 3).unwrap(), 3 * 2);
    assert!(max_abs_diff(&before, &logprobs(&model, &ids, ForwardMode::Train)) <= 1e-6);

    // Move B off zero as training would, then save in PEFT's layout and load it back.
    for (name, var) in model.lora_vars() {
        if name.contains("lora_B") {
            let noise = Tensor::randn(0f32, 0.5, var.shape(), &Device::Cpu).unwrap();
            var.set(&noise).unwrap();
        }
    }
    let changed = logprobs(&model, &ids, ForwardMode::Train);
    assert!(max_abs_diff(&before, &changed) > 1e-3);

    let dir = tempfile::tempdir().unwrap();
    model.save_lora_peft(dir.path(), &config, "tiny").unwrap();
    let names = safetensors_names(&dir.path().join("adapter_model.safetensors"));
    assert!(
        names.contains(&"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".into())
    );
    assert!(names.contains(&"base_model.model.model.layers.1.mlp.down_proj.lora_B.weight".into()));
    let mut reloaded = base.clone();
    assert_eq!(reloaded.load_lora_peft(dir.path()).unwrap(), config);
    let after = logprobs(&reloaded, &ids, ForwardMode::Train);
    assert!(max_abs_diff(&changed, &after) <= 1e-6);
    assert_eq!(peft_config().alpha, 8.0);
}

fn safetensors_names(path: &Path) -> Vec<String> {
    candle_core::safetensors::load(path, &Device::Cpu)
        .unwrap()
        .into_keys()
        .collect()
}

#[test]
fn saved_model_folder_loads_back_identically() {
    let config = Qwen3Config::from_file(&fixture("gqa4_untied_hd32").join("config.json")).unwrap();
    let model = Qwen3::random(config, 9, 0.2, &options(DType::F32, false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let loaded = Qwen3::load(dir.path(), &options(DType::F32, false)).unwrap();
    assert_eq!(loaded.config(), model.config());
    let ids: Vec<u32> = (0..8u32).map(|i| i * 60).collect();
    let a = logprobs(&model, &ids, ForwardMode::Inference);
    let b = logprobs(&loaded, &ids, ForwardMode::Inference);
    assert_eq!(a, b);
}

/// A frozen model on the CPU keeps each matmul weight as a view of transposed storage (the
/// layout the GEMM is fast in); a trainable one keeps HF's. Both compute the same log-probs
/// and the same LoRA gradients, and the frozen one saves its weights in HF's layout, bit for
/// bit what it loaded.
#[test]
fn frozen_weights_are_stored_for_the_matmul_and_saved_in_hf_layout() {
    for name in ["gqa2_tied", "gqa4_untied_hd32"] {
        let frozen = Qwen3::load(&fixture(name), &options(DType::F32, false)).unwrap();
        let trainable = Qwen3::load(&fixture(name), &options(DType::F32, true)).unwrap();
        let ids: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % 512).collect();
        for mode in [ForwardMode::Train, ForwardMode::Inference] {
            let diff = max_abs_diff(
                &logprobs(&frozen, &ids, mode),
                &logprobs(&trainable, &ids, mode),
            );
            assert!(diff <= 1e-5, "{name} {mode:?}: {diff}");
        }
        let stored = |model: &Qwen3, weight: &str| {
            model
                .named_weights()
                .into_iter()
                .find(|(n, _)| n == weight)
                .map(|(_, t)| t.is_contiguous())
                .unwrap()
        };
        // LoRA's gradients through the frozen layout equal those through HF's (candle's
        // autograd on both; only the base weights' storage differs).
        let config = LoraConfig {
            rank: 2,
            alpha: 4.0,
            target_modules: vec!["q_proj".into(), "down_proj".into()],
        };
        let (mut frozen_lora, mut hf_lora) = (frozen.clone(), trainable.clone());
        frozen_lora.add_lora(&config, 7).unwrap();
        hf_lora.add_lora(&config, 7).unwrap();
        for (factor, var) in frozen_lora.lora_vars().iter().chain(&hf_lora.lora_vars()) {
            if factor.contains("lora_B") {
                // B starts at zero, which would leave A without a gradient.
                let shape = var.shape().clone();
                var.set(&Tensor::ones(shape, DType::F32, &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        let grads_frozen = loss_of(&frozen_lora, &ids).backward().unwrap();
        let grads_hf = loss_of(&hf_lora, &ids).backward().unwrap();
        for ((lora, a), (_, b)) in frozen_lora.lora_vars().iter().zip(&hf_lora.lora_vars()) {
            let grad = |grads: &candle_core::backprop::GradStore, var: &Var| -> Vec<f32> {
                let grad = grads.get(var.as_tensor()).unwrap();
                grad.flatten_all().unwrap().to_vec1().unwrap()
            };
            let (ga, gb) = (grad(&grads_frozen, a), grad(&grads_hf, b));
            let scale = gb.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
            let diff = max_abs_diff(&ga, &gb);
            assert!(
                diff <= 1e-4 * scale,
                "{name} {lora}: gradients differ by {diff}"
            );
        }
        let q = "model.layers.0.self_attn.q_proj.weight";
        assert!(!stored(&frozen, q) && stored(&trainable, q), "{name}");
        let dir = tempfile::tempdir().unwrap();
        frozen.save(dir.path()).unwrap();
        let saved =
            candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu)
                .unwrap();
        for (weight, original) in trainable.named_weights() {
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(saved[&weight].dims(), original.dims(), "{name} {weight}");
            assert_eq!(flat(&saved[&weight]), flat(&original), "{name} {weight}");
        }
    }
}

#[test]
fn wrong_shapes_and_missing_tensors_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("gqa2_tied");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config["intermediate_size"] = 100.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        src.join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let err = format!(
        "{:#}",
        Qwen3::load(dir.path(), &LoadOptions::default()).unwrap_err()
    );
    assert!(
        err.contains("gate_proj.weight") && err.contains("shape"),
        "{err}"
    );

    config["tie_word_embeddings"] = false.into();
    config["intermediate_size"] = 128.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let err = format!(
        "{:#}",
        Qwen3::load(dir.path(), &LoadOptions::default()).unwrap_err()
    );
    assert!(err.contains("lm_head.weight"), "{err}");
}

#[test]
fn real_0_6b_config_parses() {
    let Some(dir) = agentrl_chat::qwen3_assets_for_tests() else {
        return;
    };
    let config = Qwen3Config::from_file(&dir.join("config.json")).unwrap();
    assert_eq!(config.head_dim, 128);
    assert_eq!(config.num_attention_heads / config.num_key_value_heads, 2);
    assert!(config.tie_word_embeddings);
    assert_eq!(config.rope_theta, 1_000_000.0);
}

/// The adapter that `scripts/check_peft_loads_agentrl_adapter.py` loads with PEFT: rank 3 on
/// q/k/v/o and up_proj of `gqa2_tied`, with deterministic non-zero B.
fn agentrl_adapter() -> (Qwen3, LoraConfig) {
    let mut model = Qwen3::load(&fixture("gqa2_tied"), &options(DType::F32, false)).unwrap();
    let config = LoraConfig {
        rank: 3,
        alpha: 12.0,
        target_modules: vec![
            "q_proj".into(),
            "k_proj".into(),
            "v_proj".into(),
            "o_proj".into(),
            "up_proj".into(),
        ],
    };
    model.add_lora(&config, 11).unwrap();
    for (index, (name, var)) in model.lora_vars().into_iter().enumerate() {
        if name.contains("lora_B") {
            let count = var.elem_count();
            let values: Vec<f32> = (0..count)
                .map(|i| (((i * 7 + index * 13) % 23) as f32 - 11.0) / 20.0)
                .collect();
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    (model, config)
}

/// Regenerates `fixtures/qwen3/lora_agentrl` (run by hand, then check it with PEFT:
/// `python crates/agentrl-model/scripts/check_peft_loads_agentrl_adapter.py`).
#[test]
#[ignore = "writes a fixture; run by hand"]
fn export_agentrl_adapter_fixture() {
    let (model, config) = agentrl_adapter();
    let dir = fixture("lora_agentrl");
    model.save_lora_peft(&dir, &config, "../gqa2_tied").unwrap();
    let mut inputs = Vec::new();
    for input in reference(&fixture("gqa2_tied")).inputs {
        let lp = logprobs(&model, &input.ids, ForwardMode::Train);
        inputs.push(serde_json::json!({"kind": input.kind, "ids": input.ids, "logprobs": lp}));
    }
    let generated_by = serde_json::json!({
        "script": "crates/agentrl-model/tests/model/qwen3.rs (export_agentrl_adapter_fixture)",
        "agentrl-model": env!("CARGO_PKG_VERSION"),
    });
    let text =
        serde_json::json!({"generated_by": generated_by, "base": "gqa2_tied", "inputs": inputs})
            .to_string();
    std::fs::write(dir.join("reference.json"), text).unwrap();
}

/// The committed agentrl-saved adapter (checked loadable by PEFT, with PEFT's log-probs equal to
/// ours) is exactly what the saver produces today, so that check stays valid.
#[test]
fn saved_adapter_matches_the_peft_checked_fixture() {
    let committed = fixture("lora_agentrl");
    let (model, config) = agentrl_adapter();
    assert_eq!(LoraConfig::load_peft(&committed).unwrap(), config);
    assert_adapter_file_holds(&model, &committed);
    let margin = parity_margin(&model, &reference(&committed));
    assert!(margin <= 1e-4, "{margin}");
}

/// The adapter file in `dir` holds exactly `model`'s LoRA factors, by PEFT name.
pub(crate) fn assert_adapter_file_holds(model: &Qwen3, dir: &Path) {
    let saved = candle_core::safetensors::load(dir.join("adapter_model.safetensors"), &Device::Cpu)
        .unwrap();
    let ours = model.lora_vars();
    assert_eq!(saved.len(), ours.len());
    for (name, var) in ours {
        let file = saved.get(&name).unwrap_or_else(|| panic!("{name} missing"));
        let diff = (file - var.as_tensor())
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        assert_eq!(diff, 0.0, "{name}");
    }
}
