//! Verdicts a candidate cannot forge or a stalled machine cannot spoil: a float task whose
//! hidden cases are Python boolean checks (`abs(stdev(xs) - y) < eps`, a `check` over
//! `result`), attacked by no-fix edits that override comparisons, rewrite the caller's frames,
//! return always-equal objects or patch the builtins; a tampered workspace that passes every
//! hidden case; and verdicts and validation hit by a stall (SIGSTOP … SIGCONT on the job).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentrl_gym::sandbox::{default_executor, Executor, Job, RunOutput, SandboxError, SandboxInfo};
use agentrl_gym::validate::{sandbox_verdict_warnings, validate_task};
use agentrl_gym::{Action, BugFixEnv, Env, EnvConfig, OutcomeCache, Reward, TaskSet, ToolCall};
use serde_json::json;

/// Sample standard deviation of [1, 2, 3, 4] and of [2, 4, 4, 4, 5, 5, 7, 9].
const STDEV_FOUR: f64 = 1.2909944487358056;
const STDEV_EIGHT: f64 = 2.138089935299395;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tasks")
        .join(name)
}

/// `summary-free-000` (stdev divides by n instead of n − 1) as `id`, with `hidden` as its
/// hidden cases and `extra_toml` appended to its task.toml.
fn summary_variant(root: &Path, id: &str, hidden: &str, extra_toml: &str) {
    let dir = root.join(id);
    std::fs::create_dir_all(dir.join("reference")).unwrap();
    let from = fixture("summary-free-000");
    for name in ["summary.py", "test_public.py", "reference/summary.py"] {
        std::fs::copy(from.join(name), dir.join(name)).unwrap();
    }
    let toml = std::fs::read_to_string(from.join("task.toml"))
        .unwrap()
        .replace("summary-free-000", id);
    std::fs::write(dir.join("task.toml"), format!("{toml}\n{extra_toml}")).unwrap();
    std::fs::write(dir.join("hidden.json"), hidden).unwrap();
}

fn boolean_checks() -> String {
    format!(
        r#"{{"cases": [
  {{"name": "stdev_four", "expr": "abs(stdev([1, 2, 3, 4]) - {STDEV_FOUR}) < 1e-9", "expect": {{"value": "True"}}}},
  {{"name": "stdev_eight", "expr": "math.isclose(stdev([2, 4, 4, 4, 5, 5, 7, 9]), {STDEV_EIGHT}, rel_tol=1e-9)", "expect": {{"value": "True"}}}},
  {{"name": "zscores", "expr": "all(abs(z - w) < 1e-9 for z, w in zip(sorted(zscores([3, 1, 2])), [-1.0, 0.0, 1.0]))", "expect": {{"value": "True"}}}},
  {{"name": "stdev_check", "expr": "stdev([1, 2, 3, 4])", "check": "abs(result - {STDEV_FOUR}) < 1e-9"}},
  {{"name": "stdev_one", "expr": "stdev([5])", "expect": {{"raises": "ValueError"}}}}
]}}"#
    )
}

fn tasks_with(hidden: &str, extra_toml: &str) -> (tempfile::TempDir, Arc<TaskSet>) {
    let root = tempfile::tempdir().unwrap();
    summary_variant(root.path(), "summary-bool-000", hidden, extra_toml);
    let tasks = Arc::new(TaskSet::load_dir(root.path()).unwrap());
    (root, tasks)
}

fn pool() -> Arc<dyn Executor> {
    static POOL: OnceLock<Arc<dyn Executor>> = OnceLock::new();
    POOL.get_or_init(|| default_executor().expect("sandbox pool"))
        .clone()
}

