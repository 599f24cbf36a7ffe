//! SmolLM2-135M-Instruct from its GGUF file (a real pretrained Llama) against transformers,
//! which loads the same file and dequantizes it to f32 (fixtures from
//! `scripts/make_smollm2_fixtures.py`, versions in `generated_by`): the config, the dequantized
//! and un-permuted weights, log-probs on chat prompts with tool calls, greedy decoding, and
//! LoRA gradients against finite differences. The file comes from `smollm2_gguf_for_tests()`
//! (`scripts/fetch_smollm2.sh`; CI fetches it, elsewhere these tests skip).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agentrl_model::gguf::{hf_name, unpermute_rows};
use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{Architecture, ForwardMode, KvCache, Qwen3, Qwen3Config};
use candle_core::{DType, Device, IndexOp, Tensor};
use serde_json::Value;

use crate::qwen3::{assert_adapter_file_holds, logprobs, options};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2")
}

fn reference() -> &'static Value {
    static REFERENCE: OnceLock<Value> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let text = std::fs::read_to_string(fixture_dir().join("reference.json"))
            .expect("reference.json is committed");
        serde_json::from_str(&text).expect("reference.json is JSON")
    })
}

/// The real model, frozen, in f32, loaded once per test binary.
fn model() -> Option<&'static Qwen3> {
    static MODEL: OnceLock<Option<Qwen3>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = agentrl_chat::smollm2_gguf_for_tests()?;
            Some(Qwen3::load(&path, &options(DType::F32, false)).expect("the GGUF file loads"))
        })
        .as_ref()
}

fn u32s(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_u64().expect("integer") as u32)
        .collect()
}

fn f32s(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_f64().expect("number") as f32)
        .collect()
}

#[test]
fn the_config_read_from_gguf_metadata_is_the_one_transformers_sees() {
    let Some(model) = model() else { return };
    let hf = &reference()["hf_config"];
    let config = model.config();
    assert_eq!(config.architecture, Architecture::Llama);
    let field = |key: &str| {
        hf[key]
            .as_u64()
            .unwrap_or_else(|| panic!("hf_config.{key}")) as usize
    };
    assert_eq!(config.hidden_size, field("hidden_size"));
    assert_eq!(config.intermediate_size, field("intermediate_size"));
    assert_eq!(config.num_hidden_layers, field("num_hidden_layers"));
    assert_eq!(config.num_attention_heads, field("num_attention_heads"));
    assert_eq!(config.num_key_value_heads, field("num_key_value_heads"));
    assert_eq!(config.vocab_size, field("vocab_size"));
    assert_eq!(
        config.tie_word_embeddings,
        hf["tie_word_embeddings"].as_bool().unwrap()
    );
    let eps = hf["rms_norm_eps"].as_f64().unwrap();
    assert!((config.rms_norm_eps - eps).abs() < 1e-12 * eps.max(1.0));
    let theta = hf["rope_theta"]
        .as_f64()
        .or_else(|| hf["rope_parameters"]["rope_theta"].as_f64())
        .expect("rope theta");
    assert_eq!(config.rope_theta, theta);
    assert_eq!(
        (
            config.hidden_size,
            config.num_hidden_layers,
            config.head_dim
        ),
        (576, 30, 64)
    );
}

/// Rows of the dequantized weights equal transformers' to the bit: the Q4_1/Q8_0 blocks are
/// decoded the same way, and llama.cpp's q/k row permutation is undone.
#[test]
fn dequantized_and_unpermuted_weights_equal_transformers() {
    let Some(model) = model() else { return };
    let check = &reference()["weights_check"];
    let weights: std::collections::HashMap<String, Tensor> =
        model.named_weights().into_iter().collect();
    let mut compared = 0;
    for (name, rows) in check.as_object().expect("weights_check object") {
        if !name.starts_with("model.") {
            continue; // the GGUF file's raw rows and notes
        }
        let tensor = weights
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let shape: Vec<usize> = u32s(&rows["shape"])
            .into_iter()
            .map(|d| d as usize)
            .collect();
        assert_eq!(tensor.dims(), shape.as_slice(), "{name}");
        for (key, values) in rows.as_object().unwrap() {
            let Some(row) = key.strip_prefix("row") else {
                continue;
            };
            let row: usize = row.parse().expect("rowN");
            let ours: Vec<f32> = tensor.i(row).unwrap().to_vec1().unwrap();
            let theirs = f32s(values);
            assert_eq!(&ours[..theirs.len()], theirs.as_slice(), "{name} {key}");
            compared += 1;
        }
    }
    // q and k rows 0 and 1 (1 moves under the permutation), an embedding row, an MLP row.
    assert!(compared >= 6, "{compared} rows compared");
}

