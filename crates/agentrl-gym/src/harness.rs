//! The Python harness programs the gym runs in the sandbox, and the trusted parsing of what they
//! report back on file descriptor 3.
//!
//! Two programs, both passed to the executor as source (they are never files in a workspace):
//! - [`PUBLIC_TESTS_PROGRAM`] runs `test_public.py`: its `unittest` test cases, then its plain
//!   pytest-style `test_*` functions (bare `assert`, no fixtures; collected here with the
//!   standard library only), and reports each test's outcome, and for failures the exception
//!   type, message and line.
//! - [`VERDICT_TREE_PROGRAM`] runs every hidden case of a verdict from one warm interpreter:
//!   it imports the modules once, then forks a case process per case, one at a time, each with
//!   its own time limits, namespace, pristine builtins and result pipe (`verdict_tree.py` says
//!   what it guards against). A case process reports what each call under test returned, as
//!   plain data (see [`crate::check`]), or the exception it raised; no expected value is ever
//!   in the sandbox. [`score_case`] compares on this side, through the trusted checker when the
//!   case has a check; a case without exactly one well-formed record per call (a process that
//!   exited early, printed junk, or wrote duplicates) fails.
//!
//! Both write JSON lines to fd 3, so prints of the code under test on stdout never count. A
//! run stopped by a limit says so: "time limit of N s exceeded", "memory limit of N MB
//! exceeded".

use serde::{Deserialize, Serialize};

use crate::check::{Actual, Expect, Value};
use crate::sandbox::{LimitHit, Limits, RunOutput, SandboxError, Termination};
use crate::task::{module_import_name, HiddenCase, PUBLIC_TEST_FILE};
use crate::trusted::{Evaluated, Split};
use crate::types::{FailureInfo, TestReport};

/// Runs the workspace's `test_public.py`. Stdin: `{"modules": ["name.py", "pkg/m.py", ...]}`.
pub const PUBLIC_TESTS_PROGRAM: &str = r#"
import sys
sys.dont_write_bytecode = True
import json, os, traceback, types, unittest
_spec = json.loads(sys.stdin.read())
_modules = set(_spec["modules"])
_out = os.fdopen(3, "w")

def _emit(record):
    _out.write(json.dumps(record) + "\n")
    _out.flush()

def _rel(filename):
    try:
        return os.path.relpath(filename).replace(os.sep, "/")
    except ValueError:
        return filename

def _where(tb):
    frames = traceback.extract_tb(tb)
    for wanted in (lambda rel: rel in _modules, lambda rel: rel == "test_public.py"):
        hits = [f for f in frames if wanted(_rel(f.filename))]
        if hits:
            return hits[-1].lineno, _rel(hits[-1].filename), hits[-1].line
    return None, None, None

def _failed(name, err):
    exc_type, exc, tb = err
    line, file, text = _where(tb)
    message = str(exc)
    if not message and exc_type is AssertionError and text:
        message = text  # a bare `assert`: show the statement
    _emit({"test": name, "ok": False, "exception": exc_type.__name__, "message": message[:1000],
           "line": line, "file": file})

class _Result(unittest.TestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        _emit({"test": getattr(test, "_testMethodName", str(test)), "ok": True})

    def addFailure(self, test, err):
        super().addFailure(test, err)
        _failed(getattr(test, "_testMethodName", str(test)), err)

    def addError(self, test, err):
        super().addError(test, err)
        _failed(getattr(test, "_testMethodName", str(test)), err)

def _plain_tests(module):
    # pytest-style: module-level functions named test*, defined in the test file itself, in
    # definition order. No fixtures: a test that needs arguments fails with a TypeError.
    return [(name, obj) for name, obj in list(vars(module).items())
            if name.startswith("test") and isinstance(obj, types.FunctionType)
            and obj.__module__ == module.__name__]

try:
    import test_public
except BaseException as exc:
    line, file, _ = _where(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        line, file = exc.lineno, _rel(exc.filename)
    _emit({"crashed": "%s: %s" % (type(exc).__name__, str(exc)[:500]),
           "exception": type(exc).__name__, "line": line, "file": file})
else:
    unittest.defaultTestLoader.loadTestsFromModule(test_public).run(_Result())
    for _name, _test in _plain_tests(test_public):
        try:
            _test()
        except BaseException:
            _failed(_name, sys.exc_info())
        else:
            _emit({"test": _name, "ok": True})
    _emit({"done": True})
"#;

// The verdict tree is embedded with the sandbox that starts it; named here too, where its
// stdin and its output are made and read.
pub use crate::sandbox::programs::VERDICT_TREE_PROGRAM;

/// Hidden-case results up to this many bytes are compared in full; a larger one fails the case
/// with a message saying so (never a silent cut).
pub const HIDDEN_RESULT_CAP_BYTES: usize = 4 << 20;

/// Stdin for [`PUBLIC_TESTS_PROGRAM`].
pub fn public_stdin(modules: &[String]) -> Vec<u8> {
    serde_json::json!({ "modules": modules })
        .to_string()
        .into_bytes()
}

/// One hidden case as the verdict tree runs it: the setup and the calls under test (the
/// trusted checker's split of `expr`). Its check is sent only in `in_sandbox`, for a case
/// whose values the trusted side could not rebuild (objects of the task's own classes).
#[derive(Debug, Serialize)]
pub struct TreeCase<'a> {
    pub setup: &'a str,
    pub parts: &'a [String],
    /// The trusted side computes this case's check: report subclasses of plain types by the
    /// value their base type holds.
    pub unwrap: bool,
    pub in_sandbox: Option<InSandbox<'a>>,
    pub time_limit_s: f64,
    pub cpu_s: u64,
}

/// A check the case process evaluates itself (forgeable; `validate` warns).
#[derive(Debug, Serialize)]
pub struct InSandbox<'a> {
    pub skeleton: Option<&'a str>,
    pub check: Option<&'a str>,
}

