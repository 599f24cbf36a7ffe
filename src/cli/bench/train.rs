//! `agentrl bench train`: the default run's training time to reach 90% hidden solve on the
//! train split, and the heldout solve rates at that point.
//!
//! Protocol: the default config (`configs/default.toml`), evaluated every `EVAL_EVERY` steps on
//! the whole train split with greedy decoding (temperature 0, one episode per task, so the
//! figure is deterministic for a seed). The reported time is training time only (rollouts and
//! updates); evaluations and checkpoint writes are excluded and reported separately in the
//! session's wall time. At the first evaluation at or above the target, training stops and the
//! heldout and heldout-family splits are evaluated the same way.

use agentrl_gym::Split;
use serde::Serialize;

use agentrl_train::config::load_config;
use agentrl_train::recipes::rl::run_rl_session;
use agentrl_train::session::{Progress, SessionOptions};
use agentrl_train::trainer::Trainer;
use agentrl_train::EvalSpec;

const TARGET: f64 = 0.9;
const EVAL_EVERY: usize = 2;

#[derive(Debug, Serialize)]
struct BenchTrain {
    target_train_solve_rate: f64,
    reached: bool,
    /// Training seconds (rollouts + updates) until the target was first measured.
    train_seconds_to_target: Option<f64>,
    steps_to_target: Option<usize>,
    steps_run: usize,
    train_seconds_total: f64,
    wall_seconds: f64,
    train_solve_rate: f64,
    heldout_solve_rate: f64,
    heldout_family_solve_rate: f64,
    threads: usize,
    eval_protocol: String,
    run_dir: String,
}

pub fn run(json: bool, extra_overrides: &[String]) -> anyhow::Result<()> {
    let mut overrides = vec![
        format!("train.eval_every={EVAL_EVERY}"),
        format!("train.stop_at_solve_rate={TARGET}"),
        "eval.samples=1".to_string(),
        "eval.temperature=0.0".to_string(),
        "train.episodes_every=0".to_string(),
    ];
    overrides.extend_from_slice(extra_overrides);
    let config = load_config(None, &overrides)?;
    let threads = config.threads();
    let (trainer, _warnings) = Trainer::create(config)?;
    let outcome = run_rl_session(
        trainer,
        &SessionOptions {
            progress: if json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                Progress::Off
            } else {
                Progress::Bar
            },
            summary_evals: false,
            stop: None,
        },
    )?;
    // Reload the run at its last checkpoint (where training stopped) for the heldout figures.
    let trainer = Trainer::open_for_eval(std::path::Path::new(&outcome.run_dir))?;
    let greedy = |split| {
        trainer.evaluate(&EvalSpec {
            split,
            max_tasks: None,
            samples_per_task: 1,
            k: 1,
            temperature: 0.0,
            seed: u64::MAX - 4,
        })
    };
    let train = greedy(Split::Train)?;
    let heldout = greedy(Split::Heldout)?;
    let family = greedy(Split::HeldoutFamily)?;
    let report = BenchTrain {
        target_train_solve_rate: TARGET,
        reached: outcome.reached.is_some(),
        train_seconds_to_target: outcome.reached.map(|(_, s)| s),
        steps_to_target: outcome.reached.map(|(step, _)| step),
        steps_run: outcome.steps,
        train_seconds_total: outcome.train_seconds,
        wall_seconds: outcome.wall_seconds,
        train_solve_rate: train.hidden_solve_rate,
        heldout_solve_rate: heldout.hidden_solve_rate,
        heldout_family_solve_rate: family.hidden_solve_rate,
        threads,
        eval_protocol: format!(
            "greedy (temperature 0), 1 episode per task, whole split, every {EVAL_EVERY} steps; \
             times exclude evaluation"
        ),
        run_dir: outcome.run_dir,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match (report.train_seconds_to_target, report.steps_to_target) {
            (Some(s), Some(step)) => println!(
                "reached {:.0}% hidden solve on train after {step} steps, {s:.1} s of training",
                100.0 * TARGET
            ),
            _ => println!(
                "did not reach {:.0}% hidden solve on train in {} steps ({:.1} s of training)",
                100.0 * TARGET,
                report.steps_run,
                report.train_seconds_total
            ),
        }
        println!(
            "hidden solve (greedy): train {:.1}%, heldout {:.1}%, heldout-family {:.1}%",
            100.0 * report.train_solve_rate,
            100.0 * report.heldout_solve_rate,
            100.0 * report.heldout_family_solve_rate
        );
        println!(
            "{threads} threads; wall time {:.1} s including evaluations; run {}",
            report.wall_seconds, report.run_dir
        );
    }
    Ok(())
}
