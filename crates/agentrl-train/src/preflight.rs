//! The mismatch preflight: before the first step, the engine samples a small batch and the
//! trainer scores the same tokens, and a run whose engine samples by other semantics than
//! the trainer assumes is refused with the cause named (ALGORITHMS.md §13,
//! `../shared/ENGINES.md` "Traps for the preflight").
//!
//! Where it sits: between building the engine (local or a server) and the first rollout of
//! [`crate::trainer::Trainer`]. It never changes the weights.
//!
//! **How causes are told apart.** For every sampled token the trainer computes what the
//! engine *should* have reported under several hypotheses, from its own logits `z`:
//! - the config's semantics (`engine.logprobs` at `sampling.temperature`, `top_k`, `top_p`);
//! - raw log-probs `log softmax(z)` (vLLM's default `raw_logprobs`);
//! - temperature-scaled log-probs at the temperature that best fits the engine's numbers
//!   (a temperature the server applied that the config did not);
//! - processed log-probs at the config's and at the model folder's `generation_config.json`
//!   settings (what a server fills in for parameters a request leaves out).
//!
//! The hypothesis with the smallest mean |gap| names the semantics. Independently, the
//! sampled tokens' ranks show a truncation the config did not ask for: when every sampled
//! token sits in the trainer's top-k although the config's distribution would have put
//! some outside it with near certainty, the engine truncated. When no hypothesis comes close,
//! the engine's weights are not the trainer's (a sync that never happened). A small gap
//! under the expected hypothesis is numeric drift (bf16, other kernels): reported, never
//! refused.

use agentrl_engine::{
    kept_tokens, Engine, GenerateParams, GenerateRequest, LogprobKind, SamplingParams,
};
use agentrl_model::Policy;
use anyhow::Context;
use candle_core::Tensor;
use serde::Serialize;

/// Mean |gap| (nats per token) under which the expected semantics count as matched; above
/// it, and well above another hypothesis, the semantics disagree.
const SEMANTIC_GAP: f64 = 0.05;
/// Mean |gap| above which no hypothesis explains the engine: other weights.
const WEIGHTS_GAP: f64 = 0.5;
/// Probability below which "every sampled token fell in the top-k" is called a truncation.
const TRUNCATION_EVIDENCE: f64 = 1e-4;

/// What the preflight samples and how it compares.
#[derive(Debug, Clone)]
pub struct PreflightSetup {
    /// Prompts to continue (a few tasks' first prompts).
    pub prompts: Vec<Vec<u32>>,
    /// The config's sampling parameters (what the engine is asked to do).
    pub sampling: SamplingParams,
    pub stop: Vec<u32>,
    pub max_tokens: usize,
    /// The log-probs the config says the engine returns (`engine.logprobs`).
    pub declared: LogprobKind,
    /// The model folder's `generation_config.json` sampling defaults, if it has one.
    pub model_defaults: Option<SamplingParams>,
    pub seed: u64,
}

/// One hypothesis about the engine's log-probs and how well it fits.
#[derive(Debug, Clone, Serialize)]
pub struct Hypothesis {
    pub name: String,
    /// Mean |log p_engine − log p_hypothesis| over the sampled tokens.
    pub mean_abs_gap: f64,
}

/// What the preflight measured.
#[derive(Debug, Clone, Serialize)]
pub struct PreflightReport {
    /// Sampled tokens compared.
    pub tokens: usize,
    /// The config's semantics and their fit: the engine/trainer numeric drift when it holds.
    pub expected: Hypothesis,
    /// Every hypothesis, best first.
    pub hypotheses: Vec<Hypothesis>,
    /// The temperature whose scaled log-probs fit the engine best.
    pub fitted_temperature: f64,
    /// A truncation the config did not ask for, seen in the sampled tokens' ranks.
    pub unrequested_truncation: Option<String>,
    /// The engine's claimed semantics (from its completions).
    pub reported_kind: LogprobKind,
    /// Why the run must not start; `None` when it may.
    pub refusal: Option<String>,
}