/// Stdin for [`VERDICT_TREE_PROGRAM`]: the import names and the cases (never an expectation).
pub fn tree_stdin(modules: &[String], cases: &[TreeCase], result_cap: usize) -> Vec<u8> {
    let names: Vec<String> = modules.iter().map(|m| module_import_name(m)).collect();
    serde_json::json!({ "modules": names, "cases": cases, "result_cap": result_cap })
        .to_string()
        .into_bytes()
}

/// What a verdict tree reported: an import failure, or each case's run (`None` for a case the
/// tree never reported, e.g. because the tree was stopped first).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeReport {
    pub import_error: Option<String>,
    pub cases: Vec<Option<RunOutput>>,
}

#[derive(Debug, Deserialize)]
struct TreeRecord {
    case: Option<usize>,
    result: Option<String>,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    elapsed_s: f64,
    code: Option<i32>,
    signal: Option<i32>,
    #[serde(default)]
    timed_out: bool,
    import_error: Option<String>,
}

/// Splits the tree's fd-3 stream into one [`RunOutput`] per case (its records as `result`,
/// the tree's stderr as `stderr`). A case reported twice keeps its first report.
pub fn parse_tree(output: &RunOutput, cases: usize) -> TreeReport {
    let mut report = TreeReport {
        import_error: None,
        cases: vec![None; cases],
    };
    for line in String::from_utf8_lossy(&output.result).lines() {
        let Ok(record) = serde_json::from_str::<TreeRecord>(line) else {
            continue;
        };
        if let Some(error) = record.import_error {
            report.import_error.get_or_insert(error);
            continue;
        }
        let Some(slot) = record.case.and_then(|i| report.cases.get_mut(i)) else {
            continue;
        };
        if slot.is_some() {
            continue;
        }
        let termination = if record.timed_out {
            Termination::TimedOut
        } else if let Some(signal) = record.signal {
            Termination::Signaled { signal }
        } else {
            Termination::Exited {
                code: record.code.unwrap_or(-1),
            }
        };
        *slot = Some(RunOutput {
            termination,
            stdout: Vec::new(),
            stderr: output.stderr.clone(),
            result: record.result.unwrap_or_default().into_bytes(),
            truncated: record.truncated,
            elapsed: std::time::Duration::from_secs_f64(record.elapsed_s.max(0.0)),
        });
    }
    report
}

#[derive(Debug, Deserialize)]
struct PublicRecord {
    test: Option<String>,
    ok: Option<bool>,
    exception: Option<String>,
    message: Option<String>,
    line: Option<u32>,
    file: Option<String>,
    crashed: Option<String>,
    done: Option<bool>,
}

