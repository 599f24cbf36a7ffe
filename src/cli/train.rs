//! `agentrl train` and `agentrl eval`: thin wrappers over `agentrl_train`.

use std::io::IsTerminal;
use std::path::PathBuf;

use agentrl_gym::Split;
use anyhow::Context;
use clap::Args;

use agentrl_monitor::eval_report::{build_report, EvalReportDoc, SplitInput, TaskCounts};
use agentrl_monitor::LiveMonitor;
use agentrl_train::build::{load_tasks, parse_split};
use agentrl_train::recipes::rl::run_rl_session_observed;
use agentrl_train::recipes::Recipe;
use agentrl_train::session::{
    summary_table, Progress, SessionOptions, SessionOutcome, StepObserver,
};
use agentrl_train::trainer::Trainer;
use agentrl_train::EvalSpec;

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[arg(long, value_name = "PRESET|FILE", help = super::presets::CONFIG_HELP)]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. `--set optim.lr=1e-3` (repeatable; value parsed as TOML).
    /// With --resume, only the keys a resume may change (train.steps, eval and logging
    /// knobs); each change is recorded in the run's config_changes.jsonl.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Train the model in this folder (config.json, model.safetensors, tokenizer.json, chat
    /// template) or GGUF file (`smollm2`: the file scripts/fetch_smollm2.sh fetched): sets
    /// model.kind = "qwen3" and model.dir. Nothing is downloaded.
    #[arg(long, value_name = "DIR|FILE.gguf", conflicts_with = "resume")]
    pub model: Option<PathBuf>,
    /// Continue the run in this directory from its latest checkpoint.
    #[arg(long, value_name = "RUN", conflicts_with = "config")]
    pub resume: Option<PathBuf>,
    /// Skip the untrained/trained evaluations and the summary table.
    #[arg(long)]
    pub no_summary: bool,
    /// Print the outcome as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print the fully resolved config (every knob written out) as TOML and exit.
    #[arg(long, conflicts_with = "resume")]
    pub print_config: bool,
    /// Start from the weights of this run's newest checkpoint (e.g. an `agentrl sft` run),
    /// with a fresh optimizer and step counter.
    #[arg(long, value_name = "RUN", conflicts_with = "resume")]
    pub init: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run directory to evaluate (its latest checkpoint). Read-only: safe on a live run;
    /// the results are also written to RUN/eval/.
    #[arg(value_name = "RUN", required_unless_present = "run_flag")]
    pub run: Option<PathBuf>,
    /// The run directory, as a flag (`agentrl eval --run RUN` = `agentrl eval RUN`).
    #[arg(
        long = "run",
        value_name = "RUN",
        conflicts_with = "run",
        hide_short_help = true
    )]
    pub run_flag: Option<PathBuf>,
    /// Split to evaluate: train, heldout or heldout-family (default: every split with tasks).
    #[arg(long)]
    pub split: Option<String>,
    /// pass@k's k; also the number of samples per task (at least the config's eval.samples).
    #[arg(long)]
    pub k: Option<usize>,
    /// Samples per task (default: 10, or --k, and at least the config's eval.samples): the
    /// report's pass@k and pass^k need n ≥ k samples, so 10 gives k = 1, 5 and 10.
    #[arg(long)]
    pub samples: Option<usize>,
    /// Sampling temperature (0 = greedy; default: the run's eval.temperature).
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Print the reports as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn train(args: TrainArgs) -> anyhow::Result<()> {
    run_recipe(args, None, Recipe::Rl, &mut |trainer, options, observer| {
        run_rl_session_observed(trainer, options, observer)
    })
}

/// A recipe's session (RL's, SFT's) over a trainer, with its options and step observer.
pub type RecipeSession<'a> =
    &'a mut dyn FnMut(Trainer, &SessionOptions, StepObserver<'_>) -> anyhow::Result<SessionOutcome>;

