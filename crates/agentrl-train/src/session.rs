//! A whole training session as `agentrl train` runs it: evaluate the untrained policy, train
//! with progress reports (periodic evaluation and checkpoints), evaluate again, and print the
//! untrained → trained summary with the run directory's path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use agentrl_gym::Split;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use agentrl_rollout::EvalReport;
use agentrl_run::MetricLine;

use crate::step_record::StepRecord;
use crate::trainer::Trainer;

/// Evaluation tags (seeds of the evaluation streams): before training, after, periodic.
const TAG_BEFORE: u64 = u64::MAX - 1;
const TAG_AFTER: u64 = u64::MAX - 2;

/// How a session shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing.
    Off,
    /// A progress bar on stderr (for a terminal), with an ETA.
    Bar,
    /// A plain line on stderr every `every` steps and at the last (for logs, CI, nohup).
    Lines { every: usize },
}

impl Progress {
    /// Lines for a run of `steps` steps: about 50 of them at most.
    pub fn lines_for(steps: usize) -> Self {
        Progress::Lines {
            every: steps.div_ceil(50).max(1),
        }
    }
}

/// How a session reports and what it evaluates.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub progress: Progress,
    /// Evaluate every split before and after training (the summary table).
    pub summary_evals: bool,
    /// Set (e.g. by a Ctrl-C handler the binary installs) to stop after the current step
    /// with a checkpoint.
    pub stop: Option<&'static AtomicBool>,
}

/// What a session produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionOutcome {
    pub run_dir: String,
    pub steps: usize,
    /// Evaluations of the untrained policy (carried over from the run's earlier summary when
    /// resuming; empty when skipped).
    pub before: Vec<EvalReport>,
    pub after: Vec<EvalReport>,
    /// Splits with no tasks in the run's task folder (not evaluated).
    #[serde(default)]
    pub absent_splits: Vec<String>,
    /// Evaluation temperature of `before` and `after` (0 = greedy).
    #[serde(default)]
    pub eval_temperature: f64,
    /// Training time (rollouts + updates) of the whole run so far, excluding evaluations and
    /// checkpoints, seconds.
    pub train_seconds: f64,
    /// Training time of this session alone, seconds.
    #[serde(default)]
    pub session_train_seconds: f64,
    /// This session, seconds.
    pub wall_seconds: f64,
    /// Steps this session ran.
    #[serde(default)]
    pub session_steps: usize,
    /// Step at which the periodic train-split evaluation first reached
    /// `train.stop_at_solve_rate`, with the training seconds up to then.
    pub reached: Option<(usize, f64)>,
    pub last: Option<StepRecord>,
    /// Stopped early by [`SessionOptions::stop`] (a checkpoint of the last step was saved;
    /// no summary is written).
    #[serde(default)]
    pub interrupted: bool,
}

/// The splits that have tasks, and the names of those that have none.
fn present_splits(trainer: &Trainer) -> (Vec<Split>, Vec<String>) {
    let (present, absent): (Vec<Split>, Vec<Split>) = Split::ALL
        .into_iter()
        .partition(|&s| trainer.split_len(s) > 0);
    (
        present,
        absent.iter().map(|s| s.as_str().to_string()).collect(),
    )
}

fn eval_all(trainer: &Trainer, tag: u64) -> anyhow::Result<Vec<EvalReport>> {
    present_splits(trainer)
        .0
        .into_iter()
        .map(|split| {
            trainer
                .evaluate_for_run(split, tag)
                .with_context(|| format!("evaluating the {split} split"))
        })
        .collect()
}

/// The untrained evaluations of the run's earlier summary, if any (a resumed run keeps its
/// untrained column).
fn earlier_before(trainer: &Trainer) -> Vec<EvalReport> {
    std::fs::read(trainer.run.summary_path())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<SessionOutcome>(&bytes).ok())
        .map(|s| s.before)
        .unwrap_or_default()
}

/// The steps already in the run's earlier summary (its name when kept aside).
fn earlier_steps(trainer: &Trainer) -> Option<usize> {
    std::fs::read(trainer.run.summary_path())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|v| v.get("steps").and_then(|s| s.as_u64()))
        .map(|s| s as usize)
}