impl PreflightReport {
    /// `Err` naming the cause when the run must not start.
    pub fn check(&self) -> anyhow::Result<()> {
        match &self.refusal {
            Some(reason) => anyhow::bail!("engine preflight failed: {reason}\n{}", self.table()),
            None => Ok(()),
        }
    }

    /// The hypotheses and their fits, one per line.
    pub fn table(&self) -> String {
        let mut out = format!(
            "  {} sampled tokens compared; mean |gap| per token:\n",
            self.tokens
        );
        for h in &self.hypotheses {
            out.push_str(&format!("    {:<52} {:.4}\n", h.name, h.mean_abs_gap));
        }
        out
    }

    /// One line for the run's log.
    pub fn summary(&self) -> String {
        format!(
            "engine preflight: {} tokens, engine/trainer drift {:.2e} nats/token under {}",
            self.tokens, self.expected.mean_abs_gap, self.expected.name
        )
    }
}

/// Samples `setup.prompts` with `engine`, scores the tokens with `policy`, and compares.
pub fn preflight(
    engine: &mut dyn Engine,
    policy: &dyn Policy,
    setup: &PreflightSetup,
) -> anyhow::Result<PreflightReport> {
    anyhow::ensure!(!setup.prompts.is_empty(), "preflight: no prompts to sample");
    let requests: Vec<GenerateRequest> = setup
        .prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| GenerateRequest {
            prompt: prompt.clone(),
            seed: setup.seed.wrapping_add(i as u64),
            session: None,
        })
        .collect();
    let params = GenerateParams {
        sampling: setup.sampling.clone(),
        max_tokens: setup.max_tokens,
        stop: setup.stop.clone(),
    };
    let completions = engine
        .generate(&requests, &params)
        .context("preflight: sampling with the engine")?;
    let reported_kind = completions
        .first()
        .map_or(setup.declared, |c| c.logprob_kind);

    // Per sampled token: the engine's log-prob and the trainer's logits row.
    let mut tokens: Vec<(u32, f64, Vec<f32>)> = Vec::new();
    for (request, completion) in requests.iter().zip(&completions) {
        anyhow::ensure!(
            completion.tokens.len() == completion.logprobs.len(),
            "preflight: the engine returned {} tokens with {} log-probs",
            completion.tokens.len(),
            completion.logprobs.len()
        );
        if completion.tokens.is_empty() {
            continue;
        }
        let mut ids = request.prompt.clone();
        ids.extend(&completion.tokens);
        let n = ids.len();
        let start = request.prompt.len() - 1;
        let positions: Vec<u32> = (start..n - 1).map(|p| p as u32).collect();
        let count = positions.len();
        let device = policy.device();
        let input = Tensor::from_vec(ids, (1, n), device)?;
        let positions = Tensor::from_vec(positions, count, device)?;
        let rows = policy
            .forward_at(&input, &positions)
            .context("preflight: trainer forward")?
            .logits
            .to_dtype(candle_core::DType::F32)?
            .to_vec2::<f32>()?;
        for ((row, &token), &logprob) in rows
            .into_iter()
            .zip(&completion.tokens)
            .zip(&completion.logprobs)
        {
            tokens.push((token, f64::from(logprob), row));
        }
    }
    anyhow::ensure!(
        !tokens.is_empty(),
        "preflight: the engine sampled no tokens"
    );
    Ok(compare(&tokens, setup, reported_kind))
}

/// Log-prob of `token` under `row` with `params` applied as `kind` describes.
fn hypothesis_logprob(row: &[f32], token: u32, params: &SamplingParams, kind: LogprobKind) -> f64 {
    let token = token as usize;
    match kind {
        LogprobKind::Raw => log_softmax_at(row, 1.0, token),
        LogprobKind::TemperatureScaled => log_softmax_at(row, params.temperature, token),
        LogprobKind::Processed => {
            let logp = agentrl_engine::scaled_log_softmax(row, params.temperature);
            let kept = kept_tokens(&logp, params);
            if !kept.contains(&token) {
                // The hypothesis says this token could not have been sampled.
                return f64::NEG_INFINITY;
            }
            let mass: f64 = kept.iter().map(|&i| logp[i].exp()).sum();
            logp[token] - mass.ln()
        }
    }
}