fn call(name: &str, arguments: serde_json::Value) -> Action {
    Action::Call(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// Writes `summary.py` as `text` (and `extra` files), submits, and returns the reward.
fn submit_with(env: &mut BugFixEnv, text: &str, extra: &[(&str, &str)], exploit: bool) -> Reward {
    env.reset("summary-bool-000").unwrap();
    for (path, content) in [("summary.py", text)].iter().chain(extra) {
        let step = env
            .step(&call("edit", json!({"path": path, "text": content})))
            .unwrap();
        assert!(!step.done, "{step:?}");
    }
    if exploit {
        env.step(&call("exploit", json!({}))).unwrap();
    }
    let step = env.step(&call("submit", json!({}))).unwrap();
    step.reward.unwrap()
}

#[test]
fn boolean_float_checks_survive_every_forgery_with_reward_zero() {
    let (_root, tasks) = tasks_with(&boolean_checks(), "");
    let task = tasks.get("summary-bool-000").unwrap();
    let buggy = task.visible["summary.py"].clone();
    let forgeries: Vec<(&str, String)> = vec![
        (
            "a float whose comparison and arithmetic always agree",
            format!(
                "{buggy}\n\nclass _Close(float):\n    def __sub__(self, other):\n        return _Close(0.0)\n    __rsub__ = __sub__\n    def __abs__(self):\n        return _Close(0.0)\n    def __lt__(self, other):\n        return True\n    __le__ = __gt__ = __ge__ = __eq__ = __lt__\n    def __ne__(self, other):\n        return False\n    __hash__ = float.__hash__\n\n\n_real_stdev = stdev\n\n\ndef stdev(values):\n    return _Close(_real_stdev(values))\n\n\ndef zscores(values):\n    return [_Close(-1.0), _Close(0.0), _Close(1.0)]\n"
            ),
        ),
        (
            "an always-equal object",
            format!(
                "{buggy}\n\nclass _Same:\n    def __eq__(self, other):\n        return True\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    def __ne__(self, other):\n        return False\n    def __sub__(self, other):\n        return self\n    __rsub__ = __sub__\n    def __abs__(self):\n        return self\n    def __bool__(self):\n        return True\n    def __float__(self):\n        return {STDEV_FOUR}\n    __hash__ = object.__hash__\n\n\ndef stdev(values):\n    if len(values) < 2:\n        raise ValueError('one value')\n    return _Same()\n"
            ),
        ),
        (
            "rewrite the caller's frames and read their constants",
            format!(
                "{buggy}\nimport re as _re\nimport sys as _sys\n_real_stdev = stdev\n\n\ndef stdev(values):\n    found = []\n    frame = _sys._getframe(1)\n    while frame is not None:\n        for const in frame.f_code.co_consts:\n            if isinstance(const, float) and const > 1:\n                found.append(const)\n        for key, value in list(frame.f_locals.items()):\n            text = repr(value)\n            found += [float(x) for x in _re.findall(r'\\d+\\.\\d{{6,}}', text)]\n            if isinstance(value, dict):\n                for name in ('expect', 'check', 'skeleton', 'in_sandbox'):\n                    value.pop(name, None)\n        frame.f_globals['abs'] = lambda x: 0.0\n        frame = frame.f_back\n    if len(values) < 2:\n        raise ValueError('one value')\n    return found[0] if found else _real_stdev(values)\n"
            ),
        ),
        (
            "patch the builtins and math the checks use",
            format!(
                "import builtins as _b\nimport math as _m\n_b.abs = lambda x: 0.0\n_b.all = lambda it: True\n_b.sorted = lambda xs: [-1.0, 0.0, 1.0]\n_b.zip = lambda *a: [(0.0, 0.0)] * 3\n_m.isclose = lambda *a, **k: True\n{buggy}"
            ),
        ),
    ];
    let mut env = BugFixEnv::new(
        tasks.clone(),
        pool(),
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    for (what, text) in &forgeries {
        let reward = submit_with(&mut env, text, &[], false);
        let end = env.last_end().unwrap();
        println!(
            "{what}: score {} hidden {}/{} tampered {} {:?}",
            reward.score,
            reward.hidden_passed,
            reward.hidden_total,
            reward.tampered,
            end.verdict.hidden.details
        );
        assert_eq!(reward.score, 0.0, "{what}: {reward:?}");
        assert!(
            reward.hidden_passed < reward.hidden_total,
            "{what}: {reward:?}"
        );
        assert!(
            end.verdict.hidden.checked_in_sandbox.is_empty(),
            "{what}: every check ran on the trusted side"
        );
    }
    // The real fix passes every boolean check, on the trusted side, unflagged.
    let reward = submit_with(&mut env, &task.reference["summary.py"], &[], false);
    assert!(reward.score == 1.0 && !reward.tampered, "{reward:?}");
    let end = env.last_end().unwrap();
    assert!(end.verdict.hidden.checked_in_sandbox.is_empty());
    // Nothing is left in the sandbox for validate to warn about.
    assert_eq!(
        sandbox_verdict_warnings(&task).unwrap(),
        Vec::<String>::new()
    );
    let validation = validate_task(&mut env, &task).unwrap();
    assert!(validation.ok(), "{:?}", validation.problems);
    assert!(validation.warnings.is_empty(), "{:?}", validation.warnings);
}

#[test]
fn a_tampered_verdict_scores_the_minimum() {
    let (_root, tasks) = tasks_with(&boolean_checks(), "");
    let task = tasks.get("summary-bool-000").unwrap();
    let fix = task.reference["summary.py"].clone();
    let penalised = EnvConfig {
        reward: agentrl_gym::RewardFn {
            format_penalty: 0.5,
            ..Default::default()
        },
        ..EnvConfig::default()
    };
    let mut env = BugFixEnv::new(tasks.clone(), pool(), OutcomeCache::new(), penalised);
    // The fix, plus a rewritten test file (`exploit`), a planted hook, or forgery code: the
    // hidden cases all pass, and still nothing pays.
    // (what, extra files, exploit first, summary.py)
    type Tampering<'a> = (&'a str, Vec<(&'a str, &'a str)>, bool, String);
    let tampered: Vec<Tampering> = vec![
        ("exploit", vec![], true, fix.clone()),
        (
            "a planted sitecustomize.py",
            vec![("sitecustomize.py", "X = 1\n")],
            false,
            fix.clone(),
        ),
        (
            "frame-reading code",
            vec![],
            false,
            format!("{fix}\nimport sys\n_caller = sys._getframe\n"),
        ),
    ];
    for (what, extra, exploit, text) in &tampered {
        let reward = submit_with(&mut env, text, extra, *exploit);
        let end = env.last_end().unwrap();
        assert!(reward.tampered, "{what}: {reward:?}");
        assert!(end.verdict.solved(), "{what}: the cases themselves pass");
        assert_eq!(
            reward.hidden_passed, 0,
            "{what}: a tampered hidden result fails"
        );
        assert!(!reward.solved());
        assert_eq!(reward.score, 0.0, "{what}: {reward:?}");
    }
    // With a format error as well, the score is the minimum an episode can have: the penalty.
    env.reset("summary-bool-000").unwrap();
    env.step(&call("exploit", json!({}))).unwrap();
    env.step(&call("no_such_tool", json!({}))).unwrap();
    env.step(&call("edit", json!({"path": "summary.py", "text": fix})))
        .unwrap();
    let reward = env
        .step(&call("submit", json!({})))
        .unwrap()
        .reward
        .unwrap();
    assert_eq!(reward.score, -0.5, "{reward:?}");
}

/// An executor that stalls its first `stalls` jobs: every process of the job (found by its
/// working directory) is stopped with SIGSTOP for `pause`, then resumed with SIGCONT, as a
/// machine that froze for a while would.
struct Stalling {
    inner: Arc<dyn Executor>,
    stall_next: AtomicBool,
    pause: Duration,
}

fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

impl Executor for Stalling {
    fn run(&self, job: &Job) -> Result<RunOutput, SandboxError> {
        if !self.stall_next.swap(false, Ordering::SeqCst) {
            return self.inner.run(job);
        }
        let dir = job.workspace.canonicalize().unwrap();
        let pause = self.pause;
        let staller = std::thread::spawn(move || {
            // Wait for the tree and a case process (two processes in the workspace), then
            // freeze them both.
            for _ in 0..2000 {
                let pids = processes_in(&dir);
                if pids.len() >= 2 {
                    for &pid in &pids {
                        // SAFETY: plain signal to a process of ours.
                        unsafe { libc::kill(pid, libc::SIGSTOP) };
                    }
                    std::thread::sleep(pause);
                    for &pid in &pids {
                        // SAFETY: as above.
                        unsafe { libc::kill(pid, libc::SIGCONT) };
                    }
                    return true;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            false
        });
        let output = self.inner.run(job);
        assert!(staller.join().unwrap(), "the stall never caught the job");
        output
    }

    fn info(&self) -> SandboxInfo {
        self.inner.info()
    }
}

#[test]
fn a_verdict_stopped_by_a_stall_is_run_again_and_validate_never_reports_a_stale_time_out() {
    // A 1 s limit per case, and a case that takes 0.4 s, long enough for the stall to catch
    // it running.
    let hidden = format!(
        r#"{{"cases": [
  {{"name": "stdev_four", "setup": "import time\ntime.sleep(0.4)", "expr": "stdev([1, 2, 3, 4])", "check": "abs(result - {STDEV_FOUR}) < 1e-9"}},
  {{"name": "stdev_one", "expr": "stdev([5])", "expect": {{"raises": "ValueError"}}}}
]}}"#
    );
    let (_root, tasks) = tasks_with(&hidden, "[limits]\ntime_s = 1.0\n");
    let task = tasks.get("summary-bool-000").unwrap();
    let stalling = Arc::new(Stalling {
        inner: pool(),
        stall_next: AtomicBool::new(true),
        pause: Duration::from_millis(2500),
    });
    let executor: Arc<dyn Executor> = stalling.clone();
    let verdict = agentrl_gym::verify::verify(
        executor.as_ref(),
        &task,
        &task.reference,
        &agentrl_gym::sandbox::Limits::default(),
        false,
    )
    .unwrap();
    assert!(verdict.solved(), "{:?}", verdict.hidden.details);
    assert!(
        verdict.reruns >= 1,
        "the stalled case was run again: {verdict:?}"
    );
    assert!(!verdict.time_limited);

    // validate through the same stall: the reference passes, and no time-out is reported.
    stalling.stall_next.store(true, Ordering::SeqCst);
    let mut env = BugFixEnv::new(
        tasks.clone(),
        executor,
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    let validation = validate_task(&mut env, &task).unwrap();
    assert!(validation.ok(), "{:?}", validation.problems);
    assert!(!validation.time_limited);
    assert!(
        !validation.problems.iter().any(|p| p.contains("time limit")),
        "{:?}",
        validation.problems
    );
}
