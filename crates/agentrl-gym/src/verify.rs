//! The verifier and the tamper check: the trusted end of an episode.
//!
//! `submit` lands here. The verifier copies only the agent's source modules into fresh
//! directories beside pristine copies of the public tests, runs the public tests and the hidden
//! cases in separate sandboxed jobs (so nothing one run plants can affect the other), and
//! compares hidden outcomes with the expected ones on this side (see [`crate::harness`]).
//! The tamper check compares the agent's workspace with the task's pristine files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::harness::{self, HiddenScore};
use crate::sandbox::{Executor, Job, Limits, SandboxError};
use crate::task::{Task, PUBLIC_TEST_FILE};
use crate::types::TestReport;

/// What the verifier found for one set of module contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The pristine public tests against the agent's modules.
    pub public: TestReport,
    pub hidden: HiddenScore,
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

fn scratch_dir(files: &[(&str, &str)]) -> Result<tempfile::TempDir, std::io::Error> {
    let dir = crate::sandbox::scratch_dir("agentrl-verify-")?;
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content)?;
    }
    Ok(dir)
}

/// Runs the public tests (pristine) and hidden cases against `modules` (name → content).
pub fn verify(
    executor: &dyn Executor,
    task: &Task,
    modules: &BTreeMap<String, String>,
    limits: &Limits,
) -> Result<Verdict, VerifyError> {
    let pristine_tests = task
        .visible
        .get(PUBLIC_TEST_FILE)
        .map(String::as_str)
        .unwrap_or_default();
    let mut files: Vec<(&str, &str)> = task
        .modules
        .iter()
        .filter_map(|m| modules.get(m).map(|c| (m.as_str(), c.as_str())))
        .collect();
    let hidden_dir = scratch_dir(&files)?;
    let hidden_out = executor.run(&Job {
        workspace: hidden_dir.path().to_path_buf(),
        program: harness::HIDDEN_CASES_PROGRAM.to_string(),
        stdin: harness::hidden_stdin(&task.modules, &task.hidden),
        limits: limits.clone(),
    })?;
    let hidden = harness::score_hidden(&hidden_out, &task.hidden);
    files.push((PUBLIC_TEST_FILE, pristine_tests));
    let public_dir = scratch_dir(&files)?;
    let public_out = executor.run(&Job {
        workspace: public_dir.path().to_path_buf(),
        program: harness::PUBLIC_TESTS_PROGRAM.to_string(),
        stdin: harness::public_stdin(&task.modules),
        limits: limits.clone(),
    })?;
    Ok(Verdict {
        public: harness::parse_public(&public_out),
        hidden,
    })
}

/// Differences between a workspace and the task's pristine files that a fix never needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TamperReport {
    /// Test files whose content differs from the pristine copy (or that were deleted).
    pub changed_tests: Vec<String>,
    /// Files that were not in the task: `sitecustomize.py`, `conftest.py`, `*.pth`, anything.
    pub unexpected_files: Vec<String>,
}

impl TamperReport {
    pub fn tampered(&self) -> bool {
        !self.changed_tests.is_empty() || !self.unexpected_files.is_empty()
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
            continue;
        }
        if files.get(name).map(Vec::as_slice) != Some(pristine.as_bytes()) {
            report.changed_tests.push(name.clone());
        }
    }
    report.unexpected_files = files
        .keys()
        .filter(|name| !known.contains(name.as_str()))
        .cloned()
        .collect();
    report
}