fn progress_bar(progress: Progress, total: usize, at: usize) -> ProgressBar {
    if progress != Progress::Bar {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps (eta {eta})  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(at as u64);
    bar.reset_eta();
    bar
}

/// `1 min 5 s`, `42 s`.
// Public for the integration tests (tests/train/session.rs).
#[doc(hidden)]
pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// What a session calls after each step's metrics are written: the run directory and the
/// step's line (the live doctor and dashboard of `agentrl train`).
pub type StepObserver<'a> = &'a mut dyn FnMut(&std::path::Path, &MetricLine) -> anyhow::Result<()>;

/// How a session advances its trainer by one training step: a recipe's step (RL's
/// `Trainer::step`, `recipes::sft::sft_step`, ...).
pub type TrainStep<'a> = &'a mut dyn FnMut(&mut Trainer) -> anyhow::Result<StepRecord>;

/// A whole session with a recipe's training step (`train_step`), calling `observer` after
/// each step's metrics line is written: evaluations, checkpoints, metrics and the summary are
/// the session's, whatever the step does.
pub fn run_recipe_session(
    mut trainer: Trainer,
    options: &SessionOptions,
    observer: StepObserver<'_>,
    train_step: TrainStep<'_>,
) -> anyhow::Result<SessionOutcome> {
    let started = Instant::now();
    let first_step = trainer.state.step;
    let train_seconds_before = trainer.state.train_seconds;
    let (_, absent_splits) = present_splits(&trainer);
    let before = if !options.summary_evals {
        Vec::new()
    } else if first_step == 0 {
        eval_all(&trainer, TAG_BEFORE)?
    } else {
        earlier_before(&trainer)
    };
    let total = trainer.config.train.steps;
    let bar = progress_bar(options.progress, total, first_step);
    let mut reached = None;
    let mut last = None;
    let mut interrupted = false;
    let stop_at = trainer.config.train.stop_at_solve_rate;
    let session_started = Instant::now();
    while trainer.state.step < total {
        if options.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            // Stopped before this session's first step (e.g. during the untrained
            // evaluation): the newest checkpoint already holds the state.
            interrupted = true;
            break;
        }
        let mut record = train_step(&mut trainer)
            .with_context(|| format!("training step {} of {total}", trainer.state.step + 1))?;
        let step = trainer.state.step;
        let eval_every = trainer.config.train.eval_every;
        if crate::every(step, eval_every) {
            let report = trainer
                .evaluate_for_run(Split::Train, step as u64)
                .with_context(|| format!("evaluating the train split at step {step}"))?;
            if stop_at > 0.0 && reached.is_none() && report.hidden_solve_rate >= stop_at {
                reached = Some((step, trainer.state.train_seconds));
            }
            record.eval = Some(report);
        }
        let line = trainer.log(&record)?;
        observer(&trainer.run.root, &line)?;
        let stop_now = options.stop.is_some_and(|s| s.load(Ordering::SeqCst));
        let every = trainer.config.train.checkpoint_every;
        let checkpointed = crate::every(step, every) || step == total;
        if checkpointed {
            trainer.checkpoint()?;
        }
        let message = match record.format_warmup_loss {
            // A supervised step samples nothing: its loss is the figure to watch.
            Some(loss) => format!("sft loss {loss:.3}"),
            // A recipe step that sampled nothing (DPO): its own figures.
            None if record.episodes == 0 && !record.recipe_metrics.is_empty() => record
                .recipe_metrics
                .iter()
                .filter(|(name, _)| name.ends_with("loss") || name.ends_with("margin"))
                .map(|(name, value)| format!("{name} {value:.3}"))
                .collect::<Vec<_>>()
                .join("  "),
            None => format!(
                "reward {:.2}  hidden solve {:.2}  entropy {:.2}",
                record.reward, record.hidden_solve_rate, record.update.entropy
            ),
        };
        bar.set_position(step as u64);
        bar.set_message(message.clone());
        if let Progress::Lines { every } = options.progress {
            if crate::every(step, every) || step == total || stop_now {
                let done = step - first_step;
                let per_step = session_started.elapsed().as_secs_f64() / done.max(1) as f64;
                eprintln!(
                    "step {step}/{total}  {message}  {per_step:.2} s/step  eta {}",
                    duration(per_step * (total - step) as f64)
                );
            }
        }
        last = Some(record);
        if reached.is_some() || stop_now {
            if !checkpointed {
                trainer.checkpoint()?;
            }
            interrupted = stop_now && reached.is_none();
            break;
        }
    }
    bar.finish_and_clear();
    let after = if options.summary_evals && !interrupted {
        eval_all(&trainer, TAG_AFTER)?
    } else {
        Vec::new()
    };
    let outcome = SessionOutcome {
        run_dir: trainer.run.root.display().to_string(),
        steps: trainer.state.step,
        before,
        after,
        absent_splits,
        eval_temperature: trainer.config.eval.temperature,
        train_seconds: trainer.state.train_seconds,
        session_train_seconds: trainer.state.train_seconds - train_seconds_before,
        wall_seconds: started.elapsed().as_secs_f64(),
        session_steps: trainer.state.step - first_step,
        reached,
        last,
        interrupted,
    };
    if !interrupted {
        let json = serde_json::to_vec_pretty(&outcome)?;
        trainer.run.write_summary(&json, earlier_steps(&trainer))?;
    }
    Ok(outcome)
}

