//! Split evaluation summaries: solve, hacking and format-error rates, pass@1 and pass@k.

use agentrl_gym::Reward;
use agentrl_rollout::eval::{summarize, EpisodeOutcome};

fn outcome(task: &str, solved: bool, hacked: bool, format_errors: u32) -> EpisodeOutcome {
    let reward = Reward {
        score: f32::from(u8::from(solved)),
        public_passed: if solved || hacked { 3 } else { 1 },
        public_total: 3,
        hidden_passed: if solved { 5 } else { 2 },
        hidden_total: 5,
        tampered: hacked,
        format_errors,
        verdict_reruns: 0,
    };
    EpisodeOutcome {
        task_id: task.into(),
        reward,
        actions: 4,
        format_errors,
    }
}

#[test]
fn rates_and_pass_at_k() -> anyhow::Result<()> {
    // Task a: 1 of 2 solved; task b: 0 of 2 (one hacked, one with a format error).
    let eps = vec![
        outcome("a", true, false, 0),
        outcome("a", false, false, 0),
        outcome("b", false, true, 0),
        outcome("b", false, false, 2),
    ];
    let r = summarize("train", &eps, 2)?;
    assert_eq!((r.tasks, r.samples, r.k), (2, 2, 2));
    assert!((r.hidden_solve_rate - 0.25).abs() < 1e-12);
    assert!((r.pass_at_1 - 0.25).abs() < 1e-12);
    // pass@2: task a certainly solved in 2 of its 2 samples, b never.
    assert!((r.pass_at_k - 0.5).abs() < 1e-12);
    assert!((r.hacking_rate - 0.25).abs() < 1e-12);
    assert!((r.public_solve_rate - 0.5).abs() < 1e-12);
    assert!((r.format_error_rate - 2.0 / 16.0).abs() < 1e-12);
    assert_eq!(r.per_task["a"], 0.5);
    assert_eq!(r.per_task["b"], 0.0);
    Ok(())
}

#[test]
fn uneven_samples_and_bad_k_are_errors() {
    let eps = vec![
        outcome("a", true, false, 0),
        outcome("a", true, false, 0),
        outcome("b", true, false, 0),
    ];
    assert!(summarize("s", &eps, 1)
        .unwrap_err()
        .to_string()
        .contains("samples"));
    let eps = vec![outcome("a", true, false, 0)];
    assert!(summarize("s", &eps, 2).is_err());
    assert!(summarize("s", &[], 1).is_err());
}
