//! Qwen3 in the loop (issue 11): a tiny random Qwen3 with the real tokenizer and chat
//! template, made by the committed `scripts/make_tiny_qwen3.py`, trained through the same
//! trainer as TinyAgent (`configs/qwen3-tiny-grpo.toml`), and the engine preflight against
//! known mismatches: a bf16 engine (numeric drift, reported), raw log-probs at T = 0.7
//! (semantic, refused) and an `agentrl serve` server that forces another temperature
//! (refused, over loopback).

use std::path::{Path, PathBuf};

use agentrl_engine::serve::{self, LocalServed, ServeOptions};
use agentrl_engine::LogprobKind;
use agentrl_model::qwen3::{LoadOptions, Qwen3};
use agentrl_train::config::{load_config, Config};
use agentrl_train::recipes::rl::Trainer;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tiny random Qwen3 folder (hidden 128, 2 layers, the real 151,936-token vocabulary).
fn tiny_qwen3(dir: &Path) -> anyhow::Result<PathBuf> {
    let assets = agentrl_chat::qwen3_assets_for_tests().expect("the shared Qwen3 assets");
    let out = dir.join("tiny-qwen3");
    let status = std::process::Command::new("python3")
        .arg(repo().join("scripts/make_tiny_qwen3.py"))
        .args([
            "--hidden-size",
            "64",
            "--scale",
            "0.15",
            "--embed-scale",
            "0.6",
        ])
        .arg("--assets")
        .arg(&assets)
        .arg("--out")
        .arg(&out)
        .status()?;
    anyhow::ensure!(status.success(), "make_tiny_qwen3.py failed");
    Ok(out)
}

fn qwen3_config(root: &Path, model: &Path, extra: &[String]) -> anyhow::Result<Config> {
    let mut set = vec![
        format!(
            "model.dir={}",
            serde_json::to_string(model.to_str().unwrap())?
        ),
        format!(
            "train.runs_root={}",
            serde_json::to_string(root.join("runs").to_str().unwrap())?
        ),
        "train.threads=2".to_string(),
    ];
    set.extend(extra.iter().cloned());
    load_config(Some(&repo().join("configs/qwen3-tiny-grpo.toml")), &set)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `configs/qwen3-tiny-grpo.toml` end to end: the supervised warm-up on demonstrations of
/// well-formed tool calls (rendered by the Qwen3 codec, `<tool_call>` JSON in the model's
/// own template) cuts the demonstrations' loss by over 90%, then GRPO steps run on real chat
/// episodes with finite losses. (Whether this tiny random model then emits valid calls is
/// seed-dependent at this budget; see the stop note.)
#[test]
fn warm_up_then_grpo_runs_on_qwen3_chat_episodes() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let model = tiny_qwen3(tmp.path())?;
    let keys = strings(&["train.steps=38", "train.format_warmup_steps=36"]);
    let (mut trainer, _) = Trainer::create(qwen3_config(tmp.path(), &model, &keys)?)?;
    let mut records = Vec::new();
    while trainer.state.step < trainer.config.train.steps {
        let record = trainer.step()?;
        trainer.log(&record)?;
        records.push(record);
    }
    let warmup: Vec<f64> = records[..36].iter().map(|r| r.update.loss).collect();
    let rl = &records[36..];
    eprintln!(
        "warm-up loss {:.3} -> {:.3}; GRPO steps: format-error rate {:?}, loss {:?}",
        warmup[0],
        warmup[35],
        rl.iter().map(|r| r.format_error_rate).collect::<Vec<_>>(),
        rl.iter().map(|r| r.update.loss).collect::<Vec<_>>()
    );
    let late = warmup[30..].iter().sum::<f64>() / 6.0;
    assert!(late < warmup[0] * 0.1, "the warm-up loss fell: {warmup:?}");
    for r in rl {
        assert!(r.update.loss.is_finite());
        assert_eq!(r.episodes, 8);
        assert!(
            r.episode_tokens > 500.0,
            "chat episodes carry the template's prompt"
        );
    }
    Ok(())
}

/// A bf16 engine against the f32 trainer is numeric drift: the preflight reports it and the
/// run starts. Raw log-probs at T = 0.7 are a semantic mismatch: the run is refused, with
/// the cause named, and leaves no run directory.
#[test]
fn the_preflight_reports_bf16_drift_and_refuses_raw_logprobs() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let model = tiny_qwen3(tmp.path())?;
    let (trainer, _) = Trainer::create(qwen3_config(
        tmp.path(),
        &model,
        &strings(&["engine.dtype=\"bf16\""]),
    )?)?;
    let report = trainer.preflight.as_ref().expect("the preflight ran");
    eprintln!("bf16 engine: {}\n{}", report.summary(), report.table());
    assert!(report.refusal.is_none());
    assert!(
        report.expected.mean_abs_gap > 1e-5 && report.expected.mean_abs_gap < 0.05,
        "bf16 drift is small but real: {}",
        report.expected.mean_abs_gap
    );
    drop(trainer);

    let runs = tmp.path().join("runs");
    let before = std::fs::read_dir(&runs)?.count();
    let refused = Trainer::create(qwen3_config(
        tmp.path(),
        &model,
        &strings(&["engine.logprobs=\"raw\"", "sampling.temperature=0.7"]),
    )?);
    let error = format!(
        "{:#}",
        refused.err().expect("raw log-probs at T = 0.7 are refused")
    );
    eprintln!("raw at T = 0.7: {error}");
    assert!(error.contains("raw"), "{error}");
    assert_eq!(
        std::fs::read_dir(&runs)?.count(),
        before,
        "a refused run leaves no directory"
    );
    Ok(())
}

