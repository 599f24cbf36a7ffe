//! `agentrl bench train-step`: one TinyAgent training step through the trainer's real
//! [`agentrl_train::update::update`], timed side by side with the same model, loss and
//! optimizer in PyTorch eager on the CPU (`scripts/bench_train_step.py`, 2 threads).
//!
//! The step is the default run's update (the GRPO preset): group advantages from the
//! episodes' rewards (ALGORITHMS.md §4), forward over `[B, T]` ids, log-softmax gathered at the
//! targets, the PPO clipped surrogate on the token ratio against the sampling log-probs (§3),
//! the entropy bonus (§12), `seq-mean-token-mean` aggregation (§17), backward, global
//! gradient-norm clipping and AdamW. The inputs are synthetic but shaped like a real batch (a
//! loss mask over about a third of the positions, groups of 4 with 0/1 rewards). The timed
//! model is the transformer with its LM and value heads; the pointer head
//! (`TinyConfig::pointer_markers`) is left out on both sides, since random ids hold no
//! candidate spans for it to score.
//!
//! Both sides report the median of `steps` timed steps after `warmup` untimed ones, so the
//! figure is the steady-state cost, not allocation warm-up or the first-call overheads.
//! candle runs on `train.threads` of the default config (all cores); PyTorch is timed at 2
//! threads (the reference) and at 1 thread (for context).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use agentrl_model::{Policy, TinyAgent, TinyConfig};
use agentrl_rollout::Batch;
use agentrl_train::algo::Algorithm;
use agentrl_train::optim::{AdamW, AdamWParams};
use agentrl_train::update::{update, UpdateSetup};

/// Shapes and knobs of the benchmark, passed verbatim to the PyTorch script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainStepShapes {
    pub batch: usize,
    pub seq_len: usize,
    pub vocab: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub mlp_ratio: usize,
    pub max_seq: usize,
    /// Episodes per group (GRPO's G).
    pub group_size: usize,
    pub clip_eps: f64,
    pub entropy_coef: f64,
    pub lr: f64,
    pub grad_clip: f64,
    pub warmup: usize,
    pub steps: usize,
}

impl TrainStepShapes {
    /// The default TinyAgent and the default run's GRPO update at a training batch of 32
    /// episodes × 128 tokens.
    pub fn default_run() -> anyhow::Result<Self> {
        let config = agentrl_train::config::Config::builtin()?;
        let cfg = TinyConfig::for_vocab(agentrl_chat::tiny::TinyCodec::for_gym().vocab().len());
        let knobs = &config.algorithm.knobs;
        Ok(Self {
            batch: 32,
            seq_len: 128,
            vocab: cfg.vocab_size,
            d_model: config.model.d_model,
            n_layers: config.model.layers,
            n_heads: config.model.heads,
            mlp_ratio: config.model.mlp_ratio,
            max_seq: config.model.max_seq.max(128),
            group_size: 4,
            clip_eps: knobs.eps_low,
            entropy_coef: knobs.entropy_coef,
            lr: config.optim.lr,
            grad_clip: config.optim.grad_clip,
            warmup: 3,
            steps: 15,
        })
    }

    fn model_config(&self) -> TinyConfig {
        TinyConfig {
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            mlp_ratio: self.mlp_ratio,
            max_seq: self.max_seq,
            ..TinyConfig::for_vocab(self.vocab)
        }
    }
}

/// The synthetic rollout batch (the Python script draws its own with the same distribution;
/// values need not match bit for bit, shapes and densities do).
fn synthetic_batch(shapes: &TrainStepShapes, device: &Device) -> anyhow::Result<Batch> {
    let (b, t, v) = (shapes.batch, shapes.seq_len, shapes.vocab as u32);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let tokens: Vec<u32> = (0..b * (t + 1)).map(|_| rng.random_range(0..v)).collect();
    let seq = Tensor::from_vec(tokens, (b, t + 1), device)?;
    let mask: Vec<f32> = (0..b * t)
        .map(|_| f32::from(u8::from(rng.random_bool(1.0 / 3.0))))
        .collect();
    Ok(Batch {
        input_ids: seq.narrow(1, 0, t)?.contiguous()?,
        targets: seq.narrow(1, 1, t)?.contiguous()?,
        loss_mask: Tensor::from_vec(mask, (b, t), device)?,
        old_logprobs: Tensor::full(-(shapes.vocab as f32).ln(), (b, t), device)?,
        turn_ids: Tensor::zeros((b, t), DType::U32, device)?,
        group_ids: (0..b).map(|i| i / shapes.group_size.max(1)).collect(),
        rewards: (0..b)
            .map(|_| f32::from(u8::from(rng.random_bool(0.5))))
            .collect(),
    })
}

/// Median milliseconds of one candle training step.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CandleTiming {
    pub step_ms: f64,
    /// Mean loss of the timed steps (a finite number shows the objective ran).
    pub loss: f64,
}

