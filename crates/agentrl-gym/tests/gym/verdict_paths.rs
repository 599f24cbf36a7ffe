//! The verdict tree's two paths judge alike: a fresh interpreter runs `verdict_tree.py` as
//! `__main__`, while each pool fork server loads it once and a tree job calls its `main`. And
//! what a candidate does to the harness at import dies with its job: the next verdict on the
//! same fork server is judged as if it had never run.

use std::collections::BTreeMap;

use agentrl_gym::harness::HiddenScore;
use agentrl_gym::sandbox::{Executor, FreshExecutor, Limits, PoolExecutor};
use agentrl_gym::verify::verify;
use agentrl_gym::Task;

fn hidden(executor: &dyn Executor, task: &Task, modules: &BTreeMap<String, String>) -> HiddenScore {
    verify(executor, task, modules, &Limits::default(), false)
        .unwrap()
        .hidden
}

/// The task's modules as the agent first sees them (the bug still in).
fn pristine(task: &Task) -> BTreeMap<String, String> {
    task.modules
        .iter()
        .map(|m| (m.clone(), task.visible[m].clone()))
        .collect()
}

/// Each module with `prefix` put before its code (run at import, in the tree's process).
fn prefixed(modules: &BTreeMap<String, String>, prefix: &str) -> BTreeMap<String, String> {
    modules
        .iter()
        .map(|(m, text)| (m.clone(), format!("{prefix}\n{text}")))
        .collect()
}

/// Import-time code that rebinds what the harness uses to encode and write its reports (the
/// tree bound its own before any job existed).
const PATCH_THE_HARNESS: &str = r#"import json as _j, os as _o
_j.dumps = lambda *a, **k: '{"value": {"int": "999"}, "part": 0}'
_j.encoder.c_make_encoder = None
_o.write = lambda fd, data: len(data)
"#;

/// Import-time code that breaks the stdlib under the harness (`os.path.join` needs it).
const BREAK_THE_STDLIB: &str = "import builtins as _b\n_b.isinstance = lambda *a: True\n";

#[test]
fn the_pool_and_a_fresh_interpreter_give_the_same_verdicts() {
    let (tasks, _) = crate::shared();
    let fresh = FreshExecutor::new().unwrap();
    let pool = PoolExecutor::new(2).unwrap();
    let mut seen_fail = false;
    for id in [
        "offbyone-000",
        "comparison-000",
        "mutdefault-000",
        "wrongop-000",
    ] {
        let task = &*tasks.get(id).unwrap();
        for modules in [task.reference.clone(), pristine(task)] {
            let on_pool = hidden(&pool, task, &modules);
            let in_fresh = hidden(&fresh, task, &modules);
            assert_eq!(on_pool.passed, in_fresh.passed, "{id}");
            assert_eq!(on_pool.details, in_fresh.details, "{id}");
            seen_fail |= on_pool.passed.iter().any(|p| !p);
        }
        assert!(hidden(&pool, task, &task.reference)
            .passed
            .iter()
            .all(|p| *p));
    }
    assert!(
        seen_fail,
        "no pristine module failed a case: the comparison proves nothing"
    );
}

#[test]
fn a_candidate_that_patches_the_harness_at_import_changes_nothing_then_or_after() {
    let (tasks, _) = crate::shared();
    let task = &*tasks.get("offbyone-000").unwrap();
    // One worker: every verdict below runs on the same fork server.
    let pool = PoolExecutor::new(1).unwrap();
    let clean = hidden(&pool, task, &task.reference);
    assert!(clean.passed.iter().all(|p| *p), "{:?}", clean.details);
    let buggy = hidden(&pool, task, &pristine(task));
    assert!(buggy.passed.iter().any(|p| !p));

    // The bug still in, plus the patches: judged exactly as the bug alone.
    let patched = hidden(&pool, task, &prefixed(&pristine(task), PATCH_THE_HARNESS));
    assert_eq!(patched.passed, buggy.passed, "{:?}", patched.details);
    assert_eq!(patched.details, buggy.details);
    // The fix plus the patches: still judged on what the fix returns.
    let fixed = hidden(&pool, task, &prefixed(&task.reference, PATCH_THE_HARNESS));
    assert_eq!(fixed.passed, clean.passed, "{:?}", fixed.details);
    // Sabotage under the harness fails the verdict; it never passes a case.
    let broken = hidden(&pool, task, &prefixed(&task.reference, BREAK_THE_STDLIB));
    assert!(broken.passed.iter().all(|p| !p), "{:?}", broken.details);

    // The server the patched and broken jobs were forked from is untouched.
    for _ in 0..3 {
        let again = hidden(&pool, task, &task.reference);
        assert_eq!(again.passed, clean.passed);
        assert_eq!(again.details, clean.details);
        let buggy_again = hidden(&pool, task, &pristine(task));
        assert_eq!(buggy_again.passed, buggy.passed);
        assert_eq!(buggy_again.details, buggy.details);
    }
}
