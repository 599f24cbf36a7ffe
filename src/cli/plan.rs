//! `agentrl plan --config …`: where a training step's memory and tokens go, printed before
//! anything runs (`agentrl_train::plan`): weights, gradients, optimizer state, activations
//! per micro-batch and the rollout's KV cache, for TinyAgent or a Qwen3 `config.json`; with
//! `--throughput-from RUN`, the expected step time at that run's measured tokens/s; with
//! `--target-step-s T --costs-from RUN`, the gym servers and engines a step of at most `T`
//! seconds needs (`agentrl_train::fleet_plan`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use agentrl_model::qwen3::Qwen3Config;
use agentrl_train::config::ModelKind;
use agentrl_train::fleet_plan::{FleetPlan, MeasuredCosts};
use agentrl_train::plan::{ModelShape, StepPlan};

use super::presets::{self, Source};

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[arg(long, value_name = "PRESET|FILE", help = super::presets::CONFIG_HELP)]
    pub config: Option<PathBuf>,
    /// Override a config key (repeatable), as `agentrl train --set`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A Qwen3 model folder (its config.json is read; no weights are).
    #[arg(long, value_name = "DIR", conflicts_with = "model_config")]
    pub model: Option<PathBuf>,
    /// A Qwen3 config.json on its own, for a model you have not downloaded: a file, or the
    /// name of a shape in configs/models/ (compiled in: `qwen3-8b`).
    #[arg(long, value_name = "SHAPE|FILE")]
    pub model_config: Option<PathBuf>,
    /// A run whose measured throughput (median `perf/throughput`, tokens/s) gives the
    /// expected step time.
    #[arg(long, value_name = "RUN")]
    pub throughput_from: Option<PathBuf>,
    /// Also say how many gym servers and engines the step needs to take at most this many
    /// seconds, from the costs measured in --costs-from RUN.
    #[arg(long, value_name = "SECONDS", requires = "costs_from")]
    pub target_step_s: Option<f64>,
    /// A finished run (ideally of this config, on machines like the servers') whose measured
    /// gym, engine and update costs size the fleet.
    #[arg(long, value_name = "RUN", requires = "target_step_s")]
    pub costs_from: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let mut set = Vec::new();
    if let Some(dir) = &args.model {
        set.push("model.kind=\"qwen3\"".to_string());
        set.push(format!("model.dir={}", serde_json::to_string(dir)?));
    }
    set.extend(args.set.iter().cloned());
    let config = presets::load(args.config.as_deref(), &set)?;
    let shape = match (&args.model_config, config.model.kind) {
        (Some(value), _) => match presets::resolve_model_config(value)? {
            Source::File(file) => ModelShape::qwen3(&config, &file)?,
            Source::Preset(name, text) => ModelShape::qwen3_of(
                &config,
                &Qwen3Config::from_json(text)
                    .with_context(|| format!("parsing the built-in model shape {name}"))?,
            ),
        },
        (None, ModelKind::Qwen3) => ModelShape::of(&config)?,
        (None, ModelKind::Tiny) => ModelShape::tiny(&config)?,
    };
    let plan = StepPlan::new(&config, shape);
    let expected_step_s = match &args.throughput_from {
        Some(run) => Some(plan.tokens_per_step as f64 / median_throughput(run)?),
        None => None,
    };
    let fleet = match (&args.costs_from, args.target_step_s) {
        (Some(run), Some(target)) => Some(FleetPlan::new(
            MeasuredCosts::from_run(run)?,
            plan.episodes_per_step,
            target,
        )?),
        _ => None,
    };
    if args.json {
        let mut value = serde_json::to_value(&plan)?;
        value["step_peak"] = serde_json::json!(plan.peak(config.engine.async_rollouts));
        value["expected_step_s"] = serde_json::json!(expected_step_s);
        value["fleet"] = serde_json::to_value(&fleet)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    print!("{}", plan.table(config.engine.async_rollouts));
    match expected_step_s {
        Some(s) => println!(
            "  expected step time          {s:>10.1} s (≤ {} tokens at the run's median tokens/s)",
            plan.tokens_per_step
        ),
        None => println!(
            "  expected step time          unknown (pass --throughput-from RUN, a run of this \
             model on this machine)"
        ),
    }
    if let Some(fleet) = &fleet {
        print!("{}", fleet.table());
    }
    Ok(())
}

/// The median of `perf/throughput` (tokens/s) over a run's metrics.
fn median_throughput(run: &std::path::Path) -> anyhow::Result<f64> {
    let path = run.join("metrics.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut values: Vec<f64> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| v.get(agentrl_run::metrics::names::THROUGHPUT)?.as_f64())
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    anyhow::ensure!(
        !values.is_empty(),
        "{}: no step records perf/throughput",
        path.display()
    );
    values.sort_by(f64::total_cmp);
    Ok(values[values.len() / 2])
}
