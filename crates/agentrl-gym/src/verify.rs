//! The verifier and the tamper check: the trusted end of an episode.
//!
//! `submit` lands here. The verifier copies only the agent's source modules (plus pristine
//! support files) into a fresh directory and runs every hidden case there as one warm job tree
//! (`verdict_tree.py`): the modules are imported once, and each case runs in a process forked
//! from that interpreter, with its own limits, namespace, pristine builtins and result pipe,
//! one case at a time, the workspace put back between cases (so nothing one case plants
//! reaches another, and a hang fails only its own case). The sandbox reports values, never
//! verdicts: a check written into a case (`abs(f(x) - y) < eps`, or a case's `check`) is split
//! out and evaluated by the trusted checker ([`crate::trusted`]), and the comparison with the
//! expectation happens on this side ([`crate::check`]); expected values never enter the
//! sandbox. A case stopped by a time limit is run once more before it counts. `validate` also
//! runs the pristine public tests against the modules; an episode's reward does not need them.
//!
//! The tamper check compares the agent's workspace with the task's pristine files, and looks
//! in edited modules for constructs that only serve to fool a verifier; a tampered workspace
//! earns no verdict (see `reward.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::Path;

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::harness::{self, CaseVerdict, HiddenScore, InSandbox, Scored, TreeCase};
use crate::sandbox::{Executor, Job, Limits, Quota, RunOutput, SandboxError};
use crate::task::{Task, PUBLIC_TEST_FILE};
use crate::trusted::{self, Split, TrustedChecker};
use crate::types::TestReport;

/// What the verifier found for one set of module contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The pristine public tests against the agent's modules, when asked for (`validate`
    /// needs them; an episode's reward does not, so episodes skip that run).
    pub public: Option<TestReport>,
    pub hidden: HiddenScore,
    /// Some run hit a time limit even when run again: the verdict depends on machine load, so
    /// it is never cached.
    pub time_limited: bool,
    /// Runs repeated because a time limit stopped them the first time (a case, or the public
    /// test run).
    pub reruns: u32,
}