#[test]
fn gguf_tensor_names_map_to_hf_names() {
    assert_eq!(
        hf_name("blk.7.attn_q.weight").as_deref(),
        Some("model.layers.7.self_attn.q_proj.weight")
    );
    assert_eq!(
        hf_name("blk.0.ffn_down.weight").as_deref(),
        Some("model.layers.0.mlp.down_proj.weight")
    );
    assert_eq!(
        hf_name("blk.2.attn_k.bias").as_deref(),
        Some("model.layers.2.self_attn.k_proj.bias")
    );
    assert_eq!(
        hf_name("token_embd.weight").as_deref(),
        Some("model.embed_tokens.weight")
    );
    assert_eq!(hf_name("rope_freqs.weight"), None);
}

/// The permutation llama.cpp's converter applies, written out, is undone exactly.
#[test]
fn unpermuting_inverts_llama_cpps_permutation() {
    let (heads, head_dim, width) = (3, 8, 5);
    let rows = heads * head_dim;
    let hf: Vec<f32> = (0..rows * width).map(|i| i as f32).collect();
    // convert_hf_to_gguf.py: w.reshape(heads, 2, d/2, width).swapaxes(1, 2).reshape(rows, width)
    let mut permuted = vec![0f32; rows * width];
    for h in 0..heads {
        for half in 0..2 {
            for i in 0..head_dim / 2 {
                let from = h * head_dim + half * head_dim / 2 + i;
                let to = h * head_dim + i * 2 + half;
                permuted[to * width..(to + 1) * width]
                    .copy_from_slice(&hf[from * width..(from + 1) * width]);
            }
        }
    }
    let permuted = Tensor::from_vec(permuted, (rows, width), &Device::Cpu).unwrap();
    let back = unpermute_rows(&permuted, heads).unwrap();
    assert_eq!(back.flatten_all().unwrap().to_vec1::<f32>().unwrap(), hf);
}

/// Log-probs within 1e-4 of transformers f32 on every recorded chat prompt (tool calls,
/// tool responses, code), in both forward modes.
#[test]
fn logprobs_match_transformers_on_chat_prompts_with_tool_calls() {
    let Some(model) = model() else { return };
    let prompts = reference()["prompts"].as_array().expect("prompts");
    assert!(prompts.len() >= 20, "{} prompts", prompts.len());
    let with_calls = prompts
        .iter()
        .filter(|p| {
            p["text"]
                .as_str()
                .unwrap_or_default()
                .contains("<tool_call>")
        })
        .count();
    assert!(with_calls >= 10, "{with_calls} prompts with tool calls");
    let mut worst = 0f32;
    for prompt in prompts {
        let ids = u32s(&prompt["ids"]);
        let theirs = f32s(&prompt["logprobs"]);
        for mode in [ForwardMode::Inference, ForwardMode::Train] {
            let ours = logprobs(model, &ids, mode);
            assert_eq!(ours.len(), theirs.len());
            let gap = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            worst = worst.max(gap);
            assert!(gap <= 1e-4, "{}: {mode:?} gap {gap:.3e}", prompt["name"]);
        }
    }
    eprintln!("smollm2 parity: max |logprob diff| = {worst:.3e}");
}

