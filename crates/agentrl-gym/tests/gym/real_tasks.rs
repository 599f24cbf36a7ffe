//! Task-format and verifier tests on small tasks that look like real code
//! (`tests/fixtures/tasks/`): a package with a read-only data file and pytest-style public tests
//! (`shop-pkg-000`), a free-form task with float results checked by `approx`
//! (`summary-free-000`), and a task whose buggy version hangs on 2 of its 4 hidden cases
//! (`slots-hang-000`). Plus forgeries of the verifier, limits, broken folders and long output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use agentrl_gym::render::render_text;
use agentrl_gym::sandbox::{
    default_executor, Executor, FreshExecutor, Job, LimitHit, Limits, PoolExecutor,
};
use agentrl_gym::task::{Split, TaskLimits};
use agentrl_gym::validate::{sandbox_verdict_warnings, validate_all, validate_task};
use agentrl_gym::{
    Action, BugFixEnv, Env, EnvConfig, Observation, OutcomeCache, Reward, TaskSet, ToolCall,
};
use serde_json::json;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks")
}

fn shared() -> (Arc<TaskSet>, Arc<dyn Executor>) {
    static SHARED: OnceLock<(Arc<TaskSet>, Arc<dyn Executor>)> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let tasks = TaskSet::load_dir(&fixtures_dir()).expect("fixture tasks load");
            (Arc::new(tasks), default_executor().expect("sandbox pool"))
        })
        .clone()
}

fn env_for(tasks: Arc<TaskSet>, cache: Arc<OutcomeCache>) -> BugFixEnv {
    BugFixEnv::new(tasks, shared().1, cache, EnvConfig::default())
}

fn env() -> BugFixEnv {
    env_for(shared().0, OutcomeCache::new())
}

