//! `agentrl bench real-model`: a real pretrained model (SmolLM2-135M-Instruct, a GGUF file)
//! scored and decoded by agentrl, against llama.cpp and transformers on the same file, in the
//! same run, with the same threads.
//!
//! Flow: load the GGUF (dequantized to f32, the trainer's and the local engine's weights) →
//! time scoring (one inference forward + next-token log-probs) of 128 and 512 tokens, and
//! greedy generation of 64 new tokens at batch 1 and 16 through the engine's ragged KV cache →
//! drop the model → run `scripts/bench_real_model.py` (embedded; `$AGENTRL_PYTHON` or
//! `python3`, with `llama-cpp-python`, `torch`, `transformers` and `gguf`), which times
//! llama.cpp (the file's Q4_1 and an F32 copy) and transformers (f32, bf16) on the same token
//! ids → print every figure, the ratios, and each one's largest log-prob gap from transformers
//! f32 on the 512-token input. Generation tokens/s counts new tokens over prefill + decode.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use agentrl_model::qwen3::{ForwardMode, LoadOptions, Qwen3, RaggedKvCache};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use serde_json::Value;

/// The baseline script, embedded so that an installed binary can run the bench.
const BASELINE_SCRIPT: &str = include_str!("../../../scripts/bench_real_model.py");

/// New tokens per generated sequence, as the baseline script generates.
const NEW_TOKENS: usize = 64;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The GGUF file (default: the fetched SmolLM2).
    pub gguf: Option<PathBuf>,
    /// Timed repeats after one warm-up; the best is reported.
    pub repeats: usize,
    /// Threads of every side (candle's pool is sized by `RAYON_NUM_THREADS` or the machine).
    pub threads: usize,
    /// Skip the baselines (agentrl's figures only).
    pub no_baseline: bool,
}

/// agentrl's own figures.
#[derive(Debug, Serialize)]
pub struct OurFigures {
    pub scoring_128_tokens_per_s: f64,
    pub scoring_512_tokens_per_s: f64,
    pub generation_batch1_tokens_per_s: f64,
    pub generation_batch16_tokens_per_s: f64,
    /// Largest |agentrl − transformers f32| over the 512-token input's log-probs.
    pub max_abs_logprob_gap: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub gguf: String,
    pub threads: usize,
    pub repeats: usize,
    pub agentrl: OurFigures,
    /// The baseline script's JSON (llama.cpp and transformers sections), or why it is missing.
    pub baselines: Value,
    /// agentrl ÷ each baseline, per figure.
    pub ratios: Value,
}

fn best(seconds: &[f64]) -> f64 {
    seconds.iter().copied().fold(f64::MAX, f64::min)
}

/// Best-of-`repeats` seconds of `run` after one warm-up.
fn time_best(repeats: usize, mut run: impl FnMut() -> Result<()>) -> Result<f64> {
    run()?;
    let mut seconds = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        run()?;
        seconds.push(start.elapsed().as_secs_f64());
    }
    Ok(best(&seconds))
}

fn score(model: &Qwen3, ids: &[u32]) -> Result<Vec<f32>> {
    let n = ids.len();
    let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &Device::Cpu)?;
    let targets = Tensor::from_slice(&ids[1..], (1, n - 1), &Device::Cpu)?;
    Ok(model
        .token_logprobs_mode(&inputs, &targets, ForwardMode::Inference)?
        .squeeze(0)?
        .to_vec1()?)
}

/// Greedy decoding of [`NEW_TOKENS`] tokens after `prompt` for `batch` rows at once, through
/// the ragged KV cache the local engine decodes with.
fn generate(model: &Qwen3, prompt: &[u32], batch: usize) -> Result<()> {
    let mut cache = RaggedKvCache::new(batch);
    let rows: Vec<&[u32]> = vec![prompt; batch];
    let mut logits = model.forward_step_ragged_last(&rows, &mut cache)?;
    for _ in 0..NEW_TOKENS - 1 {
        let next: Vec<u32> = logits.argmax(1)?.to_vec1()?;
        let feeds: Vec<[u32; 1]> = next.iter().map(|&id| [id]).collect();
        let rows: Vec<&[u32]> = feeds.iter().map(|f| f.as_slice()).collect();
        logits = model.forward_step_ragged_last(&rows, &mut cache)?;
    }
    Ok(())
}