/// KV-cached greedy decoding continues each recorded prompt as transformers' greedy search.
#[test]
fn greedy_decoding_with_the_cache_equals_transformers() {
    let Some(model) = model() else { return };
    let cases = reference()["greedy"].as_array().expect("greedy");
    assert!(!cases.is_empty());
    let prompts = reference()["prompts"].as_array().expect("prompts");
    for case in cases {
        let prompt = prompts
            .iter()
            .find(|p| p["name"] == case["name"])
            .map(|p| u32s(&p["ids"]))
            .expect("the greedy case names a prompt");
        let expected = u32s(&case["new_ids"]);
        let mut cache = KvCache::new();
        let input = Tensor::from_slice(&prompt, (1, prompt.len()), &Device::Cpu).unwrap();
        let mut logits = model.forward_with_cache(&input, &mut cache).unwrap();
        let mut ours = Vec::new();
        for _ in 0..expected.len() {
            let last = logits.i((0, logits.dim(1).unwrap() - 1)).unwrap();
            let next = last.argmax(0).unwrap().to_scalar::<u32>().unwrap();
            ours.push(next);
            let input = Tensor::from_slice(&[next], (1, 1), &Device::Cpu).unwrap();
            logits = model.forward_with_cache(&input, &mut cache).unwrap();
        }
        assert_eq!(ours, expected, "{}", case["name"]);
    }
}

/// `-Σ log p(ids[t+1] | ids[..=t])` in f64 end to end (logits, log-softmax, gather), so that
/// finite differences resolve the gradient.
fn f64_loss(model: &Qwen3, ids: &[u32]) -> Tensor {
    let n = ids.len();
    let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &Device::Cpu).unwrap();
    let targets = Tensor::from_slice(&ids[1..], (n - 1, 1), &Device::Cpu).unwrap();
    let logits = model
        .forward_mode(&inputs, ForwardMode::Train)
        .unwrap()
        .squeeze(0)
        .unwrap();
    assert_eq!(logits.dtype(), DType::F64);
    candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1)
        .unwrap()
        .gather(&targets, 1)
        .unwrap()
        .sum_all()
        .unwrap()
        .neg()
        .unwrap()
}