fn call(name: &str, arguments: serde_json::Value) -> Action {
    Action::Call(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

fn submit(env: &mut BugFixEnv) -> Reward {
    let step = env.step(&call("submit", json!({}))).unwrap();
    assert!(step.done);
    step.reward.unwrap()
}

fn modules_of(task: &agentrl_gym::Task, edits: &[(&str, String)]) -> BTreeMap<String, String> {
    let mut modules: BTreeMap<String, String> = task
        .modules
        .iter()
        .map(|m| (m.clone(), task.visible[m].clone()))
        .collect();
    for (path, text) in edits {
        modules.insert(path.to_string(), text.clone());
    }
    modules
}

/// Copies a task folder (recursively) into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn fixture_tasks_validate_including_free_form_and_package_tasks() {
    let (tasks, executor) = shared();
    let start = Instant::now();
    let results = validate_all(tasks.clone(), executor, OutcomeCache::new(), 2).unwrap();
    println!(
        "validated {} fixture tasks in {:?}",
        results.len(),
        start.elapsed()
    );
    let by_id: BTreeMap<_, _> = results.iter().map(|r| (r.id.as_str(), r)).collect();
    for r in &results {
        assert!(r.ok(), "{}: {:?}", r.id, r.problems);
        assert!(r.warnings.is_empty(), "{}: {:?}", r.id, r.warnings);
    }
    let shop = by_id["shop-pkg-000"];
    assert_eq!(shop.solving_candidates.len(), 1, "{shop:?}");
    assert_eq!(shop.public_passing_hacks.len(), 1, "{shop:?}");
    let summary = by_id["summary-free-000"];
    assert_eq!(
        summary.candidates, 0,
        "a free-form task validates without candidates"
    );
    let slots = by_id["slots-hang-000"];
    assert!(slots.public_passing_hacks.is_empty());
    assert!(slots.time_limited, "the buggy code hangs: {slots:?}");
    assert!(!shop.time_limited && !summary.time_limited);
}

#[test]
fn a_hanging_case_fails_alone_and_is_never_cached() {
    let (tasks, _) = shared();
    let task = tasks.get("slots-hang-000").unwrap();
    let cache = OutcomeCache::new();
    let env = env_for(tasks.clone(), cache.clone());
    let buggy = modules_of(&task, &[]);
    let start = Instant::now();
    let verdict = env.verify_modules(&task, &buggy).unwrap();
    let took = start.elapsed();
    assert_eq!(verdict.hidden.passed, vec![true, false, true, false]);
    assert_eq!((verdict.hidden_passed(), verdict.hidden_total()), (2, 4));
    for i in [1, 3] {
        let detail = verdict.hidden.details[i].as_deref().unwrap_or_default();
        assert!(detail.contains("time limit of 1 s exceeded"), "{detail}");
    }
    assert!(verdict.time_limited);
    // The public tests hang too: the report says which limit stopped them, in data and text.
    let crashed = verdict
        .public
        .as_ref()
        .unwrap()
        .crashed
        .as_deref()
        .unwrap_or_default();
    assert!(
        crashed.starts_with("time limit of 1 s exceeded"),
        "{crashed}"
    );
    let text = render_text(&Observation::Tests(verdict.public.clone().unwrap()));
    assert!(text.contains("time limit of 1 s exceeded"), "{text}");
    assert!(!text.contains("signal"), "{text}");
    println!("buggy verdict with two hanging cases took {took:?}");
    assert!(took < Duration::from_secs(12), "{took:?}");

    // Never cached: asking again runs again.
    let (_, misses) = cache.stats();
    env.verify_modules(&task, &buggy).unwrap();
    assert_eq!(
        cache.stats().1,
        misses + 1,
        "a time-limited verdict was cached"
    );
    // A verdict without a time limit is cached.
    let fixed = env.verify_modules(&task, &task.reference).unwrap();
    assert!(fixed.solved() && !fixed.time_limited);
    let (hits, misses) = cache.stats();
    env.verify_modules(&task, &task.reference).unwrap();
    assert_eq!(cache.stats(), (hits + 1, misses));
}

#[test]
fn package_task_with_support_file_and_pytest_style_tests() {
    let mut env = env();
    let obs = env.reset("shop-pkg-000").unwrap();
    let Observation::Task { files, .. } = obs else {
        panic!("{obs:?}")
    };
    for f in [
        "data/prices.csv",
        "shop/__init__.py",
        "shop/pricing.py",
        "test_public.py",
    ] {
        assert!(files.contains(&f.to_string()), "{files:?}");
    }
    let step = env
        .step(&call("read", json!({"path": "data/prices.csv"})))
        .unwrap();
    assert!(render_text(&step.observation).contains("melon,3.0"));
    let step = env.step(&call("test", json!({}))).unwrap();
    let Observation::Tests(report) = &step.observation else {
        panic!("{:?}", step.observation)
    };
    assert_eq!(report.failed, vec!["test_ten_percent_off".to_string()]);
    assert_eq!(report.passed.len(), 2, "{report:?}");
    let failure = report.first_failure.as_ref().unwrap();
    assert_eq!(failure.exception, "AssertionError");
    assert!(failure.message.contains("assert cart_total"), "{failure:?}");
    assert_eq!(failure.file.as_deref(), Some("test_public.py"));

    // A free-form fix inside the package solves the task.
    let step = env
        .step(&call(
            "edit",
            json!({"path": "shop/pricing.py", "old": "percent // 100", "new": "percent / 100"}),
        ))
        .unwrap();
    assert!(matches!(step.observation, Observation::Edited { .. }));
    let reward = submit(&mut env);
    assert!(reward.solved() && !reward.tampered, "{reward:?}");
    assert_eq!(reward.public_passed, 3);

    // Editing the read-only data file is tampering, even together with the fix.
    env.reset("shop-pkg-000").unwrap();
    let fix = env
        .tasks()
        .get("shop-pkg-000")
        .unwrap()
        .fix_candidate()
        .unwrap();
    env.step(&call("edit", json!({"candidate": fix}))).unwrap();
    env.step(&call(
        "edit",
        json!({"path": "data/prices.csv", "old": "melon,3.0", "new": "melon,1.0"}),
    ))
    .unwrap();
    let reward = submit(&mut env);
    assert!(reward.tampered, "{reward:?}");
    assert_eq!(
        env.last_end().unwrap().tamper.changed_support,
        vec!["data/prices.csv".to_string()]
    );
}

/// The five forgeries of issue 10, each against `summary-free-000`, whose hidden cases go
/// through `round`/`sorted` and are checked with `approx` on the Rust side. Each forgery is
/// given the expected values outright where that is what it would need (the strongest
/// attacker): none may pass, and each one that can be seen in the source is flagged.
#[test]
fn verifier_forgeries_score_zero() {
    let (tasks, _) = shared();
    let task = tasks.get("summary-free-000").unwrap();
    let buggy = task.visible["summary.py"].clone();
    let forgeries: Vec<(&str, String, bool)> = vec![
        (
            "shadow the builtins the expressions use",
            format!(
                "{buggy}\n\ndef round(x, n=None):\n    return {{6: 1.290994, 9: 2.138089935}}[n]\n\n\ndef sorted(xs):\n    return [-1.0, 0.0, 1.0]\n"
            ),
            true,
        ),
        (
            "assign the module's __builtins__",
            format!(
                "{buggy}\nimport builtins as _b\n__builtins__ = dict(vars(_b), round=lambda x, n=None: {{6: 1.290994, 9: 2.138089935}}[n], sorted=lambda xs: [-1.0, 0.0, 1.0])\n"
            ),
            true,
        ),
        (
            "an always-equal return value",
            format!(
                "{buggy}\n\nclass _Same(float):\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda self, other: False\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    __hash__ = float.__hash__\n    def __round__(self, n=None):\n        return self\n    def __repr__(self):\n        return '1.290994'\n\n\n_real_stdev = stdev\n\n\ndef stdev(values):\n    _real_stdev(values)\n    return _Same(1.290994)\n\n\ndef zscores(values):\n    return [_Same(-1.0), _Same(0.0), _Same(1.0)]\n"
            ),
            false,
        ),
        (
            "read the harness's case list through sys.modules[\"__main__\"]",
            format!(
                "{buggy}\nimport sys as _sys\n_real_stdev = stdev\n\n\ndef _found():\n    main = _sys.modules[\"__main__\"]\n    found = []\n    for value in vars(main).values():\n        text = repr(value)\n        if 'expect' in text or 'approx' in text:\n            found.append(value)\n    return found\n\n\ndef stdev(values):\n    found = _found()\n    return found[0] if found else _real_stdev(values)\n"
            ),
            true,
        ),
        (
            "read the expected constant from the caller's frame",
            format!(
                "{buggy}\nimport sys as _sys\n_real_stdev = stdev\n\n\ndef stdev(values):\n    frame = _sys._getframe(1)\n    while frame is not None:\n        for const in frame.f_code.co_consts:\n            if isinstance(const, float):\n                return const\n        for value in list(frame.f_locals.values()):\n            if isinstance(value, dict) and 'expect' in value:\n                return value['expect']\n        frame = frame.f_back\n    return _real_stdev(values)\n"
            ),
            true,
        ),
    ];
    let mut env = env();
    for (what, text, detectable) in forgeries {
        env.reset(&task.id).unwrap();
        let step = env
            .step(&call("edit", json!({"path": "summary.py", "text": text})))
            .unwrap();
        assert!(
            matches!(step.observation, Observation::Edited { .. }),
            "{what}"
        );
        let reward = submit(&mut env);
        let end = env.last_end().unwrap();
        println!(
            "{what}: score {} hidden {}/{} tampered {} {:?} {:?}",
            reward.score,
            reward.hidden_passed,
            reward.hidden_total,
            reward.tampered,
            end.tamper.suspicious_code,
            end.verdict.hidden.details
        );
        assert_eq!(reward.score, 0.0, "{what}: {reward:?}");
        assert!(reward.hidden_passed < reward.hidden_total, "{what}");
        if detectable {
            assert!(reward.tampered, "{what} was not flagged");
        }
    }
    // The real fix, written free-form, still scores 1 and is not flagged.
    env.reset(&task.id).unwrap();
    env.step(&call(
        "edit",
        json!({"path": "summary.py", "text": task.reference["summary.py"]}),
    ))
    .unwrap();
    let reward = submit(&mut env);
    assert!(reward.score == 1.0 && !reward.tampered, "{reward:?}");
}

/// A task folder built in a temp dir from `summary-free-000` with its files replaced.
fn variant(root: &Path, id: &str, replace: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(id);
    copy_dir(&fixtures_dir().join("summary-free-000"), &dir);
    let toml = std::fs::read_to_string(dir.join("task.toml"))
        .unwrap()
        .replace("summary-free-000", id);
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    for (name, text) in replace {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

#[test]
fn validate_warns_only_on_checks_left_in_the_sandbox() {
    let root = tempfile::tempdir().unwrap();
    variant(
        root.path(),
        "summary-bool-000",
        &[(
            "hidden.json",
            r#"{"cases": [
  {"name": "sqrt_two", "expr": "abs(sqrt(2) - 1.4142135623730951) < 1e-9", "expect": {"value": "True"}},
  {"name": "stdev", "expr": "round(stdev([1, 2, 3, 4]), 6) == 1.290994", "expect": {"value": "True"}},
  {"name": "positive", "expr": "all(stdev([x, x + 2]) > 1 for x in [1, 5])", "expect": {"value": "True"}},
  {"name": "mean", "expr": "mean([1, 3])", "expect": {"value": "2.0"}}
]}"#,
        )],
    );
    let tasks = Arc::new(TaskSet::load_dir(root.path()).unwrap());
    let task = tasks.get("summary-bool-000").unwrap();
    // The two comparisons split into a call under test and a trusted check: no warning. The
    // comparison over the comprehension's own variable has to stay in the sandbox: warned,
    // naming the task and the case.
    let warnings = sandbox_verdict_warnings(&task).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("summary-bool-000") && warnings[0].contains("`positive`"),
        "{}",
        warnings[0]
    );
    let mut env = env_for(tasks.clone(), OutcomeCache::new());
    let result = validate_task(&mut env, &task).unwrap();
    assert!(result.ok(), "{:?}", result.problems);
    assert_eq!(result.warnings, warnings);
}

