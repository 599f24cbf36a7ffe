//! BugFix tasks on disk: loading and checking task folders, splits, and the built-in task set.
//!
//! This is the first stage of the gym's data flow: a [`TaskSet`] is loaded once, shared behind an
//! `Arc`, and every `BugFixEnv::reset` copies one task's visible files into a fresh workspace.
//! The folder format is documented in `crates/agentrl-gym/TASKS.md`.
//!
//! Built-in tasks live in `crates/agentrl-gym/tasks/builtin/` and are located at run time
//! through the crate's compile-time `CARGO_MANIFEST_DIR`, so they are found from any working
//! directory as long as the source tree is present (users run from the repository);
//! `--tasks-dir DIR` (or [`TaskSet::load_dir`]) points at any other folder of tasks.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::types::{CandidateEdit, Observation};

/// The public test file every task has; the agent can read and run it.
pub const PUBLIC_TEST_FILE: &str = "test_public.py";
/// Hidden cases (setup, expression, expected outcome); only the trusted side reads it.
pub const HIDDEN_FILE: &str = "hidden.json";
/// Task metadata and candidate edits.
pub const TASK_FILE: &str = "task.toml";
/// Folder holding the reference fix of each module.
pub const REFERENCE_DIR: &str = "reference";

/// Which split a task belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// Training variants.
    Train,
    /// Unseen variants of training families.
    Heldout,
    /// Whole families never used in training.
    HeldoutFamily,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Train, Split::Heldout, Split::HeldoutFamily];

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Heldout => "heldout",
            Split::HeldoutFamily => "heldout-family",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Split {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Split::ALL
            .into_iter()
            .find(|split| split.as_str() == s)
            .ok_or_else(|| TaskError::UnknownSplit(s.to_string()))
    }
}

/// What a candidate is for. Never shown to the agent; used by validation and analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateRole {
    /// The reference fix.
    Fix,
    /// A plausible edit that does not fix the bug.
    Decoy,
    /// A decoy that special-cases the public inputs: passes public tests, fails hidden ones.
    Hack,
}

/// A candidate as stored in `task.toml`: the edit plus its role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCandidate {
    pub path: String,
    pub old: String,
    pub new: String,
    pub role: CandidateRole,
}

/// The expected outcome of one hidden case: a value's `repr`, or an exception type name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Value(String),
    Raises(String),
}

/// One hidden test: run `setup` (statements), then evaluate `expr` in the modules' namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiddenCase {
    pub name: String,
    #[serde(default)]
    pub setup: String,
    pub expr: String,
    pub expect: Outcome,
}

#[derive(Debug, Deserialize)]
struct HiddenFile {
    cases: Vec<HiddenCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskToml {
    id: String,
    family: String,
    split: Split,
    prompt: String,
    modules: Vec<String>,
    #[serde(default)]
    candidates: Vec<StoredCandidate>,
}

/// One loaded task: everything the env, verifier and validator need, held in memory.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub family: String,
    pub split: Split,
    pub prompt: String,
    /// Source modules the agent fixes (file names); the verifier copies only these.
    pub modules: Vec<String>,
    /// Files the agent sees, name → content: the modules and the public tests.
    pub visible: BTreeMap<String, String>,
    /// Reference fix, module name → fixed content.
    pub reference: BTreeMap<String, String>,
    pub hidden: Vec<HiddenCase>,
    /// In the order shown to the agent (shuffled per task by the generator).
    pub candidates: Vec<StoredCandidate>,
    pub dir: PathBuf,
}

impl Task {
    /// The candidates as the agent sees them (no roles).
    pub fn candidate_edits(&self) -> Vec<CandidateEdit> {
        self.candidates
            .iter()
            .map(|c| CandidateEdit {
                path: c.path.clone(),
                old: c.old.clone(),
                new: c.new.clone(),
            })
            .collect()
    }

    /// The first observation of an episode on this task.
    pub fn observation(&self) -> Observation {
        Observation::Task {
            task_id: self.id.clone(),
            prompt: self.prompt.clone(),
            files: self.visible.keys().cloned().collect(),
            candidates: self.candidate_edits(),
        }
    }

    /// Index of the reference fix among the candidates, if the task lists it.
    pub fn fix_candidate(&self) -> Option<usize> {
        self.candidates
            .iter()
            .position(|c| c.role == CandidateRole::Fix)
    }

    /// Index of the hack decoy (passes public tests only), if the task has one.
    pub fn hack_candidate(&self) -> Option<usize> {
        self.candidates
            .iter()
            .position(|c| c.role == CandidateRole::Hack)
    }