/// Gives every LoRA B small deterministic values (at B = 0, A's gradient vanishes), then checks
/// autograd against central finite differences (step 1e-5, the model in f64) on four entries
/// of each A and B whose name contains one of `layers`. Returns how many entries it checked.
fn check_lora_gradients(model: &Qwen3, ids: &[u32], layers: &[&str]) -> usize {
    for (index, (name, var)) in model.lora_vars().into_iter().enumerate() {
        if name.contains("lora_B") {
            let values: Vec<f64> = (0..var.elem_count())
                .map(|i| (((i * 7 + index * 5) % 13) as f64 - 6.0) / 400.0)
                .collect();
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    let grads = f64_loss(model, ids).backward().unwrap();
    let eps = 1e-5;
    let mut checked = 0;
    for (name, var) in model.lora_vars() {
        if !layers.iter().any(|layer| name.contains(layer)) {
            continue;
        }
        let grad: Vec<f64> = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no gradient"))
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let original: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        let set = |values: Vec<f64>| {
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
                .unwrap()
        };
        for entry in [0, 1, original.len() / 2, original.len() - 1] {
            let at = |delta: f64| -> f64 {
                let mut values = original.clone();
                values[entry] += delta;
                set(values);
                f64_loss(model, ids).to_scalar::<f64>().unwrap()
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            set(original.clone());
            let analytic = grad[entry];
            assert!(
                (analytic - numeric).abs() <= 1e-6 * analytic.abs().max(1e-2),
                "{name}[{entry}]: autograd {analytic:.9e}, finite differences {numeric:.9e}"
            );
            checked += 1;
        }
    }
    checked
}

/// LoRA's gradients on the real model equal central finite differences of the loss, computed
/// in f64 through the whole 30-layer network, for entries of one layer's A and B factors.
#[test]
fn lora_gradients_equal_finite_differences_on_one_layer() {
    let Some(path) = agentrl_chat::smollm2_gguf_for_tests() else {
        return;
    };
    let mut model = Qwen3::load(&path, &options(DType::F64, false)).unwrap();
    let config = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "v_proj".into()],
    };
    model.add_lora(&config, 3).unwrap();
    let ids: Vec<u32> = u32s(&reference()["prompts"][0]["ids"])
        .into_iter()
        .take(16)
        .collect();
    let checked = check_lora_gradients(&model, &ids, &["model.layers.5.self_attn.q_proj."]);
    assert_eq!(checked, 8, "A and B of layer 5's q_proj");
}

/// The adapter `scripts/check_peft_loads_smollm2_adapter.py` loads with PEFT over the same
/// GGUF base: rank 4 on q/v/down projections, deterministic non-zero B.
fn agentrl_adapter(base: &Qwen3) -> (Qwen3, LoraConfig) {
    let mut model = base.clone();
    let config = LoraConfig {
        rank: 4,
        alpha: 8.0,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    model.add_lora(&config, 17).unwrap();
    for (index, (name, var)) in model.lora_vars().into_iter().enumerate() {
        if name.contains("lora_B") {
            let values: Vec<f32> = (0..var.elem_count())
                .map(|i| (((i * 5 + index * 3) % 17) as f32 - 8.0) / 200.0)
                .collect();
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    (model, config)
}

fn adapter_dir() -> PathBuf {
    fixture_dir().join("lora_agentrl")
}

/// Regenerates `fixtures/smollm2/lora_agentrl` (run by hand, then check it with PEFT:
/// `python crates/agentrl-model/scripts/check_peft_loads_smollm2_adapter.py`).
#[test]
#[ignore = "writes a fixture; run by hand"]
fn export_smollm2_adapter_fixture() {
    let Some(base) = model() else { return };
    let (model, config) = agentrl_adapter(base);
    let dir = adapter_dir();
    model
        .save_lora_peft(&dir, &config, "SmolLM2-135M-Instruct.Q4_1.gguf")
        .unwrap();
    let prompts: Vec<Value> = reference()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|prompt| {
            let ids: Vec<u32> = u32s(&prompt["ids"]).into_iter().take(64).collect();
            let lp = logprobs(&model, &ids, ForwardMode::Train);
            serde_json::json!({"ids": ids, "logprobs": lp})
        })
        .collect();
    let generated_by = serde_json::json!({
        "script": "crates/agentrl-model/tests/model/smollm2.rs (export_smollm2_adapter_fixture)",
        "agentrl-model": env!("CARGO_PKG_VERSION"),
    });
    let text = serde_json::json!({"generated_by": generated_by, "inputs": prompts}).to_string();
    std::fs::write(dir.join("reference.json"), text).unwrap();
}

/// The committed adapter (checked loadable by PEFT, PEFT's log-probs equal to ours) is what the
/// saver produces today, and its log-probs are still ours.
#[test]
fn saved_smollm2_adapter_matches_the_peft_checked_fixture() {
    let Some(base) = model() else { return };
    let committed = adapter_dir();
    let (model, config) = agentrl_adapter(base);
    assert_eq!(LoraConfig::load_peft(&committed).unwrap(), config);
    assert_adapter_file_holds(&model, &committed);
    let text = std::fs::read_to_string(committed.join("reference.json")).unwrap();
    let recorded: Value = serde_json::from_str(&text).unwrap();
    for input in recorded["inputs"].as_array().unwrap() {
        let ours = logprobs(&model, &u32s(&input["ids"]), ForwardMode::Train);
        let theirs = f32s(&input["logprobs"]);
        let gap = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(gap <= 1e-4, "{gap}");
    }
}

/// The same check on tiny random networks of each architecture the decoder reads (Llama,
/// Qwen2 with its q/k/v biases, Qwen3 with its q/k norms), on the first and the last layer:
/// every gradient path of the decoder, with no model file needed.
#[test]
fn lora_gradients_equal_finite_differences_on_every_architecture() {
    for architecture in [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
    ] {
        let config = Qwen3Config {
            architecture,
            rope_scaling: None,
            vocab_size: 64,
            hidden_size: 32,
            intermediate_size: 48,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 8,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            tie_word_embeddings: true,
            max_position_embeddings: 64,
        };
        let mut model = Qwen3::random(config, 1, 0.3, &options(DType::F64, false)).unwrap();
        let targets = ["q_proj", "v_proj", "down_proj"].map(String::from).to_vec();
        model
            .add_lora(
                &LoraConfig {
                    rank: 2,
                    alpha: 4.0,
                    target_modules: targets,
                },
                3,
            )
            .unwrap();
        let ids: Vec<u32> = (0..10u32).map(|i| (i * 7 + 3) % 64).collect();
        let checked = check_lora_gradients(&model, &ids, &["layers.0.", "layers.1."]);
        assert_eq!(checked, 2 * 3 * 2 * 4, "{architecture:?}");
    }
}
