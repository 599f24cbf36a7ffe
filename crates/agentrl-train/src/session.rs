//! A whole training session as `agentrl train` runs it: evaluate the untrained policy, train
//! with a progress bar (periodic evaluation and checkpoints), evaluate again, and print the
//! untrained → trained summary with the run directory's path.

use std::time::Instant;

use agentrl_gym::Split;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use agentrl_rollout::EvalReport;

use crate::recipes::rl::{StepRecord, Trainer};

/// Evaluation tags (seeds of the evaluation streams): before training, after, periodic.
const TAG_BEFORE: u64 = u64::MAX - 1;
const TAG_AFTER: u64 = u64::MAX - 2;

/// How a session reports and what it evaluates.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub progress: bool,
    /// Evaluate every split before and after training (the summary table).
    pub summary_evals: bool,
}

/// What a session produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionOutcome {
    pub run_dir: String,
    pub steps: usize,
    /// Evaluations of the untrained policy (empty when resuming or when skipped).
    pub before: Vec<EvalReport>,
    pub after: Vec<EvalReport>,
    /// Training time (rollouts + updates), excluding evaluations and checkpoints, seconds.
    pub train_seconds: f64,
    /// Whole session, seconds.
    pub wall_seconds: f64,
    /// Step at which the periodic train-split evaluation first reached
    /// `train.stop_at_solve_rate`, with the training seconds up to then.
    pub reached: Option<(usize, f64)>,
    pub last: Option<StepRecord>,
}

fn eval_all(trainer: &Trainer, tag: u64) -> anyhow::Result<Vec<EvalReport>> {
    let e = &trainer.config.eval;
    Split::ALL
        .into_iter()
        .map(|split| trainer.evaluate(split, e.samples, e.samples, e.temperature, tag))
        .collect()
}

/// Trains until `train.steps` (or the stop threshold), checkpointing as configured.
pub fn run_session(
    mut trainer: Trainer,
    options: &SessionOptions,
) -> anyhow::Result<SessionOutcome> {
    let started = Instant::now();
    let fresh = trainer.state.step == 0;
    let before = if options.summary_evals && fresh {
        eval_all(&trainer, TAG_BEFORE)?
    } else {
        Vec::new()
    };
    let total = trainer.config.train.steps;
    let bar = if options.progress {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_position(trainer.state.step as u64);
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut reached = None;
    let mut last = None;
    let stop_at = trainer.config.train.stop_at_solve_rate;
    while trainer.state.step < total {
        let mut record = trainer.step()?;
        let step = trainer.state.step;
        let eval_every = trainer.config.train.eval_every;
        if crate::every(step, eval_every) {
            let e = &trainer.config.eval;
            let report = trainer.evaluate(
                Split::Train,
                e.samples,
                e.samples,
                e.temperature,
                step as u64,
            )?;
            if stop_at > 0.0 && reached.is_none() && report.hidden_solve_rate >= stop_at {
                reached = Some((step, trainer.state.train_seconds));
            }
            record.eval = Some(report);
        }
        trainer.log(&record)?;
        let every = trainer.config.train.checkpoint_every;
        if crate::every(step, every) || step == total {
            trainer.checkpoint()?;
        }
        bar.set_position(step as u64);
        bar.set_message(format!(
            "reward {:.2}  hidden solve {:.2}  entropy {:.2}",
            record.reward, record.hidden_solve_rate, record.update.entropy
        ));
        last = Some(record);
        if reached.is_some() {
            if !crate::every(trainer.state.step, trainer.config.train.checkpoint_every) {
                trainer.checkpoint()?;
            }
            break;
        }
    }
    bar.finish_and_clear();
    let after = if options.summary_evals {
        eval_all(&trainer, TAG_AFTER)?
    } else {
        Vec::new()
    };
    let outcome = SessionOutcome {
        run_dir: trainer.run.root.display().to_string(),
        steps: trainer.state.step,
        before,
        after,
        train_seconds: trainer.state.train_seconds,
        wall_seconds: started.elapsed().as_secs_f64(),
        reached,
        last,
    };
    let json = serde_json::to_vec_pretty(&outcome)?;
    agentrl_run::write_atomic(&trainer.run.summary_path(), &json)?;
    Ok(outcome)
}

/// The untrained → trained table.
pub fn summary_table(outcome: &SessionOutcome) -> String {
    let mut out = String::new();
    let arrow = |before: Option<f64>, after: f64| match before {
        Some(b) => format!("{:>5.1}% → {:>5.1}%", 100.0 * b, 100.0 * after),
        None => format!("{:>16.1}%", 100.0 * after),
    };
    let k = outcome.after.first().map_or(1, |r| r.k);
    out.push_str(&format!(
        "{:<20} {:>17} {:>17} {:>17} {:>17} {:>17}\n",
        "split (hidden)",
        "solve rate",
        "pass@1",
        format!("pass@{k}"),
        "format errors",
        "hacking"
    ));
    for after in &outcome.after {
        let before = outcome.before.iter().find(|b| b.split == after.split);
        out.push_str(&format!(
            "{:<20} {:>17} {:>17} {:>17} {:>17} {:>17}\n",
            format!("{} ({})", after.split, after.tasks),
            arrow(before.map(|b| b.hidden_solve_rate), after.hidden_solve_rate),
            arrow(before.map(|b| b.pass_at_1), after.pass_at_1),
            arrow(before.map(|b| b.pass_at_k), after.pass_at_k),
            arrow(before.map(|b| b.format_error_rate), after.format_error_rate),
            arrow(before.map(|b| b.hacking_rate), after.hacking_rate),
        ));
    }
    out.push_str(&format!(
        "{} steps, wall time {:.1} s (training {:.1} s, the rest evaluation)\n",
        outcome.steps, outcome.wall_seconds, outcome.train_seconds
    ));
    out.push_str(&format!("run directory: {}\n", outcome.run_dir));
    out
}
