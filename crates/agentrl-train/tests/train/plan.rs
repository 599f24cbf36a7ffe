//! The memory plan of a step: LoRA's trainable fraction and how the plan grows with the
//! episode length.

use agentrl_train::config::ModelKind;
use agentrl_train::plan::{ModelShape, StepPlan};

#[test]
fn lora_trains_a_small_fraction_and_the_head_scores_only_loss_positions() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("config.json");
    // Qwen3-0.6B's architecture.
    std::fs::write(
        &path,
        r#"{"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
            "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
            "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
            "tie_word_embeddings": true, "max_position_embeddings": 40960}"#,
    )?;
    let mut config = agentrl_train::config::load_config(None, &[])?;
    config.model.kind = ModelKind::Qwen3;
    config.qwen3.lora_rank = 16;
    let lora = ModelShape::qwen3(&config, &path)?;
    assert!(
        (5.9e8..6.0e8).contains(&(lora.parameters as f64)),
        "{}",
        lora.parameters
    );
    assert!(lora.trainable * 50 < lora.parameters);
    config.qwen3.lora_rank = 0;
    let full = ModelShape::qwen3(&config, &path)?;
    assert_eq!(full.trainable, full.parameters);
    let (a, b) = (
        StepPlan::new(&config, lora),
        StepPlan::new(&config, full.clone()),
    );
    assert!(b.optimizer > 40.0 * a.optimizer);
    // Longer episodes with the same loss positions grow the layers' share only.
    let short = StepPlan::for_batch(&config, full.clone(), 8, 8, 512, 64);
    let long = StepPlan::for_batch(&config, full, 8, 8, 1024, 64);
    assert!(long.activations_per_microbatch < 2.0 * short.activations_per_microbatch);
    assert_eq!(long.kv_cache, 2.0 * short.kv_cache);
    Ok(())
}
