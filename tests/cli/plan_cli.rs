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

/// `--target-step-s T --costs-from RUN`: the fewest gym servers and engines whose step fits T,
/// from a run's measured costs (here written by hand, so every figure is known): 64 episodes
/// of 100 tokens on 2 gym servers and 1 engine, 1 s of environments, 3 s of rollout, 0.64 s
/// of update per step.
#[test]
fn plan_sizes_the_fleet_from_a_runs_measured_costs() -> anyhow::Result<()> {
    let run = tempfile::tempdir()?;
    let line = serde_json::json!({
        "step": 1,
        "timing_s/env": 1.0,
        "timing_s/gen": 3.0,
        "timing_s/update_actor": 0.64,
        "perf/total_num_tokens": 6400.0,
        "env/episode_tokens/mean": 100.0,
    });
    std::fs::write(
        run.path().join("metrics.jsonl"),
        format!("{line}\n{line}\n"),
    )?;
    std::fs::write(
        run.path().join("config.toml"),
        "[gym]\nendpoints = [\"http://a:8100\", \"http://b:8100\"]\n[engine]\nendpoints = []\n",
    )?;
    let costs_from = run.path().to_str().unwrap();
    let fleet = |target: &str| -> anyhow::Result<serde_json::Value> {
        let out = plan(&[
            "--json",
            "--target-step-s",
            target,
            "--costs-from",
            costs_from,
        ])?;
        Ok(serde_json::from_str::<serde_json::Value>(&out)?["fleet"].clone())
    };
    // Gym work 64 × 1 s × 2 servers / 64 = 2 s, engine work 2 s, update 0.64 s: in 2.64 s,
    // 2 + 2 servers (1 + 1 needs 4.64 s; 1 gym server leaves no time for the engines).
    let plan_264 = fleet("2.64")?;
    assert_eq!(plan_264["gym_servers"], 2, "{plan_264}");
    assert_eq!(plan_264["engines"], 2, "{plan_264}");
    assert!((plan_264["expected_step_s"].as_f64().unwrap() - 2.64).abs() < 1e-9);
    // A looser target needs fewer; one that the update alone exceeds is refused with why.
    let plan_5 = fleet("5")?;
    assert_eq!(
        (plan_5["gym_servers"].as_u64(), plan_5["engines"].as_u64()),
        (Some(1), Some(1))
    );
    let text = plan(&["--target-step-s", "2.64", "--costs-from", costs_from])?;
    assert!(
        text.contains("gym servers") && text.contains("engines"),
        "{text}"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["plan", "--target-step-s", "0.5", "--costs-from", costs_from])
        .output()?;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("update alone takes 0.64 s"), "{stderr}");
    Ok(())
}