impl Verdict {
    pub fn hidden_passed(&self) -> u32 {
        self.hidden.passed_count()
    }
    pub fn hidden_total(&self) -> u32 {
        self.hidden.passed.len() as u32
    }
    pub fn solved(&self) -> bool {
        self.hidden_total() > 0 && self.hidden_passed() == self.hidden_total()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("verifier scratch directory: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Writes `files` (relative paths, `pkg/m.py` included) under `root`, creating folders.
pub fn write_files<'a>(
    root: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), std::io::Error> {
    for (name, content) in files {
        let path = root.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}

/// A verifier workspace holding `files`, with the quota of `limits`.
fn scratch_dir(
    files: &[(&str, &str)],
    limits: &Limits,
) -> Result<crate::sandbox::ScratchDir, std::io::Error> {
    let dir = crate::sandbox::bounded_scratch_dir("agentrl-verify-", Quota::of(limits))?;
    write_files(dir.path(), files.iter().copied())?;
    Ok(dir)
}

/// Everything the verifier needs about a task's hidden cases, prepared once per verdict.
struct Cases<'a> {
    task: &'a Task,
    /// The modules under test are the task's reference fix.
    reference_run: bool,
    splits: Vec<Arc<Split>>,
    limits: Vec<Limits>,
    checker: &'static TrustedChecker,
}

impl<'a> Cases<'a> {
    /// Splits every case's expression (through the trusted checker) and works out its limits.
    fn new(
        task: &'a Task,
        modules: &BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<Self, VerifyError> {
        let checker = trusted::checker()?;
        Ok(Cases {
            task,
            reference_run: *modules == task.reference,
            splits: task
                .hidden
                .iter()
                .map(|c| checker.split(&c.expr, &c.setup))
                .collect::<Result<_, _>>()?,
            limits: task
                .hidden
                .iter()
                .map(|c| {
                    let mut l = task.case_limits(c, limits);
                    l.output_cap_bytes = l.output_cap_bytes.max(harness::HIDDEN_RESULT_CAP_BYTES);
                    l
                })
                .collect(),
            checker,
        })
    }

    /// Runs the cases `which` as verdict trees in fresh directories holding `files`: first
    /// with every check on the trusted side, then, only for cases whose values the trusted
    /// side could not rebuild, again with the check in the case process (flagged).
    fn run(
        &self,
        executor: &dyn Executor,
        files: &[(&str, &str)],
        base: &Limits,
        which: &[usize],
    ) -> Result<Vec<CaseVerdict>, VerifyError> {
        let first = self.run_tree(executor, files, base, which, false)?;
        let needs: Vec<usize> = which
            .iter()
            .zip(&first)
            .filter(|(_, s)| matches!(s, Scored::NeedsSandboxCheck))
            .map(|(&i, _)| i)
            .collect();
        // A candidate must not be able to pick the forgeable path by returning an object: a
        // check runs in the case process only where the reference fix's own values are
        // objects too (a task that compares instances of its own classes).
        let allowed = if needs.is_empty() {
            BTreeSet::new()
        } else if self.reference_run {
            needs.iter().copied().collect()
        } else {
            self.reference_objects(executor, base)?
        };
        let in_sandbox: Vec<usize> = needs
            .iter()
            .copied()
            .filter(|i| allowed.contains(i))
            .collect();
        let mut second = if in_sandbox.is_empty() {
            Vec::new()
        } else {
            self.run_tree(executor, files, base, &in_sandbox, true)?
        }
        .into_iter();
        Ok(first
            .into_iter()
            .enumerate()
            .map(|(position, scored)| match scored {
                Scored::Verdict(v) => v,
                Scored::NeedsSandboxCheck => {
                    let i = which[position];
                    if allowed.contains(&i) {
                        match second.next() {
                            Some(Scored::Verdict(v)) => v,
                            _ => CaseVerdict {
                                detail: Some("a value is not plain data and its check reported nothing".into()),
                                run_problem: true,
                                time_limited: false,
                                checked_in_sandbox: true,
                            },
                        }
                    } else {
                        CaseVerdict {
                            detail: Some("returned an object where the reference fix returns plain data: the check needs plain values".into()),
                            run_problem: false,
                            time_limited: false,
                            checked_in_sandbox: false,
                        }
                    }
                }
            })
            .collect())
    }

    /// The cases whose values the reference fix itself reports as objects (cached per task and
    /// reference, process-wide: one extra tree the first time a candidate returns an object).
    fn reference_objects(
        &self,
        executor: &dyn Executor,
        base: &Limits,
    ) -> Result<BTreeSet<usize>, VerifyError> {
        static KNOWN: std::sync::LazyLock<std::sync::Mutex<HashMap<u64, BTreeSet<usize>>>> =
            std::sync::LazyLock::new(Default::default);
        let key = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (&self.task.id, &self.task.reference, &self.task.hidden.len()).hash(&mut hasher);
            hasher.finish()
        };
        if let Some(known) = KNOWN.lock().ok().and_then(|k| k.get(&key).cloned()) {
            return Ok(known);
        }
        let files = verdict_files(self.task, &self.task.reference);
        let all: Vec<usize> = (0..self.task.hidden.len()).collect();
        let scored = self.run_tree(executor, &files, base, &all, false)?;
        let objects: BTreeSet<usize> = scored
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Scored::NeedsSandboxCheck))
            .map(|(i, _)| i)
            .collect();
        if let Ok(mut known) = KNOWN.lock() {
            known.insert(key, objects.clone());
        }
        Ok(objects)
    }