/// How a run ended, for the report: a limit that stopped it, by name, else the exit status.
fn how_it_ended(output: &RunOutput, limits: &Limits, what: &str) -> String {
    if let Some(limit) = output.time_limit_hit(limits) {
        return format!("{limit} (the {what} was stopped)");
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr
        .lines()
        .last()
        .is_some_and(|l| l.starts_with("MemoryError"))
    {
        return format!("{} (the {what} raised MemoryError)", limits.memory_hit());
    }
    match &output.termination {
        Termination::Exited { code } => format!("the {what} exited with code {code}"),
        Termination::Signaled { signal } => format!("the {what} was killed by signal {signal}"),
        Termination::TimedOut => format!("the {what} timed out"),
    }
}

/// Why a run ended without its `done` record, for the report.
fn ended_early(output: &RunOutput, limits: &Limits) -> String {
    let how = how_it_ended(output, limits, "test process");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
    if tail.is_empty() {
        format!("{how} before the tests finished")
    } else {
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{how} before the tests finished; stderr ends: {}",
            tail.join(" | ")
        )
    }
}

/// A failure message, with the memory limit named when the failure is a `MemoryError`.
fn failure_message(exception: &str, message: String, limits: &Limits) -> String {
    if exception == "MemoryError" {
        format!("{} (MemoryError) {message}", limits.memory_hit())
            .trim_end()
            .to_string()
    } else {
        message
    }
}

/// Turns the fd-3 records of a public test run into a [`TestReport`]. A run stopped by a limit
/// has `crashed` = "time limit of N s exceeded (…)" (or the memory limit), whatever tests it
/// reported before.
pub fn parse_public(output: &RunOutput, limits: &Limits) -> TestReport {
    let mut report = TestReport::default();
    let mut done = false;
    for line in String::from_utf8_lossy(&output.result).lines() {
        let Ok(record) = serde_json::from_str::<PublicRecord>(line) else {
            continue;
        };
        if let Some(crashed) = record.crashed {
            report.first_failure.get_or_insert(FailureInfo {
                test: PUBLIC_TEST_FILE.to_string(),
                exception: record
                    .exception
                    .clone()
                    .unwrap_or_else(|| "Exception".into()),
                message: failure_message(
                    record.exception.as_deref().unwrap_or_default(),
                    crashed.clone(),
                    limits,
                ),
                line: record.line,
                file: record.file.clone(),
            });
            report.crashed = Some(crashed);
            done = true;
            continue;
        }
        if record.done == Some(true) {
            done = true;
            continue;
        }
        let (Some(test), Some(ok)) = (record.test, record.ok) else {
            continue;
        };
        if ok {
            report.passed.push(test);
        } else {
            if report.first_failure.is_none() {
                let exception = record.exception.unwrap_or_else(|| "Exception".into());
                report.first_failure = Some(FailureInfo {
                    test: test.clone(),
                    message: failure_message(
                        &exception,
                        record.message.unwrap_or_default(),
                        limits,
                    ),
                    exception,
                    line: record.line,
                    file: record.file,
                });
            }
            report.failed.push(test);
        }
    }
    if !done {
        report.crashed = Some(ended_early(output, limits));
    } else if let Some(limit) = output.time_limit_hit(limits) {
        // Finished its records but was stopped on the way out (atexit, threads): still a limit.
        report.crashed = Some(format!("{limit} (the test process was stopped)"));
    }
    report
}

/// Says in `report` that the run left its workspace full (`hit`, a quota limit): in `crashed`,
/// ahead of whatever else broke the run, since the tests it did report may have failed for it.
pub fn note_limit(report: &mut TestReport, hit: LimitHit) {
    let note = format!("{hit}: writes in the workspace failed with ENOSPC");
    report.crashed = Some(match report.crashed.take() {
        Some(crashed) => format!("{note}; {crashed}"),
        None => note,
    });
}

/// Per-case verdicts of the hidden cases, in the task's case order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HiddenScore {
    pub passed: Vec<bool>,
    /// Why each failing case failed (`None` for a pass). For task authors (`validate`); never
    /// shown to the agent, which sees only counts.
    pub details: Vec<Option<String>>,
    /// The first run-level problem (the modules did not import, a case ended early or hit a
    /// limit), for a one-line summary.
    pub problem: Option<String>,
    /// Some case was stopped by a time limit even when run again: the verdict depends on
    /// machine load and must not be cached.
    pub time_limited: bool,
    /// Names of the cases whose check ran inside the candidate's process (see
    /// [`CaseVerdict::checked_in_sandbox`]).
    pub checked_in_sandbox: Vec<String>,
}

impl HiddenScore {
    pub fn passed_count(&self) -> u32 {
        self.passed.iter().filter(|p| **p).count() as u32
    }

    /// Adds one case's verdict.
    pub fn push(&mut self, case: &HiddenCase, verdict: CaseVerdict) {
        self.time_limited |= verdict.time_limited;
        if verdict.checked_in_sandbox {
            self.checked_in_sandbox.push(case.name.clone());
        }
        if verdict.run_problem && self.problem.is_none() {
            self.problem = verdict
                .detail
                .as_ref()
                .map(|d| format!("case `{}`: {d}", case.name));
        }
        self.passed.push(verdict.detail.is_none());
        self.details.push(verdict.detail);
    }
}

