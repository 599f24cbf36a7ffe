//! `agentrl bench`: each target times our code against a baseline measured in the same run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use clap::{Args, Subcommand};

mod qwen3;
mod real_model;
mod sampling;
mod train;
mod train_step;

/// A PyTorch baseline script under the checkout's `scripts/`.
fn baseline_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// What a PyTorch baseline script prints: one JSON object on its last stdout line.
#[derive(Debug, serde::Deserialize)]
struct BaselineTiming {
    torch_ms: f64,
    torch_1thread_ms: f64,
    torch_version: String,
    threads: usize,
}

/// The PyTorch side of a bench report (flattened into its JSON), or why it is missing.
#[derive(Debug, Default, serde::Serialize)]
pub struct TorchSide {
    /// Median ms at the script's reference thread count (`torch_threads`).
    pub torch_ms: Option<f64>,
    /// Median ms at 1 thread, for context on a busy machine.
    pub torch_1thread_ms: Option<f64>,
    pub torch_version: Option<String>,
    pub torch_threads: Option<usize>,
    /// Why the PyTorch side is missing (no interpreter, no torch, a failing script).
    pub torch_error: Option<String>,
}

/// Runs `scripts/<name>` with `$AGENTRL_PYTHON` (or `python3`) on `args` as one JSON argument
/// and reads its timing from the JSON object on its last stdout line.
fn time_baseline(name: &str, args: &impl serde::Serialize) -> TorchSide {
    match run_baseline_script(name, args) {
        Ok(t) => TorchSide {
            torch_ms: Some(t.torch_ms),
            torch_1thread_ms: Some(t.torch_1thread_ms),
            torch_version: Some(t.torch_version),
            torch_threads: Some(t.threads),
            torch_error: None,
        },
        Err(err) => TorchSide {
            torch_error: Some(format!("{err:#}")),
            ..TorchSide::default()
        },
    }
}

fn run_baseline_script(name: &str, args: &impl serde::Serialize) -> anyhow::Result<BaselineTiming> {
    let python = std::env::var("AGENTRL_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = baseline_script(name);
    let output = Command::new(&python)
        .arg(&script)
        .arg(serde_json::to_string(args)?)
        .output()
        .with_context(|| format!("running {python} {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "{python} {} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("parsing the PyTorch report {last:?}"))
}

/// The median of `times` (sorted in place); NaN when empty.
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(f64::NAN)
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub target: BenchTarget,
}

#[derive(Debug, Subcommand)]
pub enum BenchTarget {
    /// Sandboxed test executions per second: fresh python3 per run vs the warm pool; with
    /// --remote, verdict episodes through one and two local gym servers vs in process.
    Gym {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Measure the gym as a service (`agentrl gym serve`) instead.
        #[arg(long)]
        remote: bool,
    },
    /// Wall time of the default run to reach 90% hidden solve on train.
    Train {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Seed of the run (`train.seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Override a config key of the benchmarked run (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// One TinyAgent training step: candle vs PyTorch eager, side by side.
    TrainStep {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Rollout sampling: the local KV-cached engine vs a PyTorch KV-cache loop, side by side.
    Sampling {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A real pretrained model (SmolLM2-135M-Instruct, GGUF): scoring and generation tokens/s
    /// against llama.cpp and transformers on the same file, side by side.
    RealModel {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// The GGUF file (default: the SmolLM2 file `scripts/fetch_smollm2.sh` fetched).
        #[arg(long)]
        gguf: Option<std::path::PathBuf>,
        /// Timed repetitions after a warm-up (the best is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Threads for every side (llama.cpp's and torch's; candle's pool is the machine's).
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// agentrl's own figures only.
        #[arg(long)]
        no_baseline: bool,
    },
    /// Qwen3 0.6B-shape scoring throughput: candle vs transformers, side by side.
    Qwen3 {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// `config.json` of the shape, or a shape of configs/models/ by name (compiled in:
        /// `qwen3-8b`); default: the shared Qwen3-0.6B config.
        #[arg(long, value_name = "SHAPE|FILE")]
        config: Option<std::path::PathBuf>,
        /// Sequences per forward pass.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Tokens per sequence.
        #[arg(long, default_value_t = 128)]
        seq_len: usize,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// torch threads for the transformers baseline.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    match args.target {
        BenchTarget::Gym {
            json,
            remote: false,
        } => agentrl_gym::bench::run(json),
        BenchTarget::Gym { json, remote: true } => agentrl_gym::bench::remote::run(json),
        BenchTarget::Train { json, seed, set } => {
            let mut overrides: Vec<String> = seed
                .map(|s| format!("train.seed={s}"))
                .into_iter()
                .collect();
            overrides.extend(set);
            train::run(json, &overrides)
        }
        BenchTarget::TrainStep { json } => train_step::run(json),
        BenchTarget::Sampling { json } => sampling::run(json),
        BenchTarget::RealModel {
            json,
            gguf,
            repeats,
            threads,
            no_baseline,
        } => {
            let options = real_model::BenchOptions {
                gguf,
                repeats,
                threads,
                no_baseline,
            };
            real_model::print(&real_model::run(&options)?, json)
        }
        BenchTarget::Qwen3 {
            json,
            config,
            batch,
            seq_len,
            repeats,
            threads,
        } => {
            let options = qwen3::BenchOptions {
                config,
                batch,
                seq_len,
                repeats,
                threads,
            };
            qwen3::print(&qwen3::run(&options)?, json)
        }
    }
}
