//! `agentrl bench sampling`: rollout sampling throughput of the local engine
//! ([`agentrl_engine::LocalEngine`] over TinyAgent, the default run's sampler) against an eager
//! PyTorch KV-cache loop at the same shapes (`scripts/bench_sampling.py`), side by side.
//!
//! One timed call is what a rollout turn asks of the engine: `rows` prompts of `prompt_len`
//! tokens (the default run's episodes per step: `rollout.tasks_per_step ×
//! rollout.group_size`), one batched prefill, then `new_tokens` batched decoding steps with
//! temperature-1 sampling and no stop token, so every row decodes the same number of tokens on
//! both sides. The figure is generated tokens per second of the whole call, prefill included.
//! The model is the default TinyAgent (the train-step bench's shapes) with random weights,
//! unconstrained (the action grammar's bias is TinyAgent-specific, and PyTorch has none). The
//! engine decodes on the default run's `engine.threads` (every compute thread: see
//! `agentrl_engine::threads`); PyTorch is timed at 2 threads and at 1.

use std::time::Instant;

use candle_core::Device;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use agentrl_engine::{
    Engine, GenerateParams, GenerateRequest, LocalEngine, OnThreads, SamplingParams,
};
use agentrl_model::TinyAgent;

use super::train_step::TrainStepShapes;
use super::TorchSide;

/// Shapes of the benchmark, passed verbatim to the PyTorch script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingShapes {
    pub rows: usize,
    pub prompt_len: usize,
    pub new_tokens: usize,
    pub vocab: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub mlp_ratio: usize,
    pub max_seq: usize,
    /// PyTorch's threads.
    pub threads: usize,
    /// The local engine's decoding threads (the default run's `engine.threads`, resolved).
    pub engine_threads: usize,
    pub warmup: usize,
    pub calls: usize,
}

impl SamplingShapes {
    /// The default run's model and rows; prompts of 96 tokens and 32 new ones (128 in all,
    /// half the default `model.max_seq`).
    pub fn default_run() -> anyhow::Result<Self> {
        let config = agentrl_train::config::Config::builtin()?;
        let model = TrainStepShapes::default_run()?;
        Ok(Self {
            rows: config.rollout.tasks_per_step * config.rollout.group_size,
            prompt_len: 96,
            new_tokens: 32,
            vocab: model.vocab,
            d_model: model.d_model,
            n_layers: model.n_layers,
            n_heads: model.n_heads,
            mlp_ratio: model.mlp_ratio,
            max_seq: model.max_seq,
            threads: 2,
            engine_threads: config.engine_threads(),
            warmup: 2,
            calls: 9,
        })
    }

    fn model(&self) -> anyhow::Result<TinyAgent> {
        let shapes = TrainStepShapes {
            vocab: self.vocab,
            d_model: self.d_model,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            mlp_ratio: self.mlp_ratio,
            max_seq: self.max_seq,
            ..TrainStepShapes::default_run()?
        };
        TinyAgent::new(shapes.model_config(), 0, &Device::Cpu)
    }
}

/// Times `shapes.calls` generate calls of the local engine after `shapes.warmup` untimed ones;
/// returns the median milliseconds per call.
pub fn time_local_engine(shapes: &SamplingShapes) -> anyhow::Result<f64> {
    let model = shapes.model()?;
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let requests: Vec<GenerateRequest> = (0..shapes.rows)
        .map(|row| GenerateRequest {
            prompt: (0..shapes.prompt_len)
                .map(|_| rng.random_range(0..shapes.vocab as u32))
                .collect(),
            seed: row as u64,
            // No session: every call prefills, as the PyTorch loop does.
            session: None,
        })
        .collect();
    let params = GenerateParams {
        sampling: SamplingParams::default(),
        max_tokens: shapes.new_tokens,
        stop: Vec::new(),
    };
    let mut engine = OnThreads::new(LocalEngine::new(&model), shapes.engine_threads)?;
    let mut times = Vec::new();
    for call in 0..shapes.warmup + shapes.calls {
        let start = Instant::now();
        let completions = engine.generate(&requests, &params)?;
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(
            completions
                .iter()
                .all(|c| c.tokens.len() == shapes.new_tokens),
            "bench sampling: a row stopped before {} tokens",
            shapes.new_tokens
        );
        if call >= shapes.warmup {
            times.push(elapsed);
        }
    }
    Ok(super::median(&mut times))
}