/// The verdict on one hidden case.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseVerdict {
    /// `None` when the case passed, else why not.
    pub detail: Option<String>,
    /// The run itself went wrong (import error, early exit, limit), not just the value.
    pub run_problem: bool,
    pub time_limited: bool,
    /// The case's check had to be evaluated inside the candidate's process (a part's value
    /// was not plain data), where it can be forged; `validate` warns about it.
    pub checked_in_sandbox: bool,
}

impl CaseVerdict {
    fn problem(detail: String, time_limited: bool) -> Self {
        CaseVerdict {
            detail: Some(detail),
            run_problem: true,
            time_limited,
            checked_in_sandbox: false,
        }
    }
}

/// The verdict on a case the tree never reported: the tree ended first (its time limit, or
/// the code under test killed it). A tree stopped by a time limit makes the case time-limited,
/// so the verifier runs it again.
pub fn unreported_case(tree: &RunOutput, tree_limits: &Limits) -> CaseVerdict {
    let time_limited = tree.time_limit_hit(tree_limits).is_some();
    CaseVerdict::problem(
        format!(
            "{} before the case ran",
            how_it_ended(tree, tree_limits, "verdict process")
        ),
        time_limited,
    )
}

/// One outcome record of a case process, decoded.
type Reported = Result<Actual, String>;

fn reported(
    record: &serde_json::Map<String, serde_json::Value>,
    raise_key: &str,
) -> Option<Reported> {
    let text = |key: &str| record.get(key).and_then(|v| v.as_str()).map(str::to_string);
    if let Some(name) = text(raise_key) {
        let lookalike = record.get("lookalike") == Some(&serde_json::Value::Bool(true));
        return Some(Ok(Actual::Raised { name, lookalike }));
    }
    if let Some(why) = text("unencodable") {
        return Some(Err(format!("the value is not plain data: {why}")));
    }
    None
}

fn decoded(wire: &serde_json::Value) -> Reported {
    Value::from_wire(wire)
        .map(Actual::Returned)
        .map_err(|e| format!("unreadable value: {e}"))
}

/// What a case process reported, read (see `verdict_tree.py`, `run_case`).
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRecords {
    /// The setup raised: that is the case's outcome.
    pub setup_raised: Option<Actual>,
    /// Each part's outcome, with its record as the trusted checker takes it.
    pub parts: Vec<(serde_json::Value, Reported)>,
    /// The check evaluated in the case process, when a part was not plain data.
    pub fallback: Option<Reported>,
}

/// Reads one case process's records: exactly one record per part (or one setup exception),
/// then `done`. Anything else (an early exit, a limit, junk, duplicates) is the case's failure.
pub fn read_case(
    output: &RunOutput,
    limits: &Limits,
    parts: usize,
) -> Result<CaseRecords, CaseVerdict> {
    let time_limit = output.time_limit_hit(limits);
    if let Some(limit) = time_limit {
        return Err(CaseVerdict::problem(limit.to_string(), true));
    }
    let mut records = CaseRecords {
        setup_raised: None,
        parts: Vec::new(),
        fallback: None,
    };
    let mut slots: Vec<Vec<(serde_json::Value, Reported)>> = vec![Vec::new(); parts];
    let mut setup_raised = Vec::new();
    let mut fallbacks = Vec::new();
    let mut done = false;
    let mut unreadable = false;
    let mut stray = 0;
    for line in String::from_utf8_lossy(&output.result).lines() {
        // A map, not a struct: `{"value": null}` (a case that returned None) must stay
        // distinct from a record without a value.
        let Ok(record) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
        else {
            unreadable = true;
            continue;
        };
        if record.get("done") == Some(&serde_json::Value::Bool(true)) {
            done = true;
            continue;
        }
        if let Some(wire) = record.get("fallback") {
            fallbacks.push(decoded(wire));
            continue;
        }
        if let Some(fallback) = reported(&record, "fallback_raises") {
            fallbacks.push(fallback);
            continue;
        }
        let part = record.get("part").and_then(|p| p.as_u64());
        let outcome = match record.get("value") {
            Some(wire) => Some(decoded(wire)),
            None => reported(&record, "raises"),
        };
        match (part, outcome) {
            (Some(index), Some(outcome)) if (index as usize) < parts => {
                let mut wire = record.clone();
                wire.remove("part");
                slots[index as usize].push((serde_json::Value::Object(wire), outcome));
            }
            (None, Some(Ok(raised @ Actual::Raised { .. }))) => setup_raised.push(raised),
            _ => stray += 1,
        }
    }
    if output.truncated && (unreadable || !done) {
        return Err(CaseVerdict::problem(
            format!(
                "the case's result is over the {}-byte output cap",
                limits.output_cap_bytes
            ),
            false,
        ));
    }
    if !done {
        return Err(CaseVerdict::problem(
            format!(
                "{} before the case reported",
                how_it_ended(output, limits, "case process")
            ),
            false,
        ));
    }
    let fail = |detail: String| {
        Err(CaseVerdict {
            detail: Some(detail),
            run_problem: false,
            time_limited: false,
            checked_in_sandbox: false,
        })
    };
    let reports: usize = slots.iter().map(Vec::len).sum::<usize>() + setup_raised.len() + stray;
    if setup_raised.len() == 1 && reports == 1 && fallbacks.is_empty() {
        records.setup_raised = setup_raised.pop();
        return Ok(records);
    }
    if reports == 0 {
        return fail("no outcome was reported".into());
    }
    if stray > 0
        || !setup_raised.is_empty()
        || slots.iter().any(|s| s.len() != 1)
        || fallbacks.len() > 1
    {
        return fail(format!("{reports} outcomes were reported, not {parts}"));
    }
    records.parts = slots.into_iter().filter_map(|mut s| s.pop()).collect();
    records.fallback = fallbacks.pop();
    Ok(records)
}

