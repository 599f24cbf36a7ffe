//! `agentrl bench train-step`: one TinyAgent training step through the trainer's real
//! [`agentrl_train::update::update`], timed side by side with the same model, loss and
//! optimizer in PyTorch eager on the CPU (`scripts/bench_train_step.py`, 2 threads).
//!
//! The step is the default run's update (the GRPO preset): group advantages from the
//! episodes' rewards (ALGORITHMS.md §4), forward over `[B, T]` ids, log-softmax gathered at the
//! targets, the PPO clipped surrogate on the token ratio against the sampling log-probs (§3),
//! the entropy bonus (§12), `seq-mean-token-mean` aggregation (§17), backward, global
//! gradient-norm clipping and AdamW. TinyAgent's trunk runs as explicit loops there
//! (`agentrl_model::tiny`, "Training forward"), as in every training run. The inputs are synthetic but shaped like a real batch (a
//! loss mask over about a third of the positions, groups of 4 with 0/1 rewards). The timed
//! model is the transformer with its LM and value heads; the pointer head
//! (`TinyConfig::pointer_markers`) is left out on both sides, since random ids hold no
//! candidate spans for it to score.
//!
//! Both sides report the median of `steps` timed steps after `warmup` untimed ones, so the
//! figure is the steady-state cost, not allocation warm-up or the first-call overheads.
//! candle runs on `train.threads` of the default config (all cores); PyTorch is timed at 2
//! threads (the reference) and at 1 thread (for context).

use std::time::Instant;

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use agentrl_model::{Policy, TinyAgent, TinyConfig};
use agentrl_rollout::Batch;
use agentrl_train::algo::Algorithm;
use agentrl_train::optim::{AdamW, AdamWParams};
use agentrl_train::update::{update, UpdateSetup};

use super::TorchSide;

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

    /// Floating-point operations of one training step on this model, counted the usual way
    /// (Kaplan et al. 2020; PaLM's MFU): a multiply-add is 2 FLOPs, the backward pass costs
    /// twice the forward, and only matmuls count. Per token: the four projections of each
    /// block (QKV, output, MLP up and down) and the LM and value heads; per sequence, each
    /// layer's causal scores `QKᵀ` and mix `PV` over the `T(T+1)/2` visible pairs. The
    /// kernels' own extra work (the attention backward recomputes the probabilities) is not
    /// counted, so the FLOP/s is the model's, comparable across implementations.
    pub fn step_flops(&self) -> f64 {
        let (d, t) = (self.d_model as f64, self.seq_len as f64);
        let mlp = (self.mlp_ratio * self.d_model) as f64;
        let per_token_macs = self.n_layers as f64 * (d * 3.0 * d + d * d + 2.0 * d * mlp)
            + d * self.vocab as f64
            + d;
        let attention_macs_per_sequence = self.n_layers as f64 * 2.0 * d * t * (t + 1.0) / 2.0;
        let forward_macs = self.batch as f64 * (t * per_token_macs + attention_macs_per_sequence);
        3.0 * 2.0 * forward_macs
    }

    pub(super) fn model_config(&self) -> TinyConfig {
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
        step_ms: super::median(&mut times),
        loss: losses.iter().sum::<f64>() / losses.len().max(1) as f64,
    })
}

/// FP32 FLOPs per cycle and core: two FMA units of the widest vectors the CPU has.
fn flops_per_cycle() -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return 64.0;
    }
    32.0
}

/// The CPU clock in GHz from the first `cpu MHz` line of `/proc/cpuinfo` (Linux only).
fn cpu_clock_ghz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|line| {
            line.strip_prefix("cpu MHz")?
                .split(':')
                .nth(1)?
                .trim()
                .parse()
                .ok()
        })
        .map(|mhz: f64| mhz / 1e3)
}

/// The JSON `bench train-step --json` prints.
#[derive(Debug, Serialize)]
pub struct TrainStepReport {
    pub shapes: TrainStepShapes,
    pub parameters: usize,
    pub candle_ms: f64,
    pub candle_step: CandleTiming,
    /// PyTorch at 2 threads (the reference figure) and at 1.
    #[serde(flatten)]
    pub torch: TorchSide,
    /// torch_ms / candle_ms (> 1: candle is faster).
    pub ratio: Option<f64>,
    /// [`TrainStepShapes::step_flops`], in GFLOP.
    pub step_gflop: f64,
    /// Trained tokens per second (`batch × seq_len` per step).
    pub candle_tokens_per_s: f64,
    pub torch_tokens_per_s: Option<f64>,
    /// The model's GFLOP per second of step time.
    pub candle_gflops: f64,
    pub torch_gflops: Option<f64>,
    /// The FP32 peak of the cores used, in GFLOP/s, where the CPU's clock is known: cores ×
    /// FLOPs per cycle (two fused multiply-add units of 16 lanes with AVX-512, 8 with AVX2:
    /// 64 or 32) × the clock `/proc/cpuinfo` reports. A ceiling for context, not a measured
    /// figure (a core with one AVX-512 unit peaks at half).
    pub peak_gflops_estimate: Option<f64>,
    pub candle_threads: usize,
}

