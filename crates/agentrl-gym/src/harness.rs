//! The Python harness programs the gym runs in the sandbox, and the trusted parsing of what they
//! report back on file descriptor 3.
//!
//! Two programs, both passed to the executor as source (they are never files in a workspace):
//! - [`PUBLIC_TESTS_PROGRAM`] runs `test_public.py` with `unittest` and reports each test's
//!   outcome, and for failures the exception type, message and line.
//! - [`HIDDEN_CASES_PROGRAM`] imports the modules and evaluates each hidden case (setup
//!   statements + an expression), reporting the actual outcome: the value's `repr` or the
//!   exception type name. The expected outcomes never enter the sandbox: [`score_hidden`]
//!   compares them here, on the trusted side. A case without exactly one well-formed record
//!   (a process that exited early, printed junk, or wrote duplicates) fails.
//!
//! Both write one JSON object per line to fd 3, so prints of the code under test on stdout
//! never count.

use std::collections::HashMap;

use serde::Deserialize;

use crate::sandbox::{RunOutput, Termination};
use crate::task::{HiddenCase, Outcome, PUBLIC_TEST_FILE};
use crate::types::{FailureInfo, TestReport};

/// Runs the workspace's `test_public.py`. Stdin: `{"modules": ["name.py", ...]}`.
pub const PUBLIC_TESTS_PROGRAM: &str = r#"
import sys
sys.dont_write_bytecode = True
import json, os, traceback, unittest
_spec = json.loads(sys.stdin.read())
_modules = set(_spec["modules"])
_out = os.fdopen(3, "w")

def _emit(record):
    _out.write(json.dumps(record) + "\n")
    _out.flush()

def _where(tb):
    frames = traceback.extract_tb(tb)
    for wanted in (lambda base: base in _modules, lambda base: base == "test_public.py"):
        hits = [f for f in frames if wanted(os.path.basename(f.filename))]
        if hits:
            return hits[-1].lineno, os.path.basename(hits[-1].filename)
    return None, None

class _Result(unittest.TestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        _emit({"test": getattr(test, "_testMethodName", str(test)), "ok": True})

    def _failed(self, test, err):
        exc_type, exc, tb = err
        line, file = _where(tb)
        _emit({"test": getattr(test, "_testMethodName", str(test)), "ok": False,
               "exception": exc_type.__name__, "message": str(exc)[:1000],
               "line": line, "file": file})

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._failed(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._failed(test, err)

try:
    import test_public
except BaseException as exc:
    line, file = _where(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        line, file = exc.lineno, os.path.basename(exc.filename)
    _emit({"crashed": "%s: %s" % (type(exc).__name__, str(exc)[:500]),
           "exception": type(exc).__name__, "line": line, "file": file})
else:
    unittest.defaultTestLoader.loadTestsFromModule(test_public).run(_Result())
    _emit({"done": True})
"#;

/// Evaluates hidden cases. Stdin: `{"modules": [...], "cases": [{"name", "setup", "expr"}]}`.
pub const HIDDEN_CASES_PROGRAM: &str = r#"
import sys
sys.dont_write_bytecode = True
import importlib, json, os
_spec = json.loads(sys.stdin.read())
_out = os.fdopen(3, "w")

def _emit(record):
    _out.write(json.dumps(record) + "\n")
    _out.flush()

_namespace = {}
try:
    for _module in _spec["modules"]:
        _namespace.update(vars(importlib.import_module(_module[:-3])))
except BaseException as exc:
    _emit({"import_error": "%s: %s" % (type(exc).__name__, str(exc)[:500])})
else:
    for _case in _spec["cases"]:
        _ns = dict(_namespace)
        try:
            exec(_case["setup"], _ns)
            _emit({"name": _case["name"], "value": repr(eval(_case["expr"], _ns))[:4000]})
        except BaseException as exc:
            _emit({"name": _case["name"], "raises": type(exc).__name__})
    _emit({"done": True})
"#;

/// Stdin for [`PUBLIC_TESTS_PROGRAM`].
pub fn public_stdin(modules: &[String]) -> Vec<u8> {
    serde_json::json!({ "modules": modules })
        .to_string()
        .into_bytes()
}

/// Stdin for [`HIDDEN_CASES_PROGRAM`]: names, setups and expressions only, no expectations.
pub fn hidden_stdin(modules: &[String], cases: &[HiddenCase]) -> Vec<u8> {
    let cases: Vec<_> = cases
        .iter()
        .map(|c| serde_json::json!({"name": c.name, "setup": c.setup, "expr": c.expr}))
        .collect();
    serde_json::json!({ "modules": modules, "cases": cases })
        .to_string()
        .into_bytes()
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

/// Why a run ended without its `done` record, for the report.
fn ended_early(output: &RunOutput) -> String {
    let how = match &output.termination {
        Termination::Exited { code } => format!("the test process exited with code {code}"),
        Termination::Signaled { signal } => {
            format!("the test process was killed by signal {signal}")
        }
        Termination::TimedOut => "the test run timed out".to_string(),
    };
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

/// Turns the fd-3 records of a public test run into a [`TestReport`].
pub fn parse_public(output: &RunOutput) -> TestReport {
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
                message: crashed.clone(),
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
                report.first_failure = Some(FailureInfo {
                    test: test.clone(),
                    exception: record.exception.unwrap_or_else(|| "Exception".into()),
                    message: record.message.unwrap_or_default(),
                    line: record.line,
                    file: record.file,
                });
            }
            report.failed.push(test);
        }
    }
    if !done {
        report.crashed = Some(ended_early(output));
    }
    report
}

/// Per-case verdicts of a hidden run, in the task's case order.
#[derive(Debug, Clone, PartialEq)]
pub struct HiddenScore {
    pub passed: Vec<bool>,
    /// The modules did not import, or the run ended early.
    pub problem: Option<String>,
}

impl HiddenScore {
    pub fn passed_count(&self) -> u32 {
        self.passed.iter().filter(|p| **p).count() as u32
    }
}

#[derive(Debug, Deserialize)]
struct HiddenRecord {
    name: Option<String>,
    value: Option<String>,
    raises: Option<String>,
    import_error: Option<String>,
    done: Option<bool>,
}

/// Compares the actual outcomes reported by [`HIDDEN_CASES_PROGRAM`] with the expected ones.
pub fn score_hidden(output: &RunOutput, cases: &[HiddenCase]) -> HiddenScore {
    let mut actual: HashMap<String, Vec<Outcome>> = HashMap::new();
    let mut problem = None;
    let mut done = false;
    for line in String::from_utf8_lossy(&output.result).lines() {
        let Ok(record) = serde_json::from_str::<HiddenRecord>(line) else {
            continue;
        };
        if let Some(err) = record.import_error {
            problem = Some(format!("the modules failed to import: {err}"));
        } else if record.done == Some(true) {
            done = true;
        } else if let Some(name) = record.name {
            let outcome = match (record.value, record.raises) {
                (Some(value), None) => Outcome::Value(value),
                (None, Some(raises)) => Outcome::Raises(raises),
                _ => continue,
            };
            actual.entry(name).or_default().push(outcome);
        }
    }
    if problem.is_none() && !done {
        problem = Some(ended_early(output));
    }
    let passed = cases
        .iter()
        .map(|case| matches!(actual.get(&case.name).map(Vec::as_slice), Some([only]) if *only == case.expect))
        .collect();
    HiddenScore { passed, problem }
}