    /// Loads and checks one task folder.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let read = |name: &str| -> Result<String, TaskError> {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| TaskError::Io { path, source })
        };
        let toml_path = dir.join(TASK_FILE);
        let meta: TaskToml = toml::from_str(&read(TASK_FILE)?).map_err(|err| TaskError::Field {
            path: toml_path.clone(),
            message: err.to_string(),
        })?;
        let bad = |path: &Path, message: String| TaskError::Field {
            path: path.to_path_buf(),
            message,
        };
        if meta.modules.is_empty() {
            return Err(bad(
                &toml_path,
                "`modules` must name at least one file".into(),
            ));
        }
        let mut visible = BTreeMap::new();
        let mut reference = BTreeMap::new();
        for module in &meta.modules {
            if !is_plain_python_name(module) || module == PUBLIC_TEST_FILE {
                return Err(bad(
                    &toml_path,
                    format!("`modules` entry `{module}` must be a plain `name.py` file name other than {PUBLIC_TEST_FILE}"),
                ));
            }
            visible.insert(module.clone(), read(module)?);
            reference.insert(module.clone(), read(&format!("{REFERENCE_DIR}/{module}"))?);
        }
        visible.insert(PUBLIC_TEST_FILE.to_string(), read(PUBLIC_TEST_FILE)?);
        for (i, candidate) in meta.candidates.iter().enumerate() {
            let Some(source) = visible.get(&candidate.path) else {
                return Err(bad(
                    &toml_path,
                    format!(
                        "candidates[{i}].path `{}` is not one of `modules`",
                        candidate.path
                    ),
                ));
            };
            let count = source.matches(candidate.old.as_str()).count();
            if candidate.old.is_empty() || count != 1 {
                return Err(bad(
                    &toml_path,
                    format!(
                        "candidates[{i}].old must occur exactly once in {} (found {count} times)",
                        candidate.path
                    ),
                ));
            }
        }
        let hidden_path = dir.join(HIDDEN_FILE);
        let hidden: HiddenFile =
            serde_json::from_str(&read(HIDDEN_FILE)?).map_err(|err| TaskError::Field {
                path: hidden_path.clone(),
                message: err.to_string(),
            })?;
        if hidden.cases.is_empty() {
            return Err(bad(&hidden_path, "`cases` is empty".into()));
        }
        let dir_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if dir_name != meta.id {
            return Err(bad(
                &toml_path,
                format!("`id` is `{}` but the folder is named `{dir_name}`", meta.id),
            ));
        }
        Ok(Task {
            id: meta.id,
            family: meta.family,
            split: meta.split,
            prompt: meta.prompt,
            modules: meta.modules,
            visible,
            reference,
            hidden: hidden.cases,
            candidates: meta.candidates,
            dir: dir.to_path_buf(),
        })
    }
}

/// `name.py` with no directory part: module file names stay flat and importable.
fn is_plain_python_name(name: &str) -> bool {
    name.strip_suffix(".py").is_some_and(|stem| {
        !stem.is_empty()
            && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !stem.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A set of tasks, sorted by id.
#[derive(Debug, Clone)]
pub struct TaskSet {
    tasks: Vec<Arc<Task>>,
}

impl TaskSet {
    /// The folder of built-in tasks in the source tree.
    pub fn builtin_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/builtin")
    }

    /// The built-in tasks.
    pub fn builtin() -> Result<TaskSet, TaskError> {
        Self::load_dir(&Self::builtin_dir())
    }

    /// `dir` if given, else the built-in tasks.
    pub fn load(dir: Option<&Path>) -> Result<TaskSet, TaskError> {
        match dir {
            Some(dir) => Self::load_dir(dir),
            None => Self::builtin(),
        }
    }

    /// Every sub-folder of `dir` that holds a `task.toml`.
    pub fn load_dir(dir: &Path) -> Result<TaskSet, TaskError> {
        let entries = std::fs::read_dir(dir).map_err(|source| TaskError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut tasks = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TaskError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            let path = entry.path();
            if path.join(TASK_FILE).is_file() {
                tasks.push(Arc::new(Task::load(&path)?));
            }
        }
        if tasks.is_empty() {
            return Err(TaskError::Empty(dir.to_path_buf()));
        }
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(TaskSet { tasks })
    }

    pub fn tasks(&self) -> &[Arc<Task>] {
        &self.tasks
    }

    pub fn split(&self, split: Split) -> Vec<Arc<Task>> {
        self.tasks
            .iter()
            .filter(|t| t.split == split)
            .cloned()
            .collect()
    }

    /// A task by id, or an error listing close matches.
    pub fn get(&self, id: &str) -> Result<Arc<Task>, TaskError> {
        if let Some(task) = self.tasks.iter().find(|t| t.id == id) {
            return Ok(task.clone());
        }
        let mut scored: Vec<(f64, &str)> = self
            .tasks
            .iter()
            .map(|t| (strsim::jaro_winkler(id, &t.id), t.id.as_str()))
            .filter(|(score, tid)| *score > 0.7 || tid.contains(id) || id.contains(*tid))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        Err(TaskError::UnknownTask {
            id: id.to_string(),
            close: scored.iter().take(5).map(|(_, t)| t.to_string()).collect(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad task file {path}: {message}")]
    Field { path: PathBuf, message: String },
    #[error("no task folders (with a task.toml) in {0}")]
    Empty(PathBuf),
    #[error("unknown task `{id}`{}", close_matches(close))]
    UnknownTask { id: String, close: Vec<String> },
    #[error("unknown split `{0}` (expected train, heldout or heldout-family)")]
    UnknownSplit(String),
}

fn close_matches(close: &[String]) -> String {
    if close.is_empty() {
        "; `agentrl gym list` shows the task ids".to_string()
    } else {
        format!("; did you mean: {}?", close.join(", "))
    }
}