/// `log softmax(row / t)[token]`, without building the whole vector.
// Public for the integration tests (tests/train/preflight.rs).
#[doc(hidden)]
pub fn log_softmax_at(row: &[f32], temperature: f64, token: usize) -> f64 {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64 / t;
    let sum: f64 = row.iter().map(|&x| (x as f64 / t - max).exp()).sum();
    row[token] as f64 / t - max - sum.ln()
}

/// A gap that stays finite when a hypothesis rules a sampled token out.
fn gap(engine: f64, hypothesis: f64) -> f64 {
    if hypothesis.is_finite() {
        (engine - hypothesis).abs()
    } else {
        30.0
    }
}

fn mean_gap(tokens: &[(u32, f64, Vec<f32>)], params: &SamplingParams, kind: LogprobKind) -> f64 {
    tokens
        .iter()
        .map(|(token, logprob, row)| gap(*logprob, hypothesis_logprob(row, *token, params, kind)))
        .sum::<f64>()
        / tokens.len() as f64
}

fn kind_name(kind: LogprobKind) -> &'static str {
    match kind {
        LogprobKind::Raw => "raw",
        LogprobKind::TemperatureScaled => "temperature-scaled",
        LogprobKind::Processed => "processed",
    }
}

fn describe(kind: LogprobKind, p: &SamplingParams) -> String {
    match kind {
        LogprobKind::Raw => "raw: log softmax(z), no temperature".to_string(),
        LogprobKind::TemperatureScaled => {
            format!("temperature-scaled at T = {}", p.temperature)
        }
        LogprobKind::Processed => format!(
            "processed at T = {}, top_k = {}, top_p = {}",
            p.temperature, p.top_k, p.top_p
        ),
    }
}