    /// One verdict tree over the cases `which`; with `in_sandbox`, each case process also
    /// evaluates its case's check.
    fn run_tree(
        &self,
        executor: &dyn Executor,
        files: &[(&str, &str)],
        base: &Limits,
        which: &[usize],
        in_sandbox: bool,
    ) -> Result<Vec<Scored>, VerifyError> {
        let tree_cases: Vec<TreeCase> = which
            .iter()
            .map(|&i| {
                let case = &self.task.hidden[i];
                let split = &self.splits[i];
                let trusted_check = !split.is_trivial() || case.check.is_some();
                TreeCase {
                    setup: &case.setup,
                    parts: &split.parts,
                    unwrap: trusted_check,
                    in_sandbox: (in_sandbox && trusted_check).then(|| InSandbox {
                        skeleton: split.skeleton.as_deref(),
                        check: case.check.as_deref(),
                    }),
                    time_limit_s: self.limits[i].time_limit.as_secs_f64(),
                    cpu_s: self.limits[i].cpu_seconds,
                }
            })
            .collect();
        // The tree's own limits: every case's, one after another, plus one run's worth for
        // the import (what each case process used to spend on it).
        let mut tree_limits = base.clone();
        for &i in which {
            tree_limits.time_limit += self.limits[i].time_limit;
            tree_limits.cpu_seconds += self.limits[i].cpu_seconds;
        }
        tree_limits.output_cap_bytes = tree_limits
            .output_cap_bytes
            .max((2 * harness::HIDDEN_RESULT_CAP_BYTES + (64 << 10)) * which.len().max(1));
        // A fresh directory per tree; inside it, the tree puts the workspace back between cases.
        let dir = scratch_dir(files, &tree_limits)?;
        let output = executor.run(&Job {
            workspace: dir.path().to_path_buf(),
            program: harness::VERDICT_TREE_PROGRAM.to_string(),
            stdin: harness::tree_stdin(
                &self.task.modules,
                &tree_cases,
                harness::HIDDEN_RESULT_CAP_BYTES,
            ),
            limits: tree_limits.clone(),
        })?;
        let report = harness::parse_tree(&output, which.len());
        let mut scored = Vec::with_capacity(which.len());
        for (&i, run) in which.iter().zip(report.cases) {
            let case = &self.task.hidden[i];
            let limits = &self.limits[i];
            scored.push(match (&report.import_error, run) {
                (Some(error), _) => Scored::Verdict(CaseVerdict {
                    detail: Some(format!("the modules failed to import: {error}")),
                    run_problem: true,
                    time_limited: false,
                    checked_in_sandbox: false,
                }),
                (None, Some(run)) => {
                    harness::score_case(&run, case, &self.splits[i], limits, |parts| {
                        self.checker.evaluate(
                            self.splits[i].skeleton.as_deref(),
                            case.check.as_deref(),
                            parts,
                            limits.time_limit,
                        )
                    })?
                }
                (None, None) => Scored::Verdict(harness::unreported_case(&output, &tree_limits)),
            });
        }
        Ok(scored)
    }
}

/// The baseline the verdict tree replaced, for `agentrl bench gym`: each hidden case in a job
/// of its own (the same program, one case), so every case pays a process start and an import.
pub fn verify_case_by_case(
    executor: &dyn Executor,
    task: &Task,
    modules: &BTreeMap<String, String>,
    limits: &Limits,
) -> Result<HiddenScore, VerifyError> {
    let files = verdict_files(task, modules);
    let cases = Cases::new(task, modules, limits)?;
    let base = task.run_limits(limits);
    let mut hidden = HiddenScore::default();
    for (i, case) in task.hidden.iter().enumerate() {
        let verdict = cases.run(executor, &files, &base, &[i])?.remove(0);
        hidden.push(case, verdict);
    }
    Ok(hidden)
}

