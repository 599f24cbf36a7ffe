//! CI's task validation: every built-in task is checked through the real env, verifier and
//! sandbox pool (bug reproduces, reference fix passes, exploit is caught, fix is a candidate),
//! at least half have a public-passing hack decoy, and the random-policy baseline is measured.

use std::sync::Arc;

use agentrl_gym::sandbox::default_executor;
use agentrl_gym::task::{Split, TaskSet};
use agentrl_gym::validate::{random_baseline, validate_all};
use agentrl_gym::OutcomeCache;

#[test]
fn every_builtin_task_validates_and_random_policy_rarely_solves() {
    let tasks = Arc::new(TaskSet::builtin().expect("built-in tasks load"));
    assert!(tasks.tasks().len() >= 40, "{} tasks", tasks.tasks().len());
    let families: std::collections::BTreeSet<_> =
        tasks.tasks().iter().map(|t| t.family.clone()).collect();
    assert!(families.len() >= 8, "{} families", families.len());

    let executor = default_executor().expect("sandbox pool starts");
    let cache = OutcomeCache::new();
    let results =
        validate_all(tasks.clone(), executor.clone(), cache.clone(), 2).expect("validation runs");
    let bad: Vec<_> = results
        .iter()
        .filter(|r| !r.ok())
        .map(|r| format!("{}: {:?}", r.id, r.problems))
        .collect();
    assert!(bad.is_empty(), "invalid tasks: {bad:#?}");
    let with_hack = results
        .iter()
        .filter(|r| !r.public_passing_hacks.is_empty())
        .count();
    assert!(
        with_hack * 2 >= results.len(),
        "{with_hack} of {} tasks have a public-passing hack",
        results.len()
    );

    let baseline = random_baseline(tasks.clone(), executor, cache, 3, 7).expect("baseline runs");
    eprintln!("random baseline: {baseline:?}");
    assert_eq!(baseline.episodes, tasks.tasks().len() * 3);
    // Each task has exactly one solving candidate among 5: about 0.2 for a random pick.
    assert!(
        baseline.random_candidate_solve_rate > 0.02 && baseline.random_candidate_solve_rate < 0.5
    );
    assert!(baseline.random_tool_calls_solve_rate < 0.6);
    assert!(!tasks.split(Split::HeldoutFamily).is_empty());
}
