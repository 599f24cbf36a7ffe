//! The session's closing summary table and its progress lines.

use agentrl_rollout::EvalReport;
use agentrl_train::session::{duration, summary_table, Progress, SessionOutcome};

fn report(split: &str, rate: f64) -> EvalReport {
    EvalReport {
        split: split.into(),
        tasks: 20,
        samples: 4,
        hidden_solve_rate: rate,
        public_solve_rate: rate,
        pass_at_1: rate,
        k: 4,
        pass_at_k: rate,
        hacking_rate: 0.0,
        format_error_rate: 0.125,
        mean_turns: 2.0,
        per_task: Default::default(),
    }
}

fn outcome() -> SessionOutcome {
    SessionOutcome {
        run_dir: "runs/20260101-000000-12345".into(),
        steps: 60,
        before: vec![report("heldout-family", 0.0)],
        after: vec![report("heldout-family", 1.0)],
        absent_splits: vec!["heldout".into()],
        eval_temperature: 1.0,
        train_seconds: 95.2,
        session_train_seconds: 3.1,
        wall_seconds: 4.0,
        session_steps: 2,
        reached: None,
        last: None,
        interrupted: false,
    }
}

#[test]
fn the_summary_fits_80_columns_and_states_samples_and_temperature() {
    let table = summary_table(&outcome());
    for line in table.lines() {
        assert!(line.chars().count() <= 80, "{} wide: {line}", line.len());
    }
    assert!(
        table.contains("4 samples per task at temperature 1"),
        "{table}"
    );
    assert!(table.contains("0.0→100.0%"), "{table}");
    assert!(table.contains("hacking:") && table.contains("format err:"));
    assert!(
        table.contains("heldout") && table.contains("no tasks"),
        "{table}"
    );
    // A resumed session's times are its own, and the whole run's are named as such.
    assert!(table.contains("60 steps (2 in this session)"), "{table}");
    assert!(table.contains("training 3.1 s"), "{table}");
    assert!(table.contains("whole run: 95.2 s"), "{table}");
    assert!(!table.contains("solve rate  "), "{table}");
}

#[test]
fn progress_lines_are_bounded() {
    assert_eq!(Progress::lines_for(60), Progress::Lines { every: 2 });
    assert_eq!(Progress::lines_for(8), Progress::Lines { every: 1 });
    assert_eq!(duration(65.0), "1 min 5 s");
}