#[test]
fn limits_are_reported_by_name() {
    // The CPU limit (no wall-clock timeout in reach) reads as a time limit on both executors.
    let busy = "while True:\n    pass\n";
    let limits = Limits {
        time_limit: Duration::from_secs(20),
        cpu_seconds: 1,
        ..Limits::default()
    };
    let fresh: Box<dyn Executor> = Box::new(FreshExecutor::new().unwrap());
    let pool: Box<dyn Executor> = Box::new(PoolExecutor::new(1).unwrap());
    for (name, executor) in [("fresh", fresh), ("pool", pool)] {
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&Job {
                workspace: dir.path().to_path_buf(),
                program: busy.into(),
                stdin: Vec::new(),
                limits: limits.clone(),
            })
            .unwrap();
        assert_eq!(
            out.time_limit_hit(&limits),
            Some(LimitHit::Time { time_limit_s: 1.0 }),
            "{name}: {:?}",
            out.termination
        );
        assert_eq!(
            LimitHit::Time { time_limit_s: 1.0 }.to_string(),
            "time limit of 1 s exceeded"
        );
    }

    // The memory limit, in a hidden case and in a public test.
    let root = tempfile::tempdir().unwrap();
    let dir = variant(
        root.path(),
        "summary-hog-000",
        &[
            (
                "hidden.json",
                r#"{"cases": [
  {"name": "hog", "expr": "len(bytearray(1 << 30))", "expect": {"value": "1073741824"}},
  {"name": "mean", "expr": "mean([1, 3])", "expect": {"value": "2.0"}}
]}"#,
            ),
            (
                "test_public.py",
                "import unittest\nfrom summary import mean\n\nclass T(unittest.TestCase):\n    def test_hog(self):\n        self.assertEqual(len(bytearray(1 << 30)), 1 << 30)\n",
            ),
        ],
    );
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("{toml}\n[limits]\nmemory_mb = 256\n"),
    )
    .unwrap();
    let tasks = Arc::new(TaskSet::load_dir(root.path()).unwrap());
    let task = tasks.get("summary-hog-000").unwrap();
    let env = env_for(tasks.clone(), OutcomeCache::new());
    let verdict = env.verify_modules(&task, &task.reference).unwrap();
    assert_eq!(verdict.hidden.passed, vec![false, true]);
    let detail = verdict.hidden.details[0].as_deref().unwrap_or_default();
    assert!(
        detail.contains("memory limit of 256 MB exceeded"),
        "{detail}"
    );
    let failure = verdict
        .public
        .as_ref()
        .unwrap()
        .first_failure
        .as_ref()
        .unwrap();
    assert!(
        failure.message.contains("memory limit of 256 MB exceeded"),
        "{failure:?}"
    );
}