/// What `train` and `sft` share: the config (or the resumed run), `--init`, the header, the
/// live monitor, the session of the recipe (`session`), the dashboard and the report.
/// `method` names the recipe in the header (`None`: the run's RL algorithm); `recipe` says
/// which config keys it reads, so that a `--set` it would ignore is refused.
pub fn run_recipe(
    mut args: TrainArgs,
    method: Option<&str>,
    recipe: Recipe,
    session: RecipeSession<'_>,
) -> anyhow::Result<()> {
    recipe.refuse_unread_overrides(&args.set)?;
    if let Some(dir) = &args.model {
        let dir = dir
            .to_str()
            .with_context(|| format!("--model {}: the path is not valid UTF-8", dir.display()))?;
        // Before the user's --set, so an explicit --set still wins.
        let mut set = vec![
            "model.kind=\"qwen3\"".to_string(),
            format!("model.dir={}", serde_json::to_string(dir)?),
        ];
        set.append(&mut args.set);
        args.set = set;
    }
    if args.print_config {
        let config = super::presets::load(args.config.as_deref(), &args.set)?;
        // Validated as `train` would: a config it would refuse is refused here too.
        for w in config.validated()? {
            eprintln!("warning: {w}");
        }
        print!("{}", super::print_config::with_unset_knobs(&config)?);
        return Ok(());
    }
    // From here on a Ctrl-C is acknowledged at once and stops the session between steps
    // (loading a model or the untrained evaluation included), leaving a run directory.
    let stop = super::catch_interrupts();
    let mut trainer = match &args.resume {
        Some(run) => {
            let trainer = Trainer::resume(run, &args.set)?;
            eprintln!(
                "resuming {} at step {} of {}",
                run.display(),
                trainer.state.step,
                trainer.config.train.steps
            );
            trainer
        }
        None => {
            let config = super::presets::load(args.config.as_deref(), &args.set)?;
            let (trainer, warnings) = Trainer::create(config)?;
            for w in warnings {
                eprintln!("warning: {w}");
            }
            trainer
        }
    };
    if let Some(from) = &args.init {
        match trainer.init_weights_from(from) {
            Ok(checkpoint) => {
                eprintln!("starting from the weights of {}", checkpoint.display())
            }
            Err(err) => {
                // The run never started: take back the directory that holds only its config.
                let _ = std::fs::remove_dir_all(&trainer.run.root);
                return Err(err);
            }
        }
    }
    let split = parse_split(&trainer.config.rollout.split)?;
    let r = &trainer.config.rollout;
    let split_len = trainer.split_len(split);
    let trained = trainer.train_task_ids().len();
    let task_count = if trained == split_len {
        format!("{split_len} tasks")
    } else {
        format!("{trained} of its {split_len} tasks, rollout.task_ids")
    };
    eprintln!(
        "training {} with {} on the {} split ({task_count}): {} x {} \
         episodes (tasks x group) per step, {} steps",
        trainer.describe_policy(),
        method.map_or_else(|| trainer.algorithm.to_string(), str::to_string),
        r.split,
        r.tasks_per_step,
        r.group_size,
        trainer.config.train.steps
    );
    eprintln!("run directory: {}", trainer.run.root.display());
    if let Some(note) = &trainer.engine_amx().note {
        eprintln!("{note}");
    }
    let progress = if std::io::stderr().is_terminal() {
        Progress::Bar
    } else {
        Progress::lines_for(trainer.config.train.steps)
    };
    let options = SessionOptions {
        progress,
        summary_evals: !args.no_summary,
        stop: Some(stop),
    };
    // The live monitor: the doctor warns as a signature appears (train.doctor), and the
    // dashboard is rewritten every train.dashboard_every steps.
    let mut monitor = LiveMonitor::new(
        trainer.config.train.doctor,
        trainer.config.train.dashboard_every,
    );
    let outcome = session(trainer, &options, &mut |run, line| {
        for finding in monitor.on_step(run, line)? {
            eprintln!(
                "warning: doctor at step {}: {}",
                line.step,
                finding.render().trim_end()
            );
        }
        Ok(())
    })?;
    // The dashboard of the whole run; a run that cannot take it still reports its outcome.
    let dashboard = match monitor.write(std::path::Path::new(&outcome.run_dir)) {
        Ok(path) => Some(path),
        Err(err) => {
            eprintln!("warning: dashboard not written: {err:#}");
            None
        }
    };
    if outcome.interrupted && outcome.session_steps == 0 {
        eprintln!(
            "interrupted before the first step; nothing new to save\ncontinue with: agentrl \
             train --resume {}",
            outcome.run_dir
        );
        std::process::exit(130);
    }
    if outcome.interrupted {
        eprintln!(
            "interrupted after step {}; checkpoint saved in {}/checkpoints/step_{:06}\n\
             continue with: agentrl train --resume {}",
            outcome.steps, outcome.run_dir, outcome.steps, outcome.run_dir
        );
        std::process::exit(130);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else if args.no_summary {
        println!(
            "{} steps; run directory: {}",
            outcome.steps, outcome.run_dir
        );
    } else {
        print!("{}", summary_table(&outcome));
    }
    if let Some(path) = dashboard {
        if args.json {
            eprintln!("dashboard: {}", path.display());
        } else {
            println!("dashboard: {}", path.display());
        }
    }
    Ok(())
}

/// Samples per task of `agentrl eval` with no flags: enough for pass@10 and pass^10.
const DEFAULT_EVAL_SAMPLES: usize = 10;

/// What `eval` writes to RUN/eval/ and prints with --json.
#[derive(Debug, serde::Serialize)]
struct EvalOutput<'a> {
    run_dir: String,
    step: usize,
    samples: usize,
    k: usize,
    temperature: f64,
    absent_splits: Vec<String>,
    reports: &'a [agentrl_rollout::EvalReport],
    /// pass@k and pass^k for k in {1, 5, 10} with bootstrap intervals, per family (also
    /// written as Markdown beside the JSON).
    report: &'a EvalReportDoc,
}