/// Runs both sides and prints the report.
pub fn run(json: bool) -> anyhow::Result<()> {
    let shapes = TrainStepShapes::default_run()?;
    let parameters = TinyAgent::new(shapes.model_config(), 0, &Device::Cpu)?.num_parameters();
    let candle = time_candle(&shapes)?;
    let candle_ms = candle.step_ms;
    let torch = super::time_baseline("bench_train_step.py", &shapes);
    let torch_ms = torch.torch_ms;
    let step_gflop = shapes.step_flops() / 1e9;
    let tokens = (shapes.batch * shapes.seq_len) as f64;
    let candle_threads = candle_core::utils::get_num_threads();
    let report = TrainStepReport {
        ratio: torch_ms.map(|t| t / candle_ms),
        step_gflop,
        candle_tokens_per_s: tokens / (candle_ms / 1e3),
        torch_tokens_per_s: torch_ms.map(|t| tokens / (t / 1e3)),
        candle_gflops: step_gflop / (candle_ms / 1e3),
        torch_gflops: torch_ms.map(|t| step_gflop / (t / 1e3)),
        peak_gflops_estimate: cpu_clock_ghz()
            .map(|ghz| candle_threads as f64 * flops_per_cycle() * ghz),
        shapes,
        parameters,
        candle_ms,
        candle_step: candle,
        torch,
        candle_threads,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let s = &report.shapes;
    println!(
        "TinyAgent training step: batch {}x{} tokens, vocab {}, d_model {}, {} layers, {} heads ({} parameters, {:.2} GFLOP/step)",
        s.batch, s.seq_len, s.vocab, s.d_model, s.n_layers, s.n_heads, report.parameters, report.step_gflop
    );
    println!(
        "  candle  {:8.2} ms/step (median of {}, {} threads): {:.0} tokens/s, {:.1} GFLOP/s",
        report.candle_ms,
        s.steps,
        report.candle_threads,
        report.candle_tokens_per_s,
        report.candle_gflops
    );
    match (&report.torch.torch_ms, &report.torch.torch_error) {
        (Some(t), _) => {
            println!(
                "  torch   {t:8.2} ms/step (median of {}, {} threads, torch {}): {:.0} tokens/s, {:.1} GFLOP/s",
                s.steps,
                report.torch.torch_threads.unwrap_or(0),
                report.torch.torch_version.as_deref().unwrap_or("?"),
                report.torch_tokens_per_s.unwrap_or(f64::NAN),
                report.torch_gflops.unwrap_or(f64::NAN)
            );
            if let Some(one) = report.torch.torch_1thread_ms {
                println!("          (torch at 1 thread: {one:.2} ms/step)");
            }
            println!(
                "  ratio   {:8.2}x (torch / candle; > 1: candle is faster)",
                report.ratio.unwrap_or(f64::NAN)
            );
            if let Some(peak) = report.peak_gflops_estimate {
                println!(
                    "          (FP32 peak of {} cores at the reported clock: about {peak:.0} GFLOP/s; candle {:.0}%, torch {:.0}%)",
                    report.candle_threads,
                    100.0 * report.candle_gflops / peak,
                    100.0 * report.torch_gflops.unwrap_or(f64::NAN) / peak
                );
            }
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
        // One layer of d 8 with an MLP of 16, vocab 11, 4 sequences of 8 tokens, per token:
        // QKV 8·24, output 8·8, MLP 2·8·16, LM head 8·11, value head 8 multiply-adds; per
        // sequence, QKᵀ and PV over the 36 visible pairs at width 8.
        let per_token = 8 * 24 + 8 * 8 + 2 * 8 * 16 + 8 * 11 + 8;
        let per_sequence = 2 * 8 * 36;
        let forward_macs = 4 * (8 * per_token + per_sequence);
        assert_eq!(shapes.step_flops(), (6 * forward_macs) as f64);
        let timing = time_candle(&shapes).unwrap();
        assert!(
            timing.step_ms > 0.0 && timing.loss.is_finite(),
            "{timing:?}"
        );
        assert!(super::super::baseline_script("bench_train_step.py").exists());
    }
}