/// The agent's modules and the task's pristine support files.
fn verdict_files<'a>(
    task: &'a Task,
    modules: &'a BTreeMap<String, String>,
) -> Vec<(&'a str, &'a str)> {
    let mut files: Vec<(&str, &str)> = task
        .modules
        .iter()
        .filter_map(|m| modules.get(m).map(|c| (m.as_str(), c.as_str())))
        .collect();
    files.extend(
        task.support
            .iter()
            .filter_map(|f| task.visible.get(f).map(|c| (f.as_str(), c.as_str()))),
    );
    files
}

/// Runs every hidden case against `modules` (name → content) under the task's limits on top of
/// `limits`, and with `with_public` the pristine public tests too. A case or run stopped by a
/// time limit is run once more before it counts (a stalled machine must not fail a fix), and
/// [`Verdict::reruns`] counts those.
pub fn verify(
    executor: &dyn Executor,
    task: &Task,
    modules: &BTreeMap<String, String>,
    limits: &Limits,
    with_public: bool,
) -> Result<Verdict, VerifyError> {
    let mut files = verdict_files(task, modules);
    let cases = Cases::new(task, modules, limits)?;
    let base = task.run_limits(limits);
    let all: Vec<usize> = (0..task.hidden.len()).collect();
    let mut verdicts = cases.run(executor, &files, &base, &all)?;
    let again: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| verdicts[i].time_limited)
        .collect();
    let mut reruns = again.len() as u32;
    if !again.is_empty() {
        for (i, verdict) in again
            .iter()
            .zip(cases.run(executor, &files, &base, &again)?)
        {
            verdicts[*i] = verdict;
        }
    }
    let mut hidden = HiddenScore::default();
    for (case, verdict) in task.hidden.iter().zip(verdicts) {
        hidden.push(case, verdict);
    }
    let mut time_limited = hidden.time_limited;
    let public = if with_public {
        let pristine_tests = task
            .visible
            .get(PUBLIC_TEST_FILE)
            .map(String::as_str)
            .unwrap_or_default();
        files.push((PUBLIC_TEST_FILE, pristine_tests));
        let public_limits = task.run_limits(limits);
        let run_public = || -> Result<RunOutput, VerifyError> {
            let dir = scratch_dir(&files, &public_limits)?;
            Ok(executor.run(&Job {
                workspace: dir.path().to_path_buf(),
                program: harness::PUBLIC_TESTS_PROGRAM.to_string(),
                stdin: harness::public_stdin(&task.modules),
                limits: public_limits.clone(),
            })?)
        };
        let mut out = run_public()?;
        if out.time_limit_hit(&public_limits).is_some() {
            reruns += 1;
            out = run_public()?;
        }
        time_limited |= out.time_limit_hit(&public_limits).is_some();
        Some(harness::parse_public(&out, &public_limits))
    } else {
        None
    };
    Ok(Verdict {
        public,
        hidden,
        time_limited,
        reruns,
    })
}

/// Differences between a workspace and the task's pristine files that a fix never needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TamperReport {
    /// Test files whose content differs from the pristine copy (or that were deleted).
    pub changed_tests: Vec<String>,
    /// Files that were not in the task: `sitecustomize.py`, `conftest.py`, `*.pth`, anything.
    pub unexpected_files: Vec<String>,
    /// Read-only support files (data, fixtures) whose content differs or that were deleted.
    #[serde(default)]
    pub changed_support: Vec<String>,
    /// Constructs an edit added to a module that only serve to fool a verifier: rebinding
    /// `__builtins__`, shadowing a builtin at top level, reading caller frames or `__main__`.
    #[serde(default)]
    pub suspicious_code: Vec<String>,
}

impl TamperReport {
    pub fn tampered(&self) -> bool {
        !self.changed_tests.is_empty()
            || !self.unexpected_files.is_empty()
            || !self.changed_support.is_empty()
            || !self.suspicious_code.is_empty()
    }
}

