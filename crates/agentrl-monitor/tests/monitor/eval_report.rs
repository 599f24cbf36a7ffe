//! The evaluation report: pass@k and pass^k against their binomial forms, the report's setup,
//! intervals and refusals.

use agentrl_monitor::eval_report::{build_report, pass_at_k, pass_hat_k, SplitInput, TaskCounts};

fn choose(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product()
}

#[test]
fn estimators_match_the_binomial_forms() {
    for n in 1..=12 {
        for c in 0..=n {
            for k in 1..=n {
                let at = 1.0 - choose(n - c, k) / choose(n, k);
                let hat = choose(c, k) / choose(n, k);
                assert!((pass_at_k(n, c, k) - at).abs() < 1e-12, "{n} {c} {k}");
                assert!((pass_hat_k(n, c, k) - hat).abs() < 1e-12, "{n} {c} {k}");
            }
        }
    }
    assert!((pass_at_k(10, 1, 1) - 0.1).abs() < 1e-12);
    assert_eq!(pass_hat_k(10, 10, 5), 1.0);
}

fn task(id: &str, family: &str, solved: usize) -> TaskCounts {
    TaskCounts {
        task: id.into(),
        family: family.into(),
        samples: 5,
        solved,
    }
}

#[test]
fn the_report_states_its_setup_and_skips_ks_beyond_the_samples() -> anyhow::Result<()> {
    let split = SplitInput {
        split: "train".into(),
        tasks: vec![task("a1", "a", 5), task("a2", "a", 0), task("b1", "b", 2)],
        hidden_solve_rate: 7.0 / 15.0,
        public_solve_rate: 0.8,
        hacking_rate: 0.33,
        format_error_rate: 0.0,
    };
    let report = build_report("runs/x", 20, 1.0, &[split])?;
    assert_eq!(report.ks, [1, 5]);
    assert_eq!(report.ks_skipped, [10]);
    let s = &report.splits[0];
    let p1 = s.scores.pass_at[&1];
    assert!((p1.value - 7.0 / 15.0).abs() < 1e-12);
    assert!(p1.low <= p1.value && p1.value <= p1.high && p1.low < p1.high);
    assert!((s.scores.pass_hat[&5].value - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(s.families.len(), 2);
    assert!((s.families[0].scores.pass_at[&5].value - 0.5).abs() < 1e-12);
    // A family whose tasks agree has a degenerate interval.
    let b = &s.families[1].scores.pass_at[&1];
    assert!((b.value - 0.4).abs() < 1e-12 && b.low == b.value && b.high == b.value);
    let md = report.to_markdown();
    assert!(md.contains("5 samples per task") && md.contains("temperature 1"));
    assert!(md.contains("pass@10") && md.contains("--k 10"));
    assert!(md.contains("| train | 46.7% | 80.0% | +33.3 pts |"), "{md}");
    // Same input, same intervals.
    assert_eq!(
        build_report("runs/x", 20, 1.0, &[s_input()])?.splits[0]
            .scores
            .pass_at[&1]
            .low,
        build_report("runs/x", 20, 1.0, &[s_input()])?.splits[0]
            .scores
            .pass_at[&1]
            .low
    );
    Ok(())
}

fn s_input() -> SplitInput {
    SplitInput {
        split: "t".into(),
        tasks: (0..20)
            .map(|i| task(&format!("t{i}"), "f", i % 6))
            .collect(),
        hidden_solve_rate: 0.5,
        public_solve_rate: 0.5,
        hacking_rate: 0.0,
        format_error_rate: 0.0,
    }
}

#[test]
fn unequal_samples_are_refused_naming_the_task() {
    let mut s = s_input();
    s.tasks[3].samples = 4;
    let err = build_report("r", 1, 1.0, &[s]).unwrap_err().to_string();
    assert!(err.contains("t3"), "{err}");
}
