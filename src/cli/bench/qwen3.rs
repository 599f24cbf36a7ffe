//! `agentrl bench qwen3`: scoring throughput (tokens/s) of our candle Qwen3 against
//! transformers, on the real Qwen3-0.6B shape with random weights, measured in the same run.
//!
//! Flow: read the 0.6B `config.json` → build seeded random weights → save them as an HF folder
//! (float32 safetensors) in a temp dir → time our inference-mode scoring (forward + log-softmax
//! gather of next-token log-probs) on fixed token ids → drop our model → run
//! `scripts/bench_qwen3.py` (embedded in the binary, run with `$AGENTRL_PYTHON` or `python3`),
//! which loads the same folder with transformers in float32 and times the same computation on
//! the same ids → print both figures, their ratio, and the largest log-prob difference between
//! the two implementations as a correctness cross-check. Where the CPU has AMX, the scoring is
//! timed a second time after `Qwen3::pack_for_amx` (the opt-in bf16x3 path,
//! `fused/amx_matmul.rs`), and reported beside the f32 figure with its own ratio and log-prob
//! difference.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use agentrl_model::qwen3::{ForwardMode, LoadOptions, Qwen3, Qwen3Config};

use crate::cli::presets::Source;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// The baseline script, embedded so that an installed binary can run the bench.
const BASELINE_SCRIPT: &str = include_str!("../../../scripts/bench_qwen3.py");

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// `config.json` of the shape to bench, or a shape of configs/models/ by name
    /// (`qwen3-8b`; default: the shared Qwen3-0.6B config).
    pub config: Option<PathBuf>,
    pub batch: usize,
    pub seq_len: usize,
    /// Timed repeats after one warm-up; the best is reported.
    pub repeats: usize,
    /// torch threads (candle uses its own pool, sized by the machine or RAYON_NUM_THREADS).
    pub threads: usize,
}

/// The bench result, printed as text or JSON.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub shape: String,
    pub batch: usize,
    pub seq_len: usize,
    pub repeats: usize,
    pub candle_tokens_per_s: f64,
    pub candle_seconds: Vec<f64>,
    pub transformers_tokens_per_s: Option<f64>,
    pub transformers_seconds: Option<Vec<f64>>,
    /// candle / transformers throughput.
    pub ratio: Option<f64>,
    /// Largest |candle − transformers| over the first row's log-probs.
    pub max_abs_logprob_diff: Option<f64>,
    pub baseline_error: Option<String>,
    pub torch_threads: Option<u64>,
    /// The opt-in AMX path (`Qwen3::pack_for_amx`), where the CPU has one; `None` elsewhere.
    pub amx: Option<AmxReport>,
}

/// The scoring timed again on the AMX path.
#[derive(Debug, Serialize)]
pub struct AmxReport {
    pub candle_tokens_per_s: f64,
    pub candle_seconds: Vec<f64>,
    /// AMX candle / transformers throughput.
    pub ratio: Option<f64>,
    /// Largest |AMX candle − transformers| over the first row's log-probs.
    pub max_abs_logprob_diff: Option<f64>,
}

/// The seconds of `repeats` timed runs of `score` after one warm-up, and the warm-up's first
/// row.
fn time_scoring(
    score: impl Fn() -> Result<Tensor>,
    repeats: usize,
) -> Result<(Vec<f32>, Vec<f64>)> {
    let first = score()?.get(0)?.to_vec1::<f32>()?;
    let mut seconds = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        score()?;
        seconds.push(start.elapsed().as_secs_f64());
    }
    Ok((first, seconds))
}

/// Largest |theirs − ours| over a row of log-probs.
fn max_abs_diff(theirs: &[serde_json::Value], ours: &[f32]) -> f64 {
    theirs
        .iter()
        .zip(ours)
        .map(|(t, c)| (t.as_f64().unwrap_or(f64::NAN) - *c as f64).abs())
        .fold(0.0, f64::max)
}

