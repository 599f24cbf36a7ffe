//! The trusted checker: boolean checks split into calls under test and a trusted skeleton, and
//! evaluations, including one stopped at its time limit.

use std::time::Duration;

use agentrl_gym::trusted::{checker, Evaluated};

#[test]
fn boolean_checks_split_into_calls_under_test_and_a_trusted_skeleton() {
    let checker = checker().unwrap();
    let split = checker
        .split("abs(sqrt(2) - 1.4142135623730951) < 1e-9", "")
        .unwrap();
    assert_eq!(split.parts, vec!["sqrt(2)".to_string()]);
    assert_eq!(
        split.skeleton.as_deref(),
        Some("abs(_part(0) - 1.4142135623730951) < 1e-09")
    );
    assert!(checker
        .split("t.mean()", "t = Tally()")
        .unwrap()
        .is_trivial());
    // A name the setup binds is the sandbox's, even when it spells a builtin.
    let shadowed = checker.split("len(xs) == 2", "xs = [1]\nlen = f").unwrap();
    assert_eq!(shadowed.parts, vec!["len(xs)".to_string()]);
    assert_eq!(shadowed.skeleton.as_deref(), Some("_part(0) == 2"));
    // A comparison over a comprehension's own variable can only run in the sandbox.
    let inside = checker.split("all(f(v) > 0 for v in [1, 3])", "").unwrap();
    assert_eq!(inside.skeleton.as_deref(), Some("all(_part(0))"));
    assert!(inside.sandbox_check.is_some());
    let comprehension = checker.split("all(is_odd(v) for v in [1, 3])", "").unwrap();
    assert_eq!(comprehension.skeleton.as_deref(), Some("all(_part(0))"));

    let value = |v: serde_json::Value| serde_json::json!({ "value": v });
    let close = checker
        .evaluate(
            split.skeleton.as_deref(),
            None,
            &[value(serde_json::json!({"float": "1.4142135623730951"}))],
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(close, Evaluated::Outcome(value(serde_json::json!(true))));
    let raised = checker
        .evaluate(
            Some("_part(0) == 1"),
            None,
            &[serde_json::json!({"raises": "ValueError", "lookalike": true})],
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(
        raised,
        Evaluated::Outcome(serde_json::json!({"raises": "ValueError", "lookalike": true}))
    );
    let checked = checker
        .evaluate(
            None,
            Some("abs(result - 1.5) < 0.1"),
            &[value(serde_json::json!({"float": "1.45"}))],
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(checked, Evaluated::Outcome(value(serde_json::json!(true))));
    // A check that never ends is stopped at its limit, and the next one still runs.
    let endless = checker
        .evaluate(
            Some("_part(0) < 0 or all(True for _ in iter(int, 1))"),
            None,
            &[value(serde_json::json!({"int": "5"}))],
            Duration::from_millis(500),
        )
        .unwrap();
    assert_eq!(endless, Evaluated::TimedOut);
    assert_eq!(
        checker
            .evaluate(
                None,
                Some("result == 5"),
                &[value(serde_json::json!({"int": "5"}))],
                Duration::from_secs(5)
            )
            .unwrap(),
        Evaluated::Outcome(value(serde_json::json!(true)))
    );
}