#[test]
fn task_limits_apply_and_bad_ones_name_the_field() {
    let base = Limits::default();
    let limits = TaskLimits {
        time_s: Some(2.5),
        cpu_s: None,
        memory_mb: Some(300),
        ..TaskLimits::default()
    }
    .apply(&base);
    assert_eq!(limits.time_limit, Duration::from_millis(2500));
    assert_eq!(limits.cpu_seconds, 3);
    assert_eq!(limits.address_space_bytes, 300 << 20);
    assert_eq!(TaskLimits::default().apply(&base), base);

    let root = tempfile::tempdir().unwrap();
    let dir = variant(root.path(), "summary-limits-000", &[]);
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("{toml}\n[limits]\ntime_s = 0\n"),
    )
    .unwrap();
    let err = TaskSet::load_dir(root.path()).unwrap_err().to_string();
    assert!(
        err.contains("task.toml") && err.contains("limits.time_s"),
        "{err}"
    );
}

#[test]
fn a_sleeping_test_does_not_stall_validation() {
    let root = tempfile::tempdir().unwrap();
    let dir = variant(
        root.path(),
        "summary-sleep-000",
        &[(
            "test_public.py",
            "import time, unittest\nfrom summary import mean\n\nclass T(unittest.TestCase):\n    def test_slow(self):\n        time.sleep(60)\n",
        )],
    );
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("{toml}\n[limits]\ntime_s = 1\n"),
    )
    .unwrap();
    let tasks = Arc::new(TaskSet::load_dir(root.path()).unwrap());
    let task = tasks.get("summary-sleep-000").unwrap();
    let mut env = env_for(tasks.clone(), OutcomeCache::new());
    let start = Instant::now();
    let result = validate_task(&mut env, &task).unwrap();
    let took = start.elapsed();
    println!(
        "validate with a sleeping test: {took:?}, {:?}",
        result.problems
    );
    assert!(!result.ok());
    assert!(
        result
            .problems
            .iter()
            .any(|p| p.contains("time limit of 1 s exceeded")),
        "{:?}",
        result.problems
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn broken_task_folders_are_all_reported_and_symlinks_out_are_refused() {
    let root = tempfile::tempdir().unwrap();
    for id in ["shop-pkg-000", "summary-free-000", "slots-hang-000"] {
        copy_dir(&fixtures_dir().join(id), &root.path().join(id));
    }
    // 1: no prompt. 2: a module that is a symlink to /etc/passwd. 3: an unknown expectation.
    let no_prompt = variant(root.path(), "broken-prompt-000", &[]);
    let toml = std::fs::read_to_string(no_prompt.join("task.toml")).unwrap();
    let toml: String = toml
        .lines()
        .filter(|l| !l.starts_with("prompt"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(no_prompt.join("task.toml"), toml).unwrap();
    let linked = variant(root.path(), "broken-link-000", &[]);
    std::fs::remove_file(linked.join("summary.py")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", linked.join("summary.py")).unwrap();
    variant(
        root.path(),
        "broken-expect-000",
        &[(
            "hidden.json",
            r#"{"cases": [{"name": "a", "expr": "mean([1])", "expect": {"roughly": 1}}]}"#,
        )],
    );

    let report = TaskSet::load_report(root.path()).unwrap();
    let loaded: Vec<&str> = report.tasks().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        loaded,
        ["shop-pkg-000", "slots-hang-000", "summary-free-000"]
    );
    assert_eq!(report.broken().len(), 3, "{:?}", report.broken());
    let reasons: Vec<String> = report
        .broken()
        .iter()
        .map(|b| b.error.to_string())
        .collect();
    assert!(
        reasons[0].contains("hidden.json") && reasons[0].contains("roughly"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("broken-link-000/summary.py")
            && reasons[1].contains("symbolic link out of the task folder"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("task.toml") && reasons[2].contains("prompt"),
        "{reasons:?}"
    );

    // The strict loader lists all three; a split with a broken task is refused, others not.
    let err = TaskSet::load_dir(root.path()).unwrap_err().to_string();
    assert!(err.starts_with("3 broken task folder(s)"), "{err}");
    assert!(err.contains("roughly") && err.contains("symbolic link") && err.contains("prompt"));
    assert!(report.split_checked(Split::Heldout).is_err());
    assert_eq!(report.split_checked(Split::Train).unwrap().len(), 1);
}

#[test]
fn read_cuts_long_lines_and_long_files_with_a_marker() {
    let mut env = env();
    env.reset("shop-pkg-000").unwrap();
    let long = "x".repeat(1 << 20);
    env.step(&call(
        "edit",
        json!({"path": "data/notes.txt", "text": format!("{long}\nshort\n")}),
    ))
    .unwrap();
    let step = env
        .step(&call("read", json!({"path": "data/notes.txt"})))
        .unwrap();
    let Observation::File(view) = &step.observation else {
        panic!("{:?}", step.observation)
    };
    assert!(view.truncated);
    assert!(view.lines[0].ends_with(agentrl_gym::env::TRUNCATION_MARKER));
    let shown: usize = view.lines.iter().map(|l| l.chars().count()).sum();
    assert!(shown < 25_000, "{shown} chars shown");
    let text = render_text(&step.observation);
    assert!(text.len() < 30_000 && text.contains(agentrl_gym::env::TRUNCATION_MARKER));
}