/// Runs the bench and returns its report.
pub fn run(options: &BenchOptions) -> Result<BenchReport> {
    if options.batch == 0 || options.seq_len < 2 || options.repeats == 0 {
        bail!("bench qwen3 needs batch >= 1, seq-len >= 2 and repeats >= 1");
    }
    let (config_path, config) = match &options.config {
        Some(value) => match crate::cli::presets::resolve_model_config(value)? {
            Source::File(path) => {
                let config = Qwen3Config::from_file(&path)?;
                (path, config)
            }
            Source::Preset(name, text) => (PathBuf::from(name), Qwen3Config::from_json(text)?),
        },
        None => {
            let path = agentrl_chat::find_qwen3_assets()
                .context("no Qwen3 config: pass --config or set AGENTRL_QWEN3_DIR")?
                .join("config.json");
            let config = Qwen3Config::from_file(&path)?;
            (path, config)
        }
    };
    let shape = format!(
        "{} (hidden {}, {} layers, {}q/{}kv heads x {}, vocab {}), random weights",
        config_path.display(),
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        config.vocab_size
    );
    eprintln!("building random weights for {shape} …");
    let mut model = Qwen3::random(config.clone(), 0, 0.02, &LoadOptions::default())?;
    let dir = tempfile::tempdir().context("creating a temp dir for the bench weights")?;
    eprintln!("writing them to {} …", dir.path().display());
    model.save(dir.path())?;

    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let rows: Vec<Vec<u32>> = (0..options.batch)
        .map(|_| {
            (0..=options.seq_len)
                .map(|_| rng.random_range(0..config.vocab_size as u32))
                .collect()
        })
        .collect();
    let inputs_path = dir.path().join("bench_inputs.json");
    std::fs::write(&inputs_path, serde_json::json!({ "ids": rows }).to_string())?;

    let (batch, seq) = (options.batch, options.seq_len);
    let flat: Vec<u32> = rows.iter().flatten().copied().collect();
    let all = Tensor::from_vec(flat, (batch, seq + 1), &Device::Cpu)?;
    let inputs = all.narrow(1, 0, seq)?.contiguous()?;
    let targets = all.narrow(1, 1, seq)?.contiguous()?;
    eprintln!(
        "timing candle ({batch} x {seq} tokens, 1 warm-up + {} repeats) …",
        options.repeats
    );
    let score =
        |model: &Qwen3| model.token_logprobs_mode(&inputs, &targets, ForwardMode::Inference);
    let (first, candle_seconds) = time_scoring(|| score(&model), options.repeats)?;
    let amx_timing = if model.pack_for_amx()? {
        eprintln!("timing candle on the AMX path (bf16x3) …");
        Some(time_scoring(|| score(&model), options.repeats)?)
    } else {
        None
    };
    drop(model);
    let tokens = (batch * seq) as f64;
    let best = |seconds: &[f64]| tokens / seconds.iter().copied().fold(f64::MAX, f64::min);
    let candle_tokens_per_s = best(&candle_seconds);

    eprintln!("timing transformers …");
    let (baseline, baseline_error) = match run_baseline(dir.path(), &inputs_path, options) {
        Ok(baseline) => (baseline, None),
        Err(err) => (serde_json::Value::Null, Some(format!("{err:#}"))),
    };
    let theirs = baseline["tokens_per_s"].as_f64();
    let reference = baseline["first_row_logprobs"].as_array();
    let amx = amx_timing.map(|(amx_first, seconds)| {
        let tokens_per_s = best(&seconds);
        AmxReport {
            candle_tokens_per_s: tokens_per_s,
            candle_seconds: seconds,
            ratio: theirs.map(|t| tokens_per_s / t),
            max_abs_logprob_diff: reference.map(|row| max_abs_diff(row, &amx_first)),
        }
    });
    let report = BenchReport {
        shape,
        batch,
        seq_len: seq,
        repeats: options.repeats,
        candle_tokens_per_s,
        candle_seconds,
        transformers_tokens_per_s: theirs,
        transformers_seconds: baseline["seconds"]
            .as_array()
            .map(|s| s.iter().filter_map(|v| v.as_f64()).collect()),
        ratio: theirs.map(|t| candle_tokens_per_s / t),
        max_abs_logprob_diff: reference.map(|row| max_abs_diff(row, &first)),
        baseline_error,
        torch_threads: baseline["threads"].as_u64(),
        amx,
    };
    Ok(report)
}

/// Runs the embedded transformers script on the saved folder; its stdout is one JSON object.
fn run_baseline(
    model_dir: &std::path::Path,
    inputs: &std::path::Path,
    options: &BenchOptions,
) -> Result<serde_json::Value> {
    let python = std::env::var("AGENTRL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = model_dir.join("bench_qwen3.py");
    std::fs::write(&script, BASELINE_SCRIPT)?;
    let output = Command::new(&python)
        .arg(&script)
        .arg("--model")
        .arg(model_dir)
        .arg("--inputs")
        .arg(inputs)
        .arg("--repeats")
        .arg(options.repeats.to_string())
        .arg("--threads")
        .arg(options.threads.to_string())
        .output()
        .with_context(|| format!("running `{python}` (set AGENTRL_PYTHON to pick another)"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last_line = stdout.lines().last().unwrap_or("");
    let parsed: Option<serde_json::Value> = serde_json::from_str(last_line).ok();
    if let Some(error) = parsed.as_ref().and_then(|v| v["error"].as_str()) {
        bail!("{python}: {error} (set AGENTRL_PYTHON to an interpreter with torch + transformers)");
    }
    match parsed {
        Some(value) if output.status.success() => Ok(value),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            bail!("{python} bench script failed ({}): {tail}", output.status)
        }
    }
}

/// Prints the report as one JSON object or as text.
pub fn print(report: &BenchReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
        return Ok(());
    }
    println!("Qwen3 scoring throughput: {}", report.shape);
    println!(
        "  inputs: {} x {} tokens, best of {} repeats",
        report.batch, report.seq_len, report.repeats
    );
    println!(
        "  candle (agentrl):  {:>9.1} tokens/s",
        report.candle_tokens_per_s
    );
    match (report.transformers_tokens_per_s, report.ratio) {
        (Some(theirs), Some(ratio)) => {
            println!(
                "  transformers:      {theirs:>9.1} tokens/s (float32, {} torch threads)",
                report.torch_threads.unwrap_or(0)
            );
            println!("  ratio:             {ratio:>9.2}x");
            if let Some(diff) = report.max_abs_logprob_diff {
                println!("  max |logprob diff| on row 0: {diff:.2e}");
            }
        }
        _ => println!(
            "  transformers:      baseline unavailable: {}",
            report.baseline_error.as_deref().unwrap_or("unknown error")
        ),
    }
    if let Some(amx) = &report.amx {
        println!(
            "  candle, AMX bf16x3 (opt-in): {:>9.1} tokens/s",
            amx.candle_tokens_per_s
        );
        if let (Some(ratio), Some(diff)) = (amx.ratio, amx.max_abs_logprob_diff) {
            println!("  ratio:             {ratio:>9.2}x, max |logprob diff| {diff:.2e}");
        }
    }
    Ok(())
}