fn ids_of(value: &Value) -> Option<Vec<u32>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_u64().map(|id| id as u32))
        .collect()
}

/// Runs the bench and returns its report.
pub fn run(options: &BenchOptions) -> Result<BenchReport> {
    if options.repeats == 0 {
        bail!("bench real-model needs --repeats >= 1");
    }
    let gguf = match &options.gguf {
        Some(path) => path.clone(),
        None => agentrl_chat::resolve_model_path(agentrl_chat::assets::SMOLLM2_ALIAS)
            .map_err(anyhow::Error::msg)?,
    };
    let work = tempfile::tempdir().context("creating a temp dir for the bench")?;
    // The baseline first: it fixes the token ids (its own tokenizer of its prompts) and holds
    // transformers' log-probs of the 512-token input.
    let baselines = if options.no_baseline {
        Value::Null
    } else {
        eprintln!("timing llama.cpp and transformers (scripts/bench_real_model.py) …");
        match run_baseline(work.path(), &gguf, options) {
            Ok(value) => value,
            Err(err) => serde_json::json!({ "error": format!("{err:#}") }),
        }
    };
    eprintln!("loading {} …", gguf.display());
    let model = Qwen3::load(
        &gguf,
        &LoadOptions {
            dtype: DType::F32,
            device: Device::Cpu,
            trainable: false,
        },
    )?;
    let inputs = &baselines["inputs"];
    let fallback: Vec<u32> = (0..513u32).map(|i| (i * 37 + 11) % 49_000 + 17).collect();
    let score_512 = ids_of(&inputs["score_512"]).unwrap_or_else(|| fallback.clone());
    let score_128 = ids_of(&inputs["score_128"]).unwrap_or_else(|| fallback[..129].to_vec());
    let prompt = ids_of(&inputs["generation_prompt"]).unwrap_or_else(|| fallback[..40].to_vec());
    eprintln!("timing agentrl …");
    let tokens = |ids: &[u32]| (ids.len() - 1) as f64;
    let scoring_128 =
        tokens(&score_128) / time_best(options.repeats, || score(&model, &score_128).map(drop))?;
    let scoring_512 =
        tokens(&score_512) / time_best(options.repeats, || score(&model, &score_512).map(drop))?;
    let gen_1 = NEW_TOKENS as f64 / time_best(options.repeats, || generate(&model, &prompt, 1))?;
    let gen_16 =
        (16 * NEW_TOKENS) as f64 / time_best(options.repeats, || generate(&model, &prompt, 16))?;
    let ours_512 = score(&model, &score_512)?;
    let gap = baselines["transformers_f32"]["logprobs_512"]
        .as_array()
        .map(|theirs| {
            theirs
                .iter()
                .zip(&ours_512)
                .map(|(t, o)| (t.as_f64().unwrap_or(f64::NAN) - f64::from(*o)).abs())
                .fold(0.0, f64::max)
        });
    let agentrl = OurFigures {
        scoring_128_tokens_per_s: scoring_128,
        scoring_512_tokens_per_s: scoring_512,
        generation_batch1_tokens_per_s: gen_1,
        generation_batch16_tokens_per_s: gen_16,
        max_abs_logprob_gap: gap,
    };
    let ratios = ratios(&agentrl, &baselines);
    Ok(BenchReport {
        gguf: gguf.display().to_string(),
        threads: options.threads,
        repeats: options.repeats,
        agentrl,
        baselines,
        ratios,
    })
}