/// `12.5→ 50.0%` (or `50.0%` without an untrained value): 12 columns.
fn arrow(before: Option<f64>, after: f64) -> String {
    match before {
        Some(b) => format!("{:>5.1}→{:>5.1}%", 100.0 * b, 100.0 * after),
        None => format!("{:>12}", format!("{:.1}%", 100.0 * after)),
    }
}

/// What the summary table's columns mean (printed under it).
pub const SUMMARY_LEGEND: &str = "\
pass@1: share of episodes whose hidden tests all pass (the solve rate)
pass@k: chance that at least one of k samples of a task solves it
format err: malformed or rejected actions, per action
hacking: episodes whose public tests pass while their hidden tests fail
";

/// The untrained → trained table, at most 80 columns wide, with the samples per task and the
/// temperature, a legend of the columns, and the run directory.
pub fn summary_table(outcome: &SessionOutcome) -> String {
    let mut out = String::new();
    let Some(first) = outcome.after.first() else {
        out.push_str(&footer(outcome));
        return out;
    };
    let k = first.k;
    let untrained = if outcome.before.is_empty() {
        ""
    } else {
        "untrained → trained, "
    };
    out.push_str(&format!(
        "hidden tests, {untrained}{} samples per task at temperature {}\n",
        first.samples, outcome.eval_temperature
    ));
    out.push_str(&format!(
        "{:<24} {:>12} {:>12} {:>12} {:>12}\n",
        "split (tasks)",
        "pass@1",
        format!("pass@{k}"),
        "format err",
        "hacking"
    ));
    for after in &outcome.after {
        let before = outcome.before.iter().find(|b| b.split == after.split);
        out.push_str(&format!(
            "{:<24} {:>12} {:>12} {:>12} {:>12}\n",
            format!("{} ({})", after.split, after.tasks),
            arrow(before.map(|b| b.pass_at_1), after.pass_at_1),
            arrow(before.map(|b| b.pass_at_k), after.pass_at_k),
            arrow(before.map(|b| b.format_error_rate), after.format_error_rate),
            arrow(before.map(|b| b.hacking_rate), after.hacking_rate),
        ));
    }
    for split in &outcome.absent_splits {
        out.push_str(&format!("{split:<24} no tasks in this task folder\n"));
    }
    out.push_str(SUMMARY_LEGEND);
    out.push_str(&footer(outcome));
    out
}

/// Steps, times and the run directory.
fn footer(outcome: &SessionOutcome) -> String {
    let resumed = outcome.session_steps != outcome.steps;
    let steps = if resumed {
        format!(
            "{} steps ({} in this session)",
            outcome.steps, outcome.session_steps
        )
    } else {
        format!("{} steps", outcome.steps)
    };
    let mut out = format!(
        "{steps}; wall time {:.1} s, of it training {:.1} s\n",
        outcome.wall_seconds, outcome.session_train_seconds
    );
    if resumed {
        out.push_str(&format!(
            "training time of the whole run: {:.1} s\n",
            outcome.train_seconds
        ));
    }
    out.push_str(&format!("run directory: {}\n", outcome.run_dir));
    out
}