/// All regular files under `root`, as relative paths with `/` separators (`__pycache__` skipped).
pub fn workspace_files(root: &Path) -> Result<BTreeMap<String, Vec<u8>>, std::io::Error> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if entry.file_name() != "__pycache__" {
                    stack.push(path);
                }
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            // Symlinks are recorded by their target path text, never followed.
            let content = if kind.is_symlink() {
                std::fs::read_link(&path)?
                    .to_string_lossy()
                    .into_owned()
                    .into_bytes()
            } else {
                std::fs::read(&path)?
            };
            out.insert(rel, content);
        }
    }
    Ok(out)
}

/// Compares workspace files with the task's pristine visible files.
pub fn check_tamper(task: &Task, files: &BTreeMap<String, Vec<u8>>) -> TamperReport {
    let known: BTreeSet<&str> = task.visible.keys().map(String::as_str).collect();
    let mut report = TamperReport::default();
    for (name, pristine) in &task.visible {
        if task.modules.contains(name) {
            if let Some(edited) = files.get(name) {
                let edited = String::from_utf8_lossy(edited);
                for what in suspicious_additions(pristine, &edited) {
                    report.suspicious_code.push(format!("{name}: {what}"));
                }
            }
            continue;
        }
        if files.get(name).map(Vec::as_slice) != Some(pristine.as_bytes()) {
            if task.support.contains(name) {
                report.changed_support.push(name.clone());
            } else {
                report.changed_tests.push(name.clone());
            }
        }
    }
    report.unexpected_files = files
        .keys()
        .filter(|name| !known.contains(name.as_str()))
        .cloned()
        .collect();
    report
}

/// Builtin names a module has no business rebinding at top level in a fix (Python 3.11's
/// builtin functions and types; exceptions left out).
const BUILTIN_NAMES: &[&str] = &[
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
];

/// Markers of verifier forgery that an edit added to a module (counted against the pristine
/// module, so task code that already uses one is not flagged). Static and conservative: what
/// it cannot see, the trusted-side checks still score correctly.
fn suspicious_additions(pristine: &str, edited: &str) -> Vec<String> {
    let count = |text: &str, needle: &str| text.matches(needle).count();
    let mut found = Vec::new();
    for (needle, what) in [
        ("__builtins__", "uses `__builtins__`"),
        ("_getframe", "reads interpreter frames (`sys._getframe`)"),
        ("f_back", "reads the caller's frame (`f_back`)"),
        ("currentframe", "reads interpreter frames (`currentframe`)"),
        ("f_locals", "reads frame locals"),
        ("f_globals", "reads frame globals"),
        (
            "modules[\"__main__\"]",
            "reads the harness through `sys.modules[\"__main__\"]`",
        ),
        (
            "modules['__main__']",
            "reads the harness through `sys.modules['__main__']`",
        ),
    ] {
        if count(edited, needle) > count(pristine, needle) {
            found.push(what.to_string());
        }
    }
    let top_level_bindings = |text: &str| -> BTreeMap<String, usize> {
        let mut names = BTreeMap::new();
        for line in text.lines() {
            let name = if let Some(rest) = line.strip_prefix("def ") {
                rest.split('(').next()
            } else if let Some(rest) = line.strip_prefix("class ") {
                rest.split(['(', ':']).next()
            } else if line.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                line.split_once('=')
                    .filter(|(_, after)| !after.starts_with('='))
                    .map(|(before, _)| before)
            } else {
                None
            };
            for part in name.unwrap_or_default().split(',') {
                let part = part.trim().trim_end_matches(':').trim();
                let part = part.split(':').next().unwrap_or_default().trim();
                if BUILTIN_NAMES.contains(&part) {
                    *names.entry(part.to_string()).or_insert(0) += 1;
                }
            }
        }
        names
    };
    let before = top_level_bindings(pristine);
    for (name, n) in top_level_bindings(edited) {
        if n > before.get(&name).copied().unwrap_or(0) {
            found.push(format!("rebinds the builtin `{name}` at top level"));
        }
    }
    found
}
