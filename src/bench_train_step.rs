//! `agentrl bench train-step`: one TinyAgent training step in candle, timed side by side with the
//! same model, loss and optimizer in PyTorch eager on the CPU (`scripts/bench_train_step.py`,
//! 2 threads).
//!
//! The step: forward over `[B, T]` ids, log-softmax gathered at the targets, the PPO/GRPO
//! clipped surrogate (ALGORITHMS.md §3/§4) on the token ratio against fixed old log-probs,
//! aggregated as a masked `token-mean` (§0), backward, AdamW. The inputs are synthetic but
//! shaped like a real batch (a loss mask over about a third of the positions). The timed model is
//! the transformer with its LM and value heads; the pointer head (`TinyConfig::pointer_markers`)
//! is left out on both sides, since random ids hold no candidate spans for it to score.
//!
//! Both sides report the median of `steps` timed steps after `warmup` untimed ones, so the
//! figure is the steady-state cost, not allocation warm-up or the first-call overheads.
//! candle runs on rayon's thread count (`RAYON_NUM_THREADS`, default: all cores); PyTorch is
//! timed at 2 threads (the reference) and at 1 thread (for context).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use agentrl_model::fused::log_softmax_gather;
use agentrl_model::{TinyAgent, TinyConfig};

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
    pub warmup: usize,
    pub steps: usize,
}

impl TrainStepShapes {
    /// The default TinyAgent at a training batch of 32 episodes × 128 tokens.
    pub fn default_run() -> Self {
        let cfg = TinyConfig::default();
        Self {
            batch: 32,
            seq_len: 128,
            vocab: cfg.vocab_size,
            d_model: cfg.d_model,
            n_layers: cfg.n_layers,
            n_heads: cfg.n_heads,
            mlp_ratio: cfg.mlp_ratio,
            max_seq: cfg.max_seq,
            warmup: 3,
            steps: 15,
        }
    }

    fn model_config(&self) -> TinyConfig {
        TinyConfig {
            vocab_size: self.vocab,
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            mlp_ratio: self.mlp_ratio,
            max_seq: self.max_seq,
            ..TinyConfig::default()
        }
    }
}

/// The PPO clip range used by the benchmark loss.
pub const CLIP_EPS: f64 = 0.2;

/// The synthetic batch, shared by both sides through the same generator recipe (the Python
/// script draws its own with the same distribution; values need not match bit for bit, shapes
/// and densities do).
struct SyntheticBatch {
    ids: Tensor,
    targets: Tensor,
    mask: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
}

fn synthetic_batch(shapes: &TrainStepShapes, device: &Device) -> anyhow::Result<SyntheticBatch> {
    let (b, t, v) = (shapes.batch, shapes.seq_len, shapes.vocab as u32);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let tokens: Vec<u32> = (0..b * (t + 1)).map(|_| rng.random_range(0..v)).collect();
    let seq = Tensor::from_vec(tokens, (b, t + 1), device)?;
    let ids = seq.narrow(1, 0, t)?.contiguous()?;
    let targets = seq.narrow(1, 1, t)?.contiguous()?;
    let mask: Vec<f32> = (0..b * t)
        .map(|_| f32::from(u8::from(rng.random_bool(1.0 / 3.0))))
        .collect();
    let mask = Tensor::from_vec(mask, (b, t), device)?;
    let old_logp = Tensor::full(-(shapes.vocab as f32).ln(), (b, t), device)?;
    let advantages: Vec<f32> = (0..b).map(|_| rng.random_range(-1.0..1.0)).collect();
    let advantages = Tensor::from_vec(advantages, (b, 1), device)?;
    Ok(SyntheticBatch {
        ids,
        targets,
        mask,
        old_logp,
        advantages,
    })
}

