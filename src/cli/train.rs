//! `agentrl train` and `agentrl eval`: thin wrappers over `agentrl_train`.

use std::path::PathBuf;

use agentrl_gym::Split;
use clap::Args;

use agentrl_train::config::load_config;
use agentrl_train::recipes::rl::{parse_split, Trainer};
use agentrl_train::session::{run_session, summary_table, SessionOptions};

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Config file layered on configs/default.toml (built in); omit for the default run.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. `--set optim.lr=1e-3` (repeatable; value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Continue the run in this directory from its latest checkpoint.
    #[arg(long, value_name = "RUN", conflicts_with_all = ["config", "set"])]
    pub resume: Option<PathBuf>,
    /// Skip the untrained/trained evaluations and the summary table.
    #[arg(long)]
    pub no_summary: bool,
    /// Print the outcome as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print the fully resolved config (every knob written out) as TOML and exit.
    #[arg(long, conflicts_with = "resume")]
    pub print_config: bool,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run directory to evaluate (its latest checkpoint).
    #[arg(long)]
    pub run: PathBuf,
    /// Split to evaluate: train, heldout or heldout-family (default: all three).
    #[arg(long)]
    pub split: Option<String>,
    /// pass@k's k; also the number of samples per task (at least the config's eval.samples).
    #[arg(long)]
    pub k: Option<usize>,
    /// Sampling temperature (0 = greedy; default: the run's eval.temperature).
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long)]
    pub json: bool,
}

pub fn train(args: TrainArgs) -> anyhow::Result<()> {
    if args.print_config {
        let config = load_config(args.config.as_deref(), &args.set)?;
        print!("{}", config.to_toml()?);
        return Ok(());
    }
    let trainer = match &args.resume {
        Some(run) => {
            let trainer = Trainer::resume(run)?;
            eprintln!(
                "resuming {} at step {} of {}",
                run.display(),
                trainer.state.step,
                trainer.config.train.steps
            );
            trainer
        }
        None => {
            let config = load_config(args.config.as_deref(), &args.set)?;
            let (trainer, warnings) = Trainer::create(config)?;
            for w in warnings {
                eprintln!("warning: {w}");
            }
            trainer
        }
    };
    eprintln!(
        "training TinyAgent ({} parameters) with {} on the {} split: {} tasks x {} episodes per step, {} steps",
        trainer.model().num_parameters(),
        trainer.algorithm,
        trainer.config.rollout.split,
        trainer.config.rollout.tasks_per_step,
        trainer.config.rollout.group_size,
        trainer.config.train.steps
    );
    let options = SessionOptions {
        progress: !args.json,
        summary_evals: !args.no_summary,
    };
    let outcome = run_session(trainer, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print!("{}", summary_table(&outcome));
    }
    Ok(())
}

pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    let trainer = Trainer::resume(&args.run)?;
    if trainer.state.step == 0 {
        eprintln!(
            "warning: {} has no checkpoint; evaluating the untrained policy",
            args.run.display()
        );
    }
    let splits: Vec<Split> = match &args.split {
        Some(name) => vec![parse_split(name)?],
        None => Split::ALL.to_vec(),
    };
    let k = args.k.unwrap_or(trainer.config.eval.samples);
    anyhow::ensure!(k >= 1, "--k must be >= 1");
    let samples = k.max(trainer.config.eval.samples);
    let temperature = args.temperature.unwrap_or(trainer.config.eval.temperature);
    let mut reports = Vec::new();
    for split in splits {
        reports.push(trainer.evaluate(split, samples, k, temperature, u64::MAX - 3)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        println!(
            "{} at step {} ({} samples per task, temperature {temperature})",
            args.run.display(),
            trainer.state.step,
            samples
        );
        println!(
            "{:<16} {:>6} {:>10} {:>8} {:>8} {:>10} {:>8}",
            "split",
            "tasks",
            "solve",
            "pass@1",
            format!("pass@{k}"),
            "format err",
            "hacking"
        );
        for r in &reports {
            println!(
                "{:<16} {:>6} {:>9.1}% {:>7.1}% {:>7.1}% {:>9.1}% {:>7.1}%",
                r.split,
                r.tasks,
                100.0 * r.hidden_solve_rate,
                100.0 * r.pass_at_1,
                100.0 * r.pass_at_k,
                100.0 * r.format_error_rate,
                100.0 * r.hacking_rate
            );
        }
    }
    Ok(())
}
