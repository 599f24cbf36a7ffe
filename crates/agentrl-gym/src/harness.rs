//! The Python harness programs the gym runs in the sandbox, and the trusted parsing of what they
//! report back on file descriptor 3.
//!
//! Two programs, both passed to the executor as source (they are never files in a workspace):
//! - [`PUBLIC_TESTS_PROGRAM`] runs `test_public.py`: its `unittest` test cases, then its plain
//!   pytest-style `test_*` functions (bare `assert`, no fixtures; collected here with the
//!   standard library only), and reports each test's outcome, and for failures the exception
//!   type, message and line.
//! - [`HIDDEN_CASE_PROGRAM`] runs *one* hidden case per process: it imports the modules,
//!   evaluates the case (setup statements + an expression) with pristine builtins and the
//!   modules' own names, and reports what it returned as plain data (see [`crate::check`]) or
//!   the exception it raised. One process per case is what makes the verdict trustworthy and
//!   robust: no other case (and no expected value, which never enters the sandbox at all) is in
//!   the process for the code under test to read, a hang or crash costs only its own case, and
//!   each case has its own time limit. [`score_case`] compares on this side; a case without
//!   exactly one well-formed record (a process that exited early, printed junk, or wrote
//!   duplicates) fails.
//!
//! Both write one JSON object per line to fd 3, so prints of the code under test on stdout
//! never count. A run stopped by a limit says so: "time limit of N s exceeded", "memory limit
//! of N MB exceeded".

use serde::Deserialize;

use crate::check::{Actual, Expect, Value};
use crate::sandbox::{Limits, RunOutput, Termination};
use crate::task::{module_import_name, HiddenCase, PUBLIC_TEST_FILE};
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

/// Runs one hidden case. Stdin: `{"modules": [import names], "setup": "...", "expr": "..."}`.
///
/// Everything lives in `_run`'s locals, so `sys.modules["__main__"]` exposes nothing but the
/// function; the builtins and helpers it uses are bound before any code under test runs, so a
/// module that rebinds names in `builtins` cannot reach them. The namespace of the case holds the
/// modules' own names minus dunders and minus names that shadow a builtin (reach those through
/// the module: `stats.sum(...)`), the top-level package of each module, and a fresh copy of
/// the pristine builtins as `__builtins__`.
pub const HIDDEN_CASE_PROGRAM: &str = r#"
import sys
sys.dont_write_bytecode = True
import builtins, importlib, json, os

def _run(type=type, repr=repr, str=str, len=len, dict=dict, list=list, tuple=tuple, set=set,
         frozenset=frozenset, int=int, float=float, bool=bool, bytes=bytes, compile=compile,
         exec=exec, eval=eval, BaseException=BaseException, getattr=getattr):
    pristine = dict(vars(builtins))
    dumps, write = json.dumps, os.write
    import_module = importlib.import_module
    modules_table = sys.modules
    spec = json.loads(sys.stdin.read())
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)

    def emit(record):
        view = memoryview((dumps(record) + "\n").encode())
        while view:
            view = view[write(3, view):]

    def plain(v, depth):
        # Exact types only: a subclass (or any object) could lie through __eq__ or __repr__.
        if depth > 100:
            raise ValueError("value nested more than 100 levels deep")
        t = type(v)
        if v is None:
            return None
        if t is bool or t is str:
            return v
        if t is int:
            return {"int": str(v)}
        if t is float:
            return {"float": repr(v)}
        if t is bytes:
            return {"bytes": v.hex()}
        if t is list or t is tuple or t is set or t is frozenset:
            return {t.__name__: [plain(x, depth + 1) for x in v]}
        if t is dict:
            return {"dict": [[plain(k, depth + 1), plain(x, depth + 1)] for k, x in v.items()]}
        try:
            text = repr(v)
            text = text if type(text) is str else None
        except BaseException:
            text = None
        return {"other": "%s.%s" % (getattr(t, "__module__", "?"), getattr(t, "__qualname__", "?")),
                "repr": text}

    namespace = {}
    try:
        for name in spec["modules"]:
            module = import_module(name)
            for key, value in list(vars(module).items()):
                if key.startswith("__") and key.endswith("__"):
                    continue
                if key in pristine:
                    continue
                namespace[key] = value
        for name in spec["modules"]:
            top = name.split(".")[0]
            if top not in pristine:
                namespace.setdefault(top, modules_table[top])
    except BaseException as exc:
        emit({"import_error": "%s: %s" % (type(exc).__name__, str(exc)[:500])})
        return
    namespace["__builtins__"] = dict(pristine)
    try:
        exec(compile(spec["setup"], "<setup>", "exec"), namespace)
        value = eval(compile(spec["expr"], "<expr>", "eval"), namespace)
    except BaseException as exc:
        t = type(exc)
        name = t.__name__
        emit({"raises": name, "lookalike": name in pristine and pristine[name] is not t})
    else:
        try:
            encoded = plain(value, 0)
        except BaseException as exc:
            emit({"unencodable": "%s: %s" % (type(exc).__name__, str(exc)[:200])})
        else:
            emit({"value": encoded})
    emit({"done": True})

_run()
"#;

/// Hidden-case results up to this many bytes are compared in full; a larger one fails the case
/// with a message saying so (never a silent cut).
pub const HIDDEN_RESULT_CAP_BYTES: usize = 4 << 20;

/// Stdin for [`PUBLIC_TESTS_PROGRAM`].
pub fn public_stdin(modules: &[String]) -> Vec<u8> {
    serde_json::json!({ "modules": modules })
        .to_string()
        .into_bytes()
}