/// The clipped-surrogate loss with masked token-mean (ALGORITHMS.md §3, §0 `token-mean`).
fn policy_loss(model: &TinyAgent, batch: &SyntheticBatch) -> candle_core::Result<Tensor> {
    let logits = model.forward(&batch.ids)?.logits;
    let (b, t, v) = logits.dims3()?;
    // Fused log-softmax + gather with a hand-written backward (agentrl_model::fused).
    let logp = log_softmax_gather(&logits.reshape((b * t, v))?, &batch.targets.flatten_all()?)?
        .reshape((b, t))?;
    let ratio = (logp - &batch.old_logp)?.exp()?;
    let unclipped = ratio.broadcast_mul(&batch.advantages)?;
    let clipped = ratio
        .clamp(1.0 - CLIP_EPS, 1.0 + CLIP_EPS)?
        .broadcast_mul(&batch.advantages)?;
    let per_token = unclipped.minimum(&clipped)?.neg()?;
    (per_token * &batch.mask)?.sum_all()? / batch.mask.sum_all()?.to_scalar::<f32>()? as f64
}

/// Median milliseconds of one candle training step, and of its phases.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CandleTiming {
    pub step_ms: f64,
    pub forward_loss_ms: f64,
    pub backward_ms: f64,
    pub optimizer_ms: f64,
}

/// Times `shapes.steps` candle training steps after `shapes.warmup` untimed ones.
pub fn time_candle(shapes: &TrainStepShapes) -> anyhow::Result<CandleTiming> {
    let device = Device::Cpu;
    let model = TinyAgent::new(shapes.model_config(), 0, &device)?;
    let batch = synthetic_batch(shapes, &device)?;
    let vars = model.named_vars().into_iter().map(|(_, v)| v).collect();
    let mut opt = AdamW::new(
        vars,
        ParamsAdamW {
            lr: 1e-3,
            weight_decay: 0.01,
            ..ParamsAdamW::default()
        },
    )?;
    let mut phases: [Vec<f64>; 4] = Default::default();
    for step in 0..shapes.warmup + shapes.steps {
        let start = Instant::now();
        let loss = policy_loss(&model, &batch)?;
        // Reading the scalar makes sure the forward is done (candle is eager on CPU anyway).
        let _ = loss.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        let forward = Instant::now();
        let grads = loss.backward()?;
        let backward = Instant::now();
        opt.step(&grads)?;
        let end = Instant::now();
        if step >= shapes.warmup {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            phases[0].push(ms(start, end));
            phases[1].push(ms(start, forward));
            phases[2].push(ms(forward, backward));
            phases[3].push(ms(backward, end));
        }
    }
    let [step, fwd, bwd, opt_ms] = phases.map(|mut p| median(&mut p));
    Ok(CandleTiming {
        step_ms: step,
        forward_loss_ms: fwd,
        backward_ms: bwd,
        optimizer_ms: opt_ms,
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
    /// The candle step split into phases (medians; they need not sum exactly to `candle_ms`).
    pub candle_phases: CandleTiming,
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
    let shapes = TrainStepShapes::default_run();
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
        candle_phases: candle,
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
    let p = &report.candle_phases;
    println!(
        "          (forward+loss {:.2} ms, backward {:.2} ms, AdamW {:.2} ms)",
        p.forward_loss_ms, p.backward_ms, p.optimizer_ms
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
                "  ratio   {:8.2}x (torch / candle; goal >= 3x)",
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
    fn candle_step_runs_and_reduces_the_loss_on_a_small_shape() {
        let shapes = TrainStepShapes {
            batch: 2,
            seq_len: 8,
            vocab: 11,
            d_model: 8,
            n_layers: 1,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 8,
            warmup: 0,
            steps: 2,
        };
        assert!(time_candle(&shapes).unwrap().step_ms > 0.0);
        // The loss is a real objective: a few AdamW steps lower it.
        let model = TinyAgent::new(shapes.model_config(), 0, &Device::Cpu).unwrap();
        let batch = synthetic_batch(&shapes, &Device::Cpu).unwrap();
        let vars = model.named_vars().into_iter().map(|(_, v)| v).collect();
        let mut opt = AdamW::new_lr(vars, 1e-2).unwrap();
        let first = policy_loss(&model, &batch)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        for _ in 0..5 {
            let loss = policy_loss(&model, &batch).unwrap();
            opt.backward_step(&loss).unwrap();
        }
        let last = policy_loss(&model, &batch)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(last < first, "{first} -> {last}");
        assert!(script_path().exists());
    }
}
