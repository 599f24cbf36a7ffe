//! LoRA adapters: PEFT-style target matching, the PEFT config round trip, and a fresh
//! adapter's zero update.

use agentrl_model::lora::{init_rng, LoraConfig, LoraWeights, ADAPTER_CONFIG};
use candle_core::{DType, Device, Tensor};

#[test]
fn targets_match_module_suffixes_like_peft() {
    let config = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "mlp.up_proj".into()],
    };
    assert!(config.targets("model.layers.0.self_attn.q_proj"));
    assert!(config.targets("model.layers.1.mlp.up_proj"));
    assert!(!config.targets("model.layers.0.self_attn.k_proj"));
    assert!(!config.targets("model.layers.0.self_attn.xq_proj"));
    assert_eq!(config.scale(), 2.0);
}

#[test]
fn config_round_trips_and_rejects_unsupported_options() {
    let dir = tempfile::tempdir().unwrap();
    let config = LoraConfig {
        rank: 3,
        alpha: 6.0,
        target_modules: vec!["v_proj".into()],
    };
    config.save_peft(dir.path(), "base").unwrap();
    assert_eq!(LoraConfig::load_peft(dir.path()).unwrap(), config);

    let path = dir.path().join(ADAPTER_CONFIG);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["use_dora"] = true.into();
    std::fs::write(&path, json.to_string()).unwrap();
    let err = LoraConfig::load_peft(dir.path()).unwrap_err().to_string();
    assert!(err.contains("use_dora"), "{err}");
}

#[test]
fn fresh_adapter_is_a_zero_update() {
    let config = LoraConfig {
        rank: 2,
        alpha: 2.0,
        target_modules: vec![],
    };
    let mut rng = init_rng(0);
    let lora = LoraWeights::init(4, 3, &config, &mut rng, DType::F32, &Device::Cpu).unwrap();
    let x = Tensor::ones((5, 4), DType::F32, &Device::Cpu).unwrap();
    let delta = lora.delta(&x).unwrap();
    assert_eq!(delta.dims(), [5, 3]);
    let total: f32 = delta.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
    assert_eq!(total, 0.0);
    let a_total: f32 = lora
        .a
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!(a_total > 0.0);
}