/// The per-task counts of the evaluated splits, with each task's family.
fn report_inputs(
    trainer: &Trainer,
    reports: &[agentrl_rollout::EvalReport],
) -> anyhow::Result<Vec<SplitInput>> {
    let tasks = load_tasks(&trainer.config)?;
    reports
        .iter()
        .map(|r| {
            let tasks = r
                .per_task
                .iter()
                .map(|(id, rate)| {
                    Ok(TaskCounts {
                        task: id.clone(),
                        family: tasks.get(id)?.family.clone(),
                        samples: r.samples,
                        solved: (rate * r.samples as f64).round() as usize,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(SplitInput {
                split: r.split.clone(),
                tasks,
                hidden_solve_rate: r.hidden_solve_rate,
                public_solve_rate: r.public_solve_rate,
                hacking_rate: r.hacking_rate,
                format_error_rate: r.format_error_rate,
            })
        })
        .collect()
}

pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    let run = args
        .run
        .as_ref()
        .or(args.run_flag.as_ref())
        .context("the run to evaluate: agentrl eval RUN")?;
    let trainer = Trainer::open_for_eval(run)?;
    if trainer.state.step == 0 {
        eprintln!(
            "warning: {} has no checkpoint; evaluating the untrained policy",
            run.display()
        );
    }
    let (splits, absent): (Vec<Split>, Vec<Split>) = match &args.split {
        Some(name) => (vec![parse_split(name)?], Vec::new()),
        None => Split::ALL
            .into_iter()
            .partition(|&s| trainer.split_len(s) > 0),
    };
    let absent: Vec<String> = absent.iter().map(|s| s.as_str().to_string()).collect();
    let k = args.k.unwrap_or(trainer.config.eval.samples);
    anyhow::ensure!(k >= 1, "--k must be >= 1");
    // The report's pass@k and pass^k, k in {1, 5, 10}, by the unbiased estimator need n ≥ k
    // samples per task: 10 unless told otherwise (--samples, or --k).
    let samples = match (args.samples, args.k) {
        (Some(n), _) => {
            anyhow::ensure!(n >= k, "--samples {n} must be at least --k {k}");
            n
        }
        (None, Some(_)) => k.max(trainer.config.eval.samples),
        (None, None) => DEFAULT_EVAL_SAMPLES.max(trainer.config.eval.samples),
    };
    let temperature = args.temperature.unwrap_or(trainer.config.eval.temperature);
    anyhow::ensure!(
        temperature.is_finite() && temperature >= 0.0,
        "--temperature {temperature} must be >= 0 (0 = greedy)"
    );
    let mut reports = Vec::new();
    for split in splits {
        reports.push(trainer.evaluate(&EvalSpec {
            split,
            max_tasks: None,
            samples_per_task: samples,
            k,
            temperature,
            seed: u64::MAX - 3,
        })?);
    }
    let report = build_report(
        &run.display().to_string(),
        trainer.state.step,
        temperature,
        &report_inputs(&trainer, &reports)?,
    )?;
    let output = EvalOutput {
        run_dir: run.display().to_string(),
        step: trainer.state.step,
        samples,
        k,
        temperature,
        absent_splits: absent,
        reports: &reports,
        report: &report,
    };
    let json = serde_json::to_string_pretty(&output)?;
    // The results also go to new files under RUN/eval/; a run folder that cannot take them
    // (read-only media) still gets its evaluation printed.
    let saved = match trainer.run.write_eval_report(
        trainer.state.step,
        json.as_bytes(),
        &report.to_markdown(),
    ) {
        Ok((json_path, md_path)) => {
            eprintln!(
                "results saved to {} and {}",
                json_path.display(),
                md_path.display()
            );
            Some(md_path)
        }
        Err(err) => {
            eprintln!("warning: results not saved: {err:#}");
            None
        }
    };
    if args.json {
        println!("{json}");
        return Ok(());
    }
    print!(
        "{}",
        eval_table(&output, args.k.is_some(), saved.as_deref())
    );
    Ok(())
}

/// The terminal's report of `agentrl eval`: pass@k and pass^k for k in {1, 5, 10} with their
/// 95% intervals per split (a `--k` the command was given gets its column when it is another
/// k), format errors and hacking, and where the full report (per family, public vs hidden) is.
fn eval_table(output: &EvalOutput, asked_k: bool, markdown: Option<&std::path::Path>) -> String {
    use std::fmt::Write as _;
    let report = output.report;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} at step {} ({} samples per task, temperature {}, hidden tests; [low, high] = \
         95% bootstrap interval over tasks)",
        output.run_dir, output.step, output.samples, output.temperature
    );
    let extra_k = (asked_k && !report.ks.contains(&output.k)).then_some(output.k);
    let cell = |e: Option<&agentrl_monitor::eval_report::Estimate>| match e {
        Some(e) => format!(
            "{:.1}% [{:.1}, {:.1}]",
            100.0 * e.value,
            100.0 * e.low,
            100.0 * e.high
        ),
        None => "-".into(),
    };
    for (title, hat) in [
        ("pass@k: at least one of k samples solves the task", false),
        ("pass^k: all k samples solve it (reliability)", true),
    ] {
        let _ = writeln!(out, "\n{title}");
        let mut header = format!("{:<16} {:>5}", "split", "tasks");
        for k in &report.ks {
            let _ = write!(
                header,
                "  {:>20}",
                format!("{}{k}", if hat { "pass^" } else { "pass@" })
            );
        }
        if let (Some(k), false) = (extra_k, hat) {
            let _ = write!(header, "  {:>8}", format!("pass@{k}"));
        }
        if !hat {
            let _ = write!(header, "  {:>10} {:>8}", "format err", "hacking");
        }
        let _ = writeln!(out, "{}", header.trim_end());
        for (split, r) in report.splits.iter().zip(output.reports) {
            let scores = if hat {
                &split.scores.pass_hat
            } else {
                &split.scores.pass_at
            };
            let mut row = format!("{:<16} {:>5}", split.split, split.scores.tasks);
            for k in &report.ks {
                let _ = write!(row, "  {:>20}", cell(scores.get(k)));
            }
            if let (Some(_), false) = (extra_k, hat) {
                let _ = write!(row, "  {:>7.1}%", 100.0 * r.pass_at_k);
            }
            if !hat {
                let _ = write!(
                    row,
                    "  {:>9.1}% {:>7.1}%",
                    100.0 * split.format_error_rate,
                    100.0 * split.hacking_rate
                );
            }
            let _ = writeln!(out, "{row}");
        }
    }
    for split in &output.absent_splits {
        let _ = writeln!(out, "{split:<16} no tasks in this run's task folder");
    }
    if !report.ks_skipped.is_empty() {
        let skipped: Vec<String> = report.ks_skipped.iter().map(|k| k.to_string()).collect();
        let _ = writeln!(
            out,
            "k = {} left out: they need at least that many samples per task (--samples)",
            skipped.join(", ")
        );
    }
    match markdown {
        Some(path) => {
            let _ = writeln!(
                out,
                "full report (per family, public vs hidden tests): {}",
                path.display()
            );
        }
        None => {
            let _ = writeln!(out, "full report: not saved (see the warning above)");
        }
    }
    out
}
