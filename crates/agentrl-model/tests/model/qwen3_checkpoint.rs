//! Gradient checkpointing of Qwen3's update forward ([`Qwen3::set_gradient_checkpointing`]):
//! the same logits, and after `loss.backward()` plus the pending part, the same gradient of
//! every LoRA factor as the whole graph gives; a trainable base is refused.

use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{Architecture, LoadOptions, Qwen3, Qwen3Config};
use agentrl_model::{ForUpdate, Policy};
use candle_core::{DType, Device, Tensor};

const VOCAB: usize = 61;

fn model(architecture: Architecture, trainable: bool) -> Qwen3 {
    let config = Qwen3Config {
        vocab_size: VOCAB,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 3,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings: architecture == Architecture::Llama,
        max_position_embeddings: 64,
        architecture,
        rope_scaling: None,
    };
    let options = LoadOptions {
        dtype: DType::F32,
        device: Device::Cpu,
        trainable,
    };
    let mut model = Qwen3::random(config, 3, 0.3, &options).unwrap();
    if !trainable {
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
                "down_proj",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        };
        model.add_lora(&lora, 5).unwrap();
        // Nonzero B factors, so every factor has a gradient.
        for (_, var) in model.lora_vars() {
            var.set(&(var.as_tensor() + 0.05).unwrap()).unwrap();
        }
    }
    model
}

/// A loss over the logits at `positions` that weighs every logit differently (each weight
/// times `scale`), its logits, and every LoRA factor's gradient (name, values).
fn loss_and_grads(model: &Qwen3, scale: f32) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    let ids: Vec<u32> = (0..2 * 19).map(|i| (i * 7 + 3) % VOCAB as u32).collect();
    let ids = Tensor::from_vec(ids, (2, 19), &Device::Cpu).unwrap();
    let positions = Tensor::new(&[1u32, 4, 9, 18, 20, 25, 37], &Device::Cpu).unwrap();
    let ForUpdate { output, pending } = model.forward_at_for_update(&ids, &positions).unwrap();
    let n = 7 * VOCAB;
    let weights: Vec<f32> = (0..n)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 29.0 * scale)
        .collect();
    let weights = Tensor::from_vec(weights, (7, VOCAB), &Device::Cpu).unwrap();
    let loss = (output.logits.tanh().unwrap() * weights)
        .unwrap()
        .sum_all()
        .unwrap();
    let mut grads = loss.backward().unwrap();
    ForUpdate::complete(pending, &mut grads).unwrap();
    let logits = output.logits.flatten_all().unwrap().to_vec1().unwrap();
    let grads = model
        .lora_vars()
        .into_iter()
        .map(|(name, var)| {
            let grad = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            (name, grad.flatten_all().unwrap().to_vec1().unwrap())
        })
        .collect();
    (logits, grads)
}

fn max_gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn checkpointed_gradients_equal_the_whole_graphs() {
    for architecture in [
        Architecture::Qwen3,
        Architecture::Llama,
        Architecture::Qwen2,
    ] {
        let mut model = model(architecture, false);
        let (logits, grads) = loss_and_grads(&model, 1.0);
        model.set_gradient_checkpointing(true).unwrap();
        let (logits_ckpt, grads_ckpt) = loss_and_grads(&model, 1.0);
        assert!(
            max_gap(&logits, &logits_ckpt) < 1e-6,
            "{architecture:?} logits"
        );
        assert_eq!(grads.len(), grads_ckpt.len());
        let mut largest = 0.0f32;
        for ((name, whole), (_, ckpt)) in grads.iter().zip(&grads_ckpt) {
            let scale = whole.iter().map(|g| g.abs()).fold(0.0, f32::max);
            largest = largest.max(scale);
            assert!(
                max_gap(whole, ckpt) <= 1e-5 * scale.max(1e-3),
                "{architecture:?} {name}: gap {} at scale {scale}",
                max_gap(whole, ckpt)
            );
        }
        assert!(largest > 1e-3, "{architecture:?}: the gradients are all ~0");
    }
}

/// A loss whose gradient at the logits is zero (a GRPO minibatch whose advantages are all 0)
/// skips the layers' recomputation: every LoRA factor still gets a gradient, all zero, as the
/// whole graph gives it; and a loss with a gradient right after it takes the full pass again.
#[test]
fn a_zero_gradient_at_the_top_gives_every_factor_a_zero_gradient() {
    for architecture in [Architecture::Qwen3, Architecture::Llama] {
        let mut model = model(architecture, false);
        let (_, whole) = loss_and_grads(&model, 0.0);
        model.set_gradient_checkpointing(true).unwrap();
        let (_, ckpt) = loss_and_grads(&model, 0.0);
        assert_eq!(whole.len(), ckpt.len());
        assert_eq!(whole.len(), model.lora_vars().len());
        for ((name, whole), (ckpt_name, ckpt)) in whole.iter().zip(&ckpt) {
            assert_eq!(name, ckpt_name);
            assert_eq!(whole.len(), ckpt.len(), "{architecture:?} {name}");
            assert!(
                whole.iter().chain(ckpt).all(|&g| g == 0.0),
                "{architecture:?} {name}: a nonzero gradient from a zero loss"
            );
        }
        let (_, after) = loss_and_grads(&model, 1.0);
        let largest = after
            .iter()
            .flat_map(|(_, g)| g.iter().map(|x| x.abs()))
            .fold(0.0, f32::max);
        assert!(
            largest > 1e-3,
            "{architecture:?}: the next loss got no gradient"
        );
    }
}

#[test]
fn checkpointing_refuses_a_trainable_base() {
    let mut model = model(Architecture::Qwen3, true);
    let err = model.set_gradient_checkpointing(true).unwrap_err();
    assert!(err.to_string().contains("frozen base"), "{err}");
}