/// Stdin for [`HIDDEN_CASE_PROGRAM`]: the import names, one case's setup and expression. The
/// expectation never enters the sandbox.
pub fn hidden_case_stdin(modules: &[String], case: &HiddenCase) -> Vec<u8> {
    let names: Vec<String> = modules.iter().map(|m| module_import_name(m)).collect();
    serde_json::json!({ "modules": names, "setup": case.setup, "expr": case.expr })
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
    /// Some case was stopped by a time limit: the verdict depends on machine load and must not
    /// be cached.
    pub time_limited: bool,
}

impl HiddenScore {
    pub fn passed_count(&self) -> u32 {
        self.passed.iter().filter(|p| **p).count() as u32
    }

    /// Adds one case's verdict.
    pub fn push(&mut self, case: &HiddenCase, verdict: CaseVerdict) {
        self.time_limited |= verdict.time_limited;
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
}

/// Compares what one [`HIDDEN_CASE_PROGRAM`] run reported with the case's expectation.
pub fn score_case(output: &RunOutput, case: &HiddenCase, limits: &Limits) -> CaseVerdict {
    let time_limit = output.time_limit_hit(limits);
    let problem = |detail: String| CaseVerdict {
        detail: Some(detail),
        run_problem: true,
        time_limited: time_limit.is_some(),
    };
    if let Some(limit) = time_limit {
        return problem(limit.to_string());
    }
    let mut outcomes: Vec<Result<Actual, String>> = Vec::new();
    let mut done = false;
    let mut unreadable = false;
    for line in String::from_utf8_lossy(&output.result).lines() {
        // A map, not a struct: `{"value": null}` (a case that returned None) must stay
        // distinct from a record without a value.
        let Ok(record) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
        else {
            unreadable = true;
            continue;
        };
        let text = |key: &str| record.get(key).and_then(|v| v.as_str()).map(str::to_string);
        if let Some(err) = text("import_error") {
            return problem(format!("the modules failed to import: {err}"));
        }
        if record.get("done") == Some(&serde_json::Value::Bool(true)) {
            done = true;
        } else if let Some(wire) = record.get("value") {
            outcomes.push(
                Value::from_wire(wire)
                    .map(Actual::Returned)
                    .map_err(|e| format!("unreadable value: {e}")),
            );
        } else if let Some(name) = text("raises") {
            let lookalike = record.get("lookalike") == Some(&serde_json::Value::Bool(true));
            outcomes.push(Ok(Actual::Raised { name, lookalike }));
        } else if let Some(why) = text("unencodable") {
            outcomes.push(Err(format!("the value is not plain data: {why}")));
        }
    }
    if output.truncated && (unreadable || !done) {
        return problem(format!(
            "the case's result is over the {}-byte output cap",
            limits.output_cap_bytes
        ));
    }
    if !done {
        return problem(format!(
            "{} before the case reported",
            how_it_ended(output, limits, "case process")
        ));
    }
    let detail = match outcomes.as_slice() {
        [Ok(Actual::Raised { name, .. })]
            if name == "MemoryError" && case.expect != Expect::Raises(name.clone()) =>
        {
            Some(format!("{} (MemoryError)", limits.memory_hit()))
        }
        [Ok(actual)] => case.expect.check(actual).err(),
        [Err(why)] => Some(why.clone()),
        [] => Some("no outcome was reported".into()),
        more => Some(format!("{} outcomes were reported, not one", more.len())),
    };
    CaseVerdict {
        detail,
        run_problem: false,
        time_limited: false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn output(result: &str, termination: Termination, truncated: bool) -> RunOutput {
        RunOutput {
            termination,
            stdout: Vec::new(),
            stderr: Vec::new(),
            result: result.as_bytes().to_vec(),
            truncated,
            elapsed: Duration::from_millis(10),
        }
    }

    fn case(expect: Expect) -> HiddenCase {
        HiddenCase {
            name: "c".into(),
            setup: String::new(),
            expr: "f()".into(),
            expect,
            time_limit_s: None,
        }
    }

    #[test]
    fn a_case_passes_only_with_exactly_one_good_record() {
        let limits = Limits::default();
        let exited = Termination::Exited { code: 0 };
        let expect = case(Expect::Value("None".into()));
        let one = "{\"value\": null}\n{\"done\": true}\n";
        assert_eq!(
            score_case(&output(one, exited.clone(), false), &expect, &limits).detail,
            None
        );
        let two = "{\"value\": null}\n{\"value\": null}\n{\"done\": true}\n";
        let verdict = score_case(&output(two, exited.clone(), false), &expect, &limits);
        assert!(verdict.detail.unwrap().contains("2 outcomes"));
        let early = score_case(
            &output("{\"value\": null}\n", exited.clone(), false),
            &expect,
            &limits,
        );
        assert!(early.run_problem && early.detail.unwrap().contains("exited with code 0"));
        let cut = score_case(&output("{\"value\": \"xx", exited, true), &expect, &limits);
        assert!(
            cut.detail.unwrap().contains("output cap"),
            "never a silent cut"
        );
        let hung = score_case(&output("", Termination::TimedOut, false), &expect, &limits);
        assert!(hung.time_limited);
        assert_eq!(hung.detail.as_deref(), Some("time limit of 5 s exceeded"));
        let xcpu = Termination::Signaled {
            signal: libc::SIGXCPU,
        };
        let cpu = score_case(&output("", xcpu, false), &expect, &limits);
        assert_eq!(cpu.detail.as_deref(), Some("time limit of 4 s exceeded"));
    }
}