/// The trainer against `agentrl serve` over loopback (vLLM's routes): with the server's
/// temperature forced to 0.5 while the config samples at 1.0, the preflight names the
/// temperature and refuses; an honest server passes, after the LoRA adapter sync.
#[test]
fn a_server_with_a_wrong_temperature_is_refused() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let model_dir = tiny_qwen3(tmp.path())?;
    let served = |force: Option<f64>| -> anyhow::Result<serve::Server> {
        let model = Qwen3::load(&model_dir, &LoadOptions::default())?;
        serve::start(
            LocalServed::new(model, "tiny", model_dir.to_str().unwrap()),
            ServeOptions {
                logprobs_mode: LogprobKind::TemperatureScaled,
                force_temperature: force,
                ..ServeOptions::default()
            },
            "127.0.0.1:0",
        )
    };
    let remote = |url: &str| {
        vec![
            "engine.kind=\"vllm\"".to_string(),
            format!("engine.endpoints=[{}]", serde_json::to_string(url).unwrap()),
            "engine.served_model=\"tiny\"".to_string(),
        ]
    };
    let honest = served(None)?;
    let (trainer, _) = Trainer::create(qwen3_config(
        tmp.path(),
        &model_dir,
        &remote(&honest.url()),
    )?)?;
    let report = trainer.preflight.as_ref().expect("the preflight ran");
    eprintln!("honest server: {}", report.summary());
    assert!(report.refusal.is_none());
    drop(trainer);

    let forced = served(Some(0.5))?;
    let refused = Trainer::create(qwen3_config(
        tmp.path(),
        &model_dir,
        &remote(&forced.url()),
    )?);
    let error = format!(
        "{:#}",
        refused.err().expect("a forced temperature is refused")
    );
    eprintln!("forced temperature: {error}");
    assert!(error.contains("T = 0.5"), "{error}");
    Ok(())
}

/// GRPO with rollouts from `agentrl serve` over loopback (vLLM's routes), asynchronous:
/// before each sampling the trainer writes its LoRA adapter in PEFT layout and loads it into
/// the server (`/v1/load_lora_adapter`) when the server's weights would be too stale; the
/// next step's rollouts are sampled by the server while the trainer updates. Every episode
/// records the version it was sampled with, and the staleness stays within the bound.
#[test]
fn async_grpo_on_a_server_syncs_lora_and_bounds_staleness() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let model_dir = tiny_qwen3(tmp.path())?;
    let model = Qwen3::load(&model_dir, &LoadOptions::default())?;
    let server = serve::start(
        LocalServed::new(model, "tiny", model_dir.to_str().unwrap()),
        ServeOptions::default(),
        "127.0.0.1:0",
    )?;
    let mut keys = strings(&[
        "engine.kind=\"vllm\"",
        "engine.served_model=\"tiny\"",
        "engine.async_rollouts=true",
        "engine.max_staleness=1",
        "train.format_warmup_steps=0",
        "train.steps=3",
        "rollout.tasks_per_step=1",
    ]);
    keys.push(format!(
        "engine.endpoints=[{}]",
        serde_json::to_string(&server.url())?
    ));
    let (mut trainer, _) = Trainer::create(qwen3_config(tmp.path(), &model_dir, &keys)?)?;
    let mut records = Vec::new();
    while trainer.state.step < trainer.config.train.steps {
        let record = trainer.step()?;
        trainer.log(&record)?;
        records.push(record);
    }
    let staleness: Vec<f64> = records.iter().map(|r| r.rollout.staleness_max).collect();
    eprintln!("server rollouts: staleness per step {staleness:?}");
    assert_eq!(staleness, [0.0, 1.0, 1.0]);
    for r in &records {
        assert!(r.update.loss.is_finite());
        assert!(r.episodes > 0);
    }
    // Only the adapter the server last loaded is kept, in PEFT layout.
    let weights: Vec<PathBuf> = std::fs::read_dir(trainer.run.root.join("weights"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    assert_eq!(weights.len(), 1, "{weights:?}");
    assert!(weights[0].join("adapter_config.json").is_file());
    assert!(weights[0].join("adapter_model.safetensors").is_file());
    Ok(())
}