/// The JSON `bench sampling --json` prints.
#[derive(Debug, Serialize)]
pub struct SamplingReport {
    pub shapes: SamplingShapes,
    pub candle_ms: f64,
    /// Generated tokens per second (`rows × new_tokens` per call).
    pub candle_tokens_per_s: f64,
    pub candle_threads: usize,
    /// PyTorch at 2 threads (the reference figure) and at 1.
    #[serde(flatten)]
    pub torch: TorchSide,
    pub torch_tokens_per_s: Option<f64>,
    /// candle's tokens/s over PyTorch's (> 1: candle is faster).
    pub ratio: Option<f64>,
}

/// Runs both sides and prints the report.
pub fn run(json: bool) -> anyhow::Result<()> {
    let shapes = SamplingShapes::default_run()?;
    let candle_ms = time_local_engine(&shapes)?;
    let torch = super::time_baseline("bench_sampling.py", &shapes);
    let torch_ms = torch.torch_ms;
    let generated = (shapes.rows * shapes.new_tokens) as f64;
    let per_s = |ms: f64| generated / (ms / 1e3);
    let report = SamplingReport {
        candle_ms,
        candle_tokens_per_s: per_s(candle_ms),
        candle_threads: shapes.engine_threads,
        torch,
        torch_tokens_per_s: torch_ms.map(per_s),
        ratio: torch_ms.map(|t| t / candle_ms),
        shapes,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let s = &report.shapes;
    println!(
        "Rollout sampling: {} rows, {}-token prompts, {} new tokens each (TinyAgent d_model {}, {} layers, vocab {})",
        s.rows, s.prompt_len, s.new_tokens, s.d_model, s.n_layers, s.vocab
    );
    println!(
        "  local engine {:8.2} ms/call (median of {}, {} threads): {:.0} tokens/s",
        report.candle_ms, s.calls, report.candle_threads, report.candle_tokens_per_s
    );
    match (&report.torch.torch_ms, &report.torch.torch_error) {
        (Some(t), _) => {
            println!(
                "  torch loop   {t:8.2} ms/call (median of {}, {} threads, torch {}): {:.0} tokens/s",
                s.calls,
                report.torch.torch_threads.unwrap_or(0),
                report.torch.torch_version.as_deref().unwrap_or("?"),
                report.torch_tokens_per_s.unwrap_or(f64::NAN)
            );
            if let Some(one) = report.torch.torch_1thread_ms {
                println!("               (torch at 1 thread: {one:.2} ms/call)");
            }
            println!(
                "  ratio        {:8.2}x (torch / candle time; > 1: candle is faster)",
                report.ratio.unwrap_or(f64::NAN)
            );
        }
        (None, Some(err)) => println!(
            "  torch loop   unavailable ({err}); set AGENTRL_PYTHON to an interpreter with torch"
        ),
        (None, None) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timed_call_decodes_every_row_to_the_full_length() {
        let shapes = SamplingShapes {
            rows: 3,
            prompt_len: 5,
            new_tokens: 4,
            vocab: 11,
            d_model: 8,
            n_layers: 1,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 16,
            threads: 1,
            engine_threads: 1,
            warmup: 0,
            calls: 1,
        };
        assert!(time_local_engine(&shapes).unwrap() > 0.0);
        assert!(super::super::baseline_script("bench_sampling.py").exists());
    }
}