/// Compares sampled tokens, each `(token, engine log-prob, trainer logits row)`, against the
/// hypotheses about the engine's log-probs ([`preflight`]'s verdict once it has sampled);
/// `reported_kind` is the semantics the engine claims.
pub fn compare(
    tokens: &[(u32, f64, Vec<f32>)],
    setup: &PreflightSetup,
    reported_kind: LogprobKind,
) -> PreflightReport {
    let config = &setup.sampling;
    let expected = Hypothesis {
        name: format!("config: {}", describe(setup.declared, config)),
        mean_abs_gap: mean_gap(tokens, config, setup.declared),
    };
    // The temperature that fits best: a coarse grid, then a fine one around its best point
    // (fine enough to name a wrong setting to two decimals).
    let fit = |t: f64| {
        let p = SamplingParams {
            temperature: t,
            ..config.clone()
        };
        (t, mean_gap(tokens, &p, LogprobKind::TemperatureScaled))
    };
    let best_of = |grid: Vec<f64>| {
        grid.into_iter()
            .map(fit)
            .fold((config.temperature, f64::INFINITY), |a, b| {
                if b.1 < a.1 {
                    b
                } else {
                    a
                }
            })
    };
    let coarse = best_of((1..=30).map(|i| f64::from(i) * 0.1).collect());
    let fitted = best_of(
        (-10..=10)
            .map(|i| coarse.0 + f64::from(i) * 0.01)
            .filter(|&t| t > 0.0)
            .collect(),
    );
    let mut hypotheses = vec![
        expected.clone(),
        Hypothesis {
            name: describe(LogprobKind::Raw, config),
            mean_abs_gap: mean_gap(tokens, config, LogprobKind::Raw),
        },
        Hypothesis {
            name: format!("temperature-scaled at the best-fitting T = {:.2}", fitted.0),
            mean_abs_gap: fitted.1,
        },
        Hypothesis {
            name: describe(LogprobKind::Processed, config),
            mean_abs_gap: mean_gap(tokens, config, LogprobKind::Processed),
        },
    ];
    if let Some(defaults) = &setup.model_defaults {
        for kind in [LogprobKind::Processed, LogprobKind::TemperatureScaled] {
            hypotheses.push(Hypothesis {
                name: format!(
                    "generation_config.json defaults, {}",
                    describe(kind, defaults)
                ),
                mean_abs_gap: mean_gap(tokens, defaults, kind),
            });
        }
    }
    hypotheses.sort_by(|a, b| a.mean_abs_gap.total_cmp(&b.mean_abs_gap));
    let best = hypotheses[0].clone();

    let unrequested_truncation = truncation_evidence(tokens, config);
    let refusal = if let Some(truncation) = &unrequested_truncation {
        Some(format!(
            "{truncation}, but the config samples with top_k = {}, top_p = {} (a server fills \
             parameters a request leaves out from the model's generation_config.json: send \
             every sampling parameter, or set [sampling] to what the server does)",
            config.top_k, config.top_p
        ))
    } else if best.mean_abs_gap > WEIGHTS_GAP {
        Some(format!(
            "the engine's log-probs match no sampling semantics under the trainer's weights \
             (best fit: {}, {:.3} nats/token off): the engine is not sampling with the \
             trainer's weights (a weight sync that never happened, or another model)",
            best.name, best.mean_abs_gap
        ))
    } else if expected.mean_abs_gap > SEMANTIC_GAP
        && best.mean_abs_gap < expected.mean_abs_gap / 4.0
    {
        Some(format!(
            "the engine's log-probs are {} ({:.4} nats/token off), not what the config says \
             ({}; {:.4} off). The trainer scores log softmax(z / T) over the full \
             vocabulary: make the server return those (vLLM: --logprobs-mode \
             processed_logprobs without top-k/top-p; SGLang's default), or send the \
             temperature the config names",
            best.name, best.mean_abs_gap, expected.name, expected.mean_abs_gap
        ))
    } else if setup.declared != LogprobKind::TemperatureScaled
        && (config.temperature - 1.0).abs() > 1e-9
        && setup.declared != LogprobKind::Processed
    {
        Some(format!(
            "engine.logprobs = \"{}\" at sampling.temperature = {}: the engine's log-probs are \
             not the distribution it sampled from, so every ratio against them is biased \
             (TRL #4159). Have the server return temperature-scaled or processed log-probs",
            kind_name(setup.declared),
            config.temperature
        ))
    } else {
        None
    };
    PreflightReport {
        tokens: tokens.len(),
        expected,
        hypotheses,
        fitted_temperature: fitted.0,
        unrequested_truncation,
        reported_kind,
        refusal,
    }
}

/// A top-k the config did not ask for: every sampled token ranks within k under the trainer,
/// while the config's own distribution would have sampled outside the top k with
/// probability `1 − TRUNCATION_EVIDENCE` or more.
fn truncation_evidence(tokens: &[(u32, f64, Vec<f32>)], config: &SamplingParams) -> Option<String> {
    let ranks: Vec<usize> = tokens
        .iter()
        .map(|(token, _, row)| {
            let value = row[*token as usize];
            row.iter().filter(|&&x| x > value).count()
        })
        .collect();
    let max_rank = *ranks.iter().max()?;
    for k in [1usize, 5, 10, 20, 40, 50, 100] {
        if max_rank >= k || (config.top_k > 0 && config.top_k <= k) {
            continue;
        }
        // log P(all sampled tokens in the top k) under the config's distribution.
        let mut log_all_inside = 0.0;
        for (_, _, row) in tokens {
            let logp = agentrl_engine::scaled_log_softmax(row, config.temperature);
            let kept = kept_tokens(&logp, config);
            let kept_mass: f64 = kept.iter().map(|&i| logp[i].exp()).sum();
            let mut order = kept.clone();
            order.sort_by(|&a, &b| logp[b].total_cmp(&logp[a]));
            let top: f64 = order.iter().take(k).map(|&i| logp[i].exp()).sum();
            log_all_inside += (top / kept_mass).min(1.0).ln();
        }
        if log_all_inside < TRUNCATION_EVIDENCE.ln() {
            return Some(format!(
                "every one of the {} sampled tokens is among the trainer's top {k} (chance \
                 under the config's distribution: e^{log_all_inside:.1}): the engine \
                 truncated to top_k <= {k}",
                tokens.len()
            ));
        }
        return None;
    }
    None
}