/// How a case scored: a verdict, or the news that its check has to run in the case process
/// (a value the trusted side cannot rebuild), which the verifier then asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Scored {
    Verdict(CaseVerdict),
    NeedsSandboxCheck,
}

/// Scores one case: its records, its trusted evaluation where the expression has a skeleton
/// or the case a check (`evaluate` takes the parts' records: the trusted checker), and the
/// comparison with `expect`.
pub fn score_case(
    output: &RunOutput,
    case: &HiddenCase,
    split: &Split,
    limits: &Limits,
    evaluate: impl FnOnce(&[serde_json::Value]) -> Result<Evaluated, SandboxError>,
) -> Result<Scored, SandboxError> {
    let records = match read_case(output, limits, split.parts.len()) {
        Ok(records) => records,
        Err(verdict) => return Ok(Scored::Verdict(verdict)),
    };
    let mut checked_in_sandbox = false;
    let actual: Reported = if let Some(raised) = records.setup_raised {
        Ok(raised)
    } else if split.is_trivial() && case.check.is_none() {
        records
            .parts
            .into_iter()
            .next()
            .map(|(_, r)| r)
            .unwrap_or_else(|| Err("no outcome was reported".into()))
    } else if let Some(why) = records.parts.iter().find_map(|(_, r)| r.as_ref().err()) {
        Err(why.clone())
    } else if records.parts.iter().all(|(_, r)| {
        matches!(r, Ok(Actual::Returned(v)) if v.is_plain())
            || matches!(r, Ok(Actual::Raised { .. }))
    }) {
        let wires: Vec<serde_json::Value> = records.parts.into_iter().map(|(w, _)| w).collect();
        match evaluate(&wires)? {
            Evaluated::TimedOut => {
                return Ok(Scored::Verdict(CaseVerdict::problem(
                    format!(
                        "{} (the trusted check was stopped)",
                        LimitHit::Time {
                            time_limit_s: limits.time_limit.as_secs_f64()
                        }
                    ),
                    true,
                )))
            }
            Evaluated::Outcome(record) => match record.as_object() {
                Some(map) => match map.get("value") {
                    Some(wire) => decoded(wire),
                    None => reported(map, "raises")
                        .unwrap_or_else(|| Err("the trusted check reported nothing".into())),
                },
                None => Err("the trusted check reported nothing".into()),
            },
        }
    } else {
        let Some(fallback) = records.fallback else {
            return Ok(Scored::NeedsSandboxCheck);
        };
        checked_in_sandbox = true;
        fallback
    };
    let detail = match actual {
        Ok(Actual::Raised { name, .. })
            if name == "MemoryError" && case.expect != Expect::Raises(name.clone()) =>
        {
            Some(format!("{} (MemoryError)", limits.memory_hit()))
        }
        Ok(actual) => case.expect.check(&actual).err(),
        Err(why) => Some(why),
    };
    Ok(Scored::Verdict(CaseVerdict {
        detail,
        run_problem: false,
        time_limited: false,
        checked_in_sandbox,
    }))
}