/// Times `shapes.steps` candle training steps after `shapes.warmup` untimed ones.
pub fn time_candle(shapes: &TrainStepShapes) -> anyhow::Result<CandleTiming> {
    let device = Device::Cpu;
    let model = TinyAgent::new(shapes.model_config(), 0, &device)?;
    let batch = synthetic_batch(shapes, &device)?;
    let named = model.trainable_vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let mut optimizer = AdamW::new(
        named,
        AdamWParams {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    )?;
    let mut knobs = Algorithm::Grpo.preset();
    knobs.eps_low = shapes.clip_eps;
    knobs.eps_high = shapes.clip_eps;
    knobs.entropy_coef = shapes.entropy_coef;
    let setup = UpdateSetup {
        policy: &model,
        reference: None,
        algorithm: Algorithm::Grpo,
        knobs: &knobs,
        kl_coef: 0.0,
        temperature: 1.0,
        lr: shapes.lr,
        grad_clip: shapes.grad_clip,
        max_len: shapes.seq_len as f64,
        measure_mismatch: false,
    };
    let mut shuffle = ChaCha8Rng::seed_from_u64(1);
    let mut times = Vec::new();
    let mut losses = Vec::new();
    for step in 0..shapes.warmup + shapes.steps {
        let start = Instant::now();
        let metrics = update(&setup, &mut optimizer, &vars, &batch, &mut shuffle)?;
        if step >= shapes.warmup {
            times.push(start.elapsed().as_secs_f64() * 1e3);
            losses.push(metrics.loss);
        }
    }
    Ok(CandleTiming {
        step_ms: median(&mut times),
        loss: losses.iter().sum::<f64>() / losses.len().max(1) as f64,
    })
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(f64::NAN)
}

/// What the PyTorch script prints (one JSON object on its last stdout line).
#[derive(Debug, Deserialize)]
struct TorchReport {
    torch_ms: f64,
    torch_1thread_ms: f64,
    torch_version: String,
    threads: usize,
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_train_step.py")
}

/// Runs the PyTorch side; `Err` says why it could not (no interpreter, no torch, ...).
fn time_torch(shapes: &TrainStepShapes) -> anyhow::Result<TorchReport> {
    let python = std::env::var("AGENTRL_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = script_path();
    let output = Command::new(&python)
        .arg(&script)
        .arg(serde_json::to_string(shapes)?)
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

/// The JSON `bench train-step --json` prints.
#[derive(Debug, Serialize)]
pub struct TrainStepReport {
    pub shapes: TrainStepShapes,
    pub parameters: usize,
    pub candle_ms: f64,
    pub candle_step: CandleTiming,
    /// PyTorch at 2 threads (the reference figure).
    pub torch_ms: Option<f64>,
    /// PyTorch at 1 thread, for context on a busy machine.
    pub torch_1thread_ms: Option<f64>,
    /// torch_ms / candle_ms (> 1: candle is faster).
    pub ratio: Option<f64>,
    pub torch_version: Option<String>,
    pub torch_threads: Option<usize>,
    pub candle_threads: usize,
    /// Why the PyTorch side is missing, if it is.
    pub torch_error: Option<String>,
}

/// Runs both sides and prints the report.
pub fn run(json: bool) -> anyhow::Result<()> {
    let shapes = TrainStepShapes::default_run()?;
    let parameters = TinyAgent::new(shapes.model_config(), 0, &Device::Cpu)?.num_parameters();
    let candle = time_candle(&shapes)?;
    let candle_ms = candle.step_ms;
    let torch = time_torch(&shapes);
    let (torch_ms, torch_1thread_ms, torch_version, torch_threads, torch_error) = match torch {
        Ok(r) => (
            Some(r.torch_ms),
            Some(r.torch_1thread_ms),
            Some(r.torch_version),
            Some(r.threads),
            None,
        ),
        Err(err) => (None, None, None, None, Some(format!("{err:#}"))),
    };
    let report = TrainStepReport {
        ratio: torch_ms.map(|t| t / candle_ms),
        shapes,
        parameters,
        candle_ms,
        candle_step: candle,
        torch_ms,
        torch_1thread_ms,
        torch_version,
        torch_threads,
        candle_threads: candle_core::utils::get_num_threads(),
        torch_error,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let s = &report.shapes;
    println!(
        "TinyAgent training step: batch {}x{} tokens, vocab {}, d_model {}, {} layers, {} heads ({} parameters)",
        s.batch, s.seq_len, s.vocab, s.d_model, s.n_layers, s.n_heads, report.parameters
    );
    println!(
        "  candle  {:8.2} ms/step (median of {}, {} threads)",
        report.candle_ms, s.steps, report.candle_threads
    );
    match (&report.torch_ms, &report.torch_error) {
        (Some(t), _) => {
            println!(
                "  torch   {t:8.2} ms/step (median of {}, {} threads, torch {})",
                s.steps,
                report.torch_threads.unwrap_or(0),
                report.torch_version.as_deref().unwrap_or("?")
            );
            if let Some(one) = report.torch_1thread_ms {
                println!("          (torch at 1 thread: {one:.2} ms/step)");
            }
            println!(
                "  ratio   {:8.2}x (torch / candle; > 1: candle is faster)",
                report.ratio.unwrap_or(f64::NAN)
            );
        }
        (None, Some(err)) => println!(
            "  torch   unavailable ({err}); set AGENTRL_PYTHON to an interpreter with torch"
        ),
        (None, None) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timed_step_is_the_trainers_update_on_a_small_shape() {
        let shapes = TrainStepShapes {
            batch: 4,
            seq_len: 8,
            vocab: 11,
            d_model: 8,
            n_layers: 1,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 8,
            group_size: 2,
            clip_eps: 0.2,
            entropy_coef: 0.01,
            lr: 1e-2,
            grad_clip: 1.0,
            warmup: 0,
            steps: 2,
        };
        let timing = time_candle(&shapes).unwrap();
        assert!(
            timing.step_ms > 0.0 && timing.loss.is_finite(),
            "{timing:?}"
        );
        assert!(script_path().exists());
    }
}