/// agentrl's figure over each baseline's, for every backend section that has it.
fn ratios(ours: &OurFigures, baselines: &Value) -> Value {
    let figures = [
        ("scoring_128_tokens_per_s", ours.scoring_128_tokens_per_s),
        ("scoring_512_tokens_per_s", ours.scoring_512_tokens_per_s),
        (
            "generation_batch1_tokens_per_s",
            ours.generation_batch1_tokens_per_s,
        ),
        (
            "generation_batch16_tokens_per_s",
            ours.generation_batch16_tokens_per_s,
        ),
    ];
    let mut out = serde_json::Map::new();
    for backend in [
        "llama_cpp_q4_1",
        "llama_cpp_f32",
        "transformers_f32",
        "transformers_bf16",
    ] {
        let section = &baselines[backend];
        let mut row = serde_json::Map::new();
        for (name, value) in figures {
            if let Some(theirs) = section[name].as_f64().filter(|t| *t > 0.0) {
                row.insert(name.to_string(), Value::from(value / theirs));
            }
        }
        if !row.is_empty() {
            out.insert(backend.to_string(), Value::Object(row));
        }
    }
    Value::Object(out)
}

/// Runs the embedded baseline script on the GGUF; its result is one JSON object.
fn run_baseline(work: &Path, gguf: &Path, options: &BenchOptions) -> Result<Value> {
    let python = std::env::var("AGENTRL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = work.join("bench_real_model.py");
    std::fs::write(&script, BASELINE_SCRIPT)?;
    let out = work.join("baseline.json");
    let status = Command::new(&python)
        .arg(&script)
        .arg("--gguf")
        .arg(gguf)
        .arg("--threads")
        .arg(options.threads.to_string())
        .arg("--repeats")
        .arg(options.repeats.to_string())
        .arg("--json-out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running `{python}` (set AGENTRL_PYTHON to pick another)"))?;
    let text = std::fs::read_to_string(&out)
        .with_context(|| format!("{python} {} wrote no report ({status})", script.display()))?;
    serde_json::from_str(&text).context("parsing the baseline report")
}

/// Prints the report as one JSON object or as text.
pub fn print(report: &BenchReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
        return Ok(());
    }
    println!(
        "real model: {} ({} threads, best of {})",
        report.gguf, report.threads, report.repeats
    );
    let ours = &report.agentrl;
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "tokens/s", "score 128", "score 512", "gen b=1", "gen b=16", "max |Δlogp|"
    );
    let row = |name: &str,
               s128: Option<f64>,
               s512: Option<f64>,
               g1: Option<f64>,
               g16: Option<f64>,
               gap: Option<f64>| {
        let cell = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        println!(
            "{name:<22} {:>10} {:>10} {:>10} {:>10} {:>12}",
            cell(s128),
            cell(s512),
            cell(g1),
            cell(g16),
            gap.map_or_else(|| "-".to_string(), |g| format!("{g:.1e}"))
        );
    };
    row(
        "agentrl (f32)",
        Some(ours.scoring_128_tokens_per_s),
        Some(ours.scoring_512_tokens_per_s),
        Some(ours.generation_batch1_tokens_per_s),
        Some(ours.generation_batch16_tokens_per_s),
        ours.max_abs_logprob_gap,
    );
    for (backend, label) in [
        ("llama_cpp_f32", "llama.cpp (F32)"),
        ("llama_cpp_q4_1", "llama.cpp (Q4_1)"),
        ("transformers_f32", "transformers (f32)"),
        ("transformers_bf16", "transformers (bf16)"),
    ] {
        let section = &report.baselines[backend];
        if let Some(error) = section["error"].as_str() {
            println!("{label:<22} unavailable: {error}");
            continue;
        }
        let f = |key: &str| section[key].as_f64();
        row(
            label,
            f("scoring_128_tokens_per_s"),
            f("scoring_512_tokens_per_s"),
            f("generation_batch1_tokens_per_s"),
            f("generation_batch16_tokens_per_s"),
            f("max_abs_logprob_gap"),
        );
    }
    if let Some(error) = report.baselines["error"].as_str() {
        println!("baselines unavailable: {error}");
    }
    for (backend, ratios) in report.ratios.as_object().into_iter().flatten() {
        let parts: Vec<String> = ratios
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                format!(
                    "{} {:.2}x",
                    k.trim_end_matches("_tokens_per_s"),
                    v.as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect();
        println!("agentrl / {backend}: {}", parts.join(", "));
    }
    Ok(())
}
