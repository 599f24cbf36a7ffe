//! `agentrl plan`: the memory plan of a config, printed without running anything.

use std::process::Command;

fn plan(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .arg("plan")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "agentrl plan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn plan_prints_the_default_run_and_a_qwen3_8b_config_with_and_without_lora() -> anyhow::Result<()> {
    let tiny = plan(&[])?;
    assert!(tiny.contains("TinyAgent") && tiny.contains("activations / micro-batch"));
    let eight_b = ["--config", "configs/qwen3-8b-grpo.toml", "--model-config"];
    let lora = plan(&[&eight_b[..], &["configs/models/qwen3-8b.json", "--json"]].concat())?;
    let lora: serde_json::Value = serde_json::from_str(&lora)?;
    let parameters = lora["model"]["parameters"].as_f64().unwrap_or(0.0);
    assert!((8.1e9..8.3e9).contains(&parameters), "{parameters}");
    let full = plan(
        &[
            &eight_b[..],
            &[
                "configs/models/qwen3-8b.json",
                "--json",
                "--set",
                "qwen3.lora_rank=0",
            ],
        ]
        .concat(),
    )?;
    let full: serde_json::Value = serde_json::from_str(&full)?;
    let optimizer = |v: &serde_json::Value| v["optimizer"].as_f64().unwrap_or(0.0);
    // AdamW's moments for 8B weights in f32: 64 GB; for the LoRA factors, under 1 GB.
    assert!(
        (6.4e10..6.7e10).contains(&optimizer(&full)),
        "{}",
        full["optimizer"]
    );
    assert!(optimizer(&lora) < 1e9);
    // Rollouts come from vLLM servers: their KV cache is not this process's memory.
    assert_eq!(lora["kv_cache"].as_f64(), Some(0.0));
    Ok(())
}
