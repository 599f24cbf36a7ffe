//! BugFix tasks on disk: loading and checking task folders, splits, and the built-in task set.
//!
//! This is the first stage of the gym's data flow: a [`TaskSet`] is loaded once, shared behind an
//! `Arc`, and every `BugFixEnv::reset` copies one task's visible files into a fresh workspace.
//! The folder format is documented in `crates/agentrl-gym/TASKS.md`.
//!
//! Built-in tasks live in `crates/agentrl-gym/tasks/builtin/` and are compiled into the binary
//! (`include_dir`), so an installed `agentrl` works from any directory: when the source tree
//! is present (a checkout) it is read directly, so edits to the tasks take effect without a
//! rebuild; otherwise the embedded copy is written once to a per-user cache folder named by a
//! digest of its contents ([`TaskSet::builtin_dir`]). `--tasks-dir DIR` (or
//! [`TaskSet::load_dir`]) points at any other folder of tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::check::Expect;
use crate::sandbox::Limits;
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

/// The expected outcome of one hidden case (the kinds are in [`crate::check`]).
pub type Outcome = Expect;

/// One hidden test: run `setup` (statements), then evaluate `expr` in the modules' namespace,
/// in a case process of its own (see `verdict_tree.py`); `check`, if given, is a boolean
/// expression over the value as `result`, evaluated by the trusted checker ([`crate::trusted`]),
/// never next to the code under test. `expr` may itself be a check (`abs(f(x) - y) < eps` with
/// `{"value": "True"}`): the checker splits it into the calls under test and the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "HiddenCaseWire")]
pub struct HiddenCase {
    pub name: String,
    #[serde(default)]
    pub setup: String,
    pub expr: String,
    /// What the case's final value must be: with a `check`, `True` unless set.
    pub expect: Expect,
    /// A Python boolean expression over the value of `expr` (named `result`), builtins and
    /// `math`, run by the trusted checker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Wall-clock seconds for this case, instead of the task's `limits.time_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
}

/// `hidden.json`'s form of a case: `expect` may be left out when `check` is given.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HiddenCaseWire {
    name: String,
    #[serde(default)]
    setup: String,
    expr: String,
    expect: Option<Expect>,
    #[serde(default)]
    check: Option<String>,
    #[serde(default)]
    time_limit_s: Option<f64>,
}

impl TryFrom<HiddenCaseWire> for HiddenCase {
    type Error = String;

    fn try_from(wire: HiddenCaseWire) -> Result<Self, String> {
        let expect = match (wire.expect, &wire.check) {
            (Some(expect), _) => expect,
            (None, Some(_)) => Expect::Value("True".into()),
            (None, None) => {
                return Err(format!(
                    "case `{}` needs `expect` (or a `check`, a boolean expression over `result`)",
                    wire.name
                ))
            }
        };
        Ok(HiddenCase {
            name: wire.name,
            setup: wire.setup,
            expr: wire.expr,
            expect,
            check: wire.check,
            time_limit_s: wire.time_limit_s,
        })
    }
}

/// The `[limits]` table of `task.toml`: per run (the public test run, or one hidden case).
/// Unset fields keep the env's [`Limits`] (defaults: 5 s wall clock, 4 s CPU, 512 MB, a
/// workspace of 64 MiB and 10000 files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskLimits {
    /// Wall-clock seconds.
    pub time_s: Option<f64>,
    /// CPU seconds; when unset but `time_s` is set, `time_s` rounded up (a slow task should
    /// not need two knobs).
    pub cpu_s: Option<u64>,
    /// Address space in MB (an allocation past it raises `MemoryError`).
    pub memory_mb: Option<u64>,
    /// Bytes the workspace may hold, in MiB (writes past it get ENOSPC). Left out of the
    /// fingerprint when unset, so tasks without it keep theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
    /// Files (and directories) the workspace may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
}

/// Bounds on `[limits]`: a task cannot switch a limit off or ask for a runaway budget.
const MAX_TIME_S: f64 = 600.0;
const MIN_MEMORY_MB: u64 = 64;
const MAX_MEMORY_MB: u64 = 64 << 10;
const MIN_DISK_MIB: u64 = 1;
const MAX_DISK_MIB: u64 = 4 << 10;
const MIN_FILES: u64 = 100;
const MAX_FILES: u64 = 1_000_000;

impl TaskLimits {
    fn check(&self) -> Result<(), String> {
        if let Some(t) = self.time_s {
            if !(t > 0.0 && t <= MAX_TIME_S) {
                return Err(format!(
                    "`limits.time_s` = {t} must be in (0, {MAX_TIME_S}]"
                ));
            }
        }
        if let Some(c) = self.cpu_s {
            if c == 0 || c as f64 > MAX_TIME_S {
                return Err(format!("`limits.cpu_s` = {c} must be in 1..={MAX_TIME_S}"));
            }
        }
        if let Some(m) = self.memory_mb {
            if !(MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&m) {
                return Err(format!(
                    "`limits.memory_mb` = {m} must be in {MIN_MEMORY_MB}..={MAX_MEMORY_MB}"
                ));
            }
        }
        if let Some(d) = self.disk_mib {
            if !(MIN_DISK_MIB..=MAX_DISK_MIB).contains(&d) {
                return Err(format!(
                    "`limits.disk_mib` = {d} must be in {MIN_DISK_MIB}..={MAX_DISK_MIB}"
                ));
            }
        }
        if let Some(f) = self.files {
            if !(MIN_FILES..=MAX_FILES).contains(&f) {
                return Err(format!(
                    "`limits.files` = {f} must be in {MIN_FILES}..={MAX_FILES}"
                ));
            }
        }
        Ok(())
    }

    /// A workspace quota the task sets must hold the task's own files (the episode's workspace
    /// starts with `visible`): counted as tmpfs does, in whole pages, and one inode per file
    /// and per folder.
    fn check_fits(&self, visible: &BTreeMap<String, String>) -> Result<(), String> {
        const PAGE: u64 = 4096;
        let bytes: u64 = visible
            .values()
            .map(|text| (text.len() as u64).div_ceil(PAGE) * PAGE)
            .sum();
        let folders: BTreeSet<&str> = visible
            .keys()
            .flat_map(|path| path.match_indices('/').map(|(at, _)| &path[..at]))
            .collect();
        let files = (visible.len() + folders.len()) as u64;
        if let Some(d) = self.disk_mib {
            if bytes > d << 20 {
                return Err(format!(
                    "`limits.disk_mib` = {d} cannot hold the task's own files ({bytes} bytes)"
                ));
            }
        }
        if let Some(f) = self.files {
            if files > f {
                return Err(format!(
                    "`limits.files` = {f} cannot hold the task's own {files} files and folders"
                ));
            }
        }
        Ok(())
    }

    /// `base` with this task's limits applied.
    pub fn apply(&self, base: &Limits) -> Limits {
        let mut limits = base.clone();
        if let Some(t) = self.time_s {
            limits.time_limit = std::time::Duration::from_secs_f64(t);
            limits.cpu_seconds = t.ceil() as u64;
        }
        if let Some(c) = self.cpu_s {
            limits.cpu_seconds = c;
        }
        if let Some(m) = self.memory_mb {
            limits.address_space_bytes = m << 20;
        }
        if let Some(d) = self.disk_mib {
            limits.disk_bytes = d << 20;
        }
        if let Some(f) = self.files {
            limits.max_files = f;
        }
        limits
    }
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
    #[serde(default)]
    support: Vec<String>,
    #[serde(default)]
    limits: TaskLimits,
}

/// One loaded task: everything the env, verifier and validator need, held in memory.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub family: String,
    pub split: Split,
    pub prompt: String,
    /// Source modules the agent fixes (paths relative to the task folder, `pkg/mod.py` in a
    /// package); the verifier copies only these of the agent's files.
    pub modules: Vec<String>,
    /// Read-only support files (data, fixtures): visible, copied pristine to the verifier, and
    /// tampering when edited.
    pub support: Vec<String>,
    /// Per-run limits from `task.toml`.
    pub limits: TaskLimits,
    /// Files the agent sees, path → content: the modules, support files and the public tests.
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

    /// A SHA-256 of everything that decides the task's episodes and verdicts (prompt, files,
    /// reference, hidden cases, candidates, limits), hex: two processes with the same
    /// fingerprint for an id run the same task. The gym service's client checks it against
    /// every server (`service::client`).
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let content = serde_json::json!({
            "id": self.id,
            "family": self.family,
            "split": self.split,
            "prompt": self.prompt,
            "modules": self.modules,
            "support": self.support,
            "limits": self.limits,
            "visible": self.visible,
            "reference": self.reference,
            "hidden": self.hidden,
            "candidates": self.candidates,
        });
        let digest = sha2::Sha256::digest(content.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
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

    /// The limits of one run of this task, on top of the env's `base` limits.
    pub fn run_limits(&self, base: &Limits) -> Limits {
        self.limits.apply(base)
    }

    /// The limits of one hidden case: the task's, with the case's own time limit if it has one.
    pub fn case_limits(&self, case: &HiddenCase, base: &Limits) -> Limits {
        let mut limits = self.run_limits(base);
        if let Some(t) = case.time_limit_s {
            limits.time_limit = std::time::Duration::from_secs_f64(t);
            limits.cpu_seconds = limits.cpu_seconds.max(t.ceil() as u64);
        }
        limits
    }

    /// Loads and checks one task folder.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let root = dir.canonicalize().map_err(|source| TaskError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        // Every file is read through its canonical path, which must stay inside the folder: a
        // symlink out of it (to `/etc/passwd`, say) is refused, never followed.
        let read = |name: &str| -> Result<String, TaskError> {
            let path = dir.join(name);
            let real = path.canonicalize().map_err(|source| TaskError::Io {
                path: path.clone(),
                source,
            })?;
            if !real.starts_with(&root) {
                return Err(TaskError::Field {
                    path,
                    message: format!(
                        "is a symbolic link out of the task folder (to {}); task files must live inside it",
                        real.display()
                    ),
                });
            }
            std::fs::read_to_string(&real).map_err(|source| TaskError::Io { path, source })
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
        meta.limits.check().map_err(|m| bad(&toml_path, m))?;
        for module in &meta.modules {
            if !is_module_path(module) || module == PUBLIC_TEST_FILE {
                return Err(bad(
                    &toml_path,
                    format!("`modules` entry `{module}` must be a `name.py` file or a `pkg/name.py` path of Python identifiers, other than {PUBLIC_TEST_FILE}"),
                ));
            }
            if visible.contains_key(module) {
                return Err(bad(&toml_path, format!("`modules` lists `{module}` twice")));
            }
            visible.insert(module.clone(), read(module)?);
            reference.insert(module.clone(), read(&format!("{REFERENCE_DIR}/{module}"))?);
        }
        for file in &meta.support {
            let reserved = [PUBLIC_TEST_FILE, HIDDEN_FILE, TASK_FILE];
            if !is_support_path(file)
                || reserved.contains(&file.as_str())
                || file.starts_with(&format!("{REFERENCE_DIR}/"))
                || visible.contains_key(file)
            {
                return Err(bad(
                    &toml_path,
                    format!("`support` entry `{file}` must be a relative path inside the task folder (no `..`), not a module, {PUBLIC_TEST_FILE}, {HIDDEN_FILE}, {TASK_FILE} or under {REFERENCE_DIR}/"),
                ));
            }
            visible.insert(file.clone(), read(file)?);
        }
        visible.insert(PUBLIC_TEST_FILE.to_string(), read(PUBLIC_TEST_FILE)?);
        meta.limits
            .check_fits(&visible)
            .map_err(|m| bad(&toml_path, m))?;
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
        for case in &hidden.cases {
            if let Some(t) = case.time_limit_s {
                if !(t > 0.0 && t <= MAX_TIME_S) {
                    return Err(bad(
                        &hidden_path,
                        format!(
                            "case `{}`: `time_limit_s` = {t} must be in (0, {MAX_TIME_S}]",
                            case.name
                        ),
                    ));
                }
            }
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
            support: meta.support,
            limits: meta.limits,
            visible,
            reference,
            hidden: hidden.cases,
            candidates: meta.candidates,
            dir: dir.to_path_buf(),
        })
    }
}

fn is_identifier(part: &str) -> bool {
    !part.is_empty()
        && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !part.starts_with(|c: char| c.is_ascii_digit())
}

/// `name.py` or `pkg/sub/name.py` (including `pkg/__init__.py`): importable as `pkg.sub.name`.
fn is_module_path(path: &str) -> bool {
    let Some(stem) = path.strip_suffix(".py") else {
        return false;
    };
    stem.split('/').all(is_identifier)
}

/// The dotted import name of a module path: `pkg/__init__.py` → `pkg`, `pkg/m.py` → `pkg.m`.
pub fn module_import_name(path: &str) -> String {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

/// A relative path of plain components (no `..`, `.`, empty parts, or leading `/`).
fn is_support_path(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\\'))
}

/// A set of tasks, sorted by id, and the task folders that failed to load (empty unless the
/// set comes from [`TaskSet::load_report`]).
#[derive(Debug, Clone)]
pub struct TaskSet {
    tasks: Vec<Arc<Task>>,
    broken: Arc<Vec<BrokenTask>>,
}

impl TaskSet {
    /// The folder of built-in tasks: the source tree's when it is there, else the copy
    /// embedded in the binary, written once to a cache folder.
    pub fn builtin_dir() -> Result<PathBuf, TaskError> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/builtin");
        if source.is_dir() {
            return Ok(source);
        }
        crate::builtin::extracted().map_err(|e| TaskError::Io {
            path: e.path,
            source: e.source,
        })
    }

    /// The built-in tasks.
    pub fn builtin() -> Result<TaskSet, TaskError> {
        Self::load_dir(&Self::builtin_dir()?)
    }

    /// `dir` if given, else the built-in tasks.
    pub fn load(dir: Option<&Path>) -> Result<TaskSet, TaskError> {
        match dir {
            Some(dir) => Self::load_dir(dir),
            None => Self::builtin(),
        }
    }

    /// Every sub-folder of `dir` that holds a `task.toml`. Strict: any broken task is an
    /// error, and the error lists every broken task with its reason (see [`Self::load_report`]
    /// to go on with the valid ones).
    pub fn load_dir(dir: &Path) -> Result<TaskSet, TaskError> {
        let (tasks, broken) = Self::load_parts(dir)?;
        if !broken.is_empty() {
            return Err(TaskError::Broken(broken));
        }
        Ok(Self::from_tasks(tasks))
    }

    /// Loads every task folder of `dir` that loads, and keeps the others with their reasons
    /// ([`Self::broken`]): one broken task must not hide the rest (`validate`, `list`, training,
    /// which refuses only a split that has a broken task: [`Self::split_checked`]). Errs only
    /// when `dir` cannot be read or holds no task folder at all.
    pub fn load_report(dir: &Path) -> Result<TaskSet, TaskError> {
        let (tasks, broken) = Self::load_parts(dir)?;
        Ok(TaskSet {
            broken: Arc::new(broken),
            ..Self::from_tasks(tasks)
        })
    }

    /// The tasks that load (unsorted) and the folders that do not.
    fn load_parts(dir: &Path) -> Result<(Vec<Arc<Task>>, Vec<BrokenTask>), TaskError> {
        let entries = std::fs::read_dir(dir).map_err(|source| TaskError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut tasks = Vec::new();
        let mut broken = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TaskError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            let path = entry.path();
            if path.join(TASK_FILE).is_file() {
                match Task::load(&path) {
                    Ok(task) => tasks.push(Arc::new(task)),
                    Err(error) => broken.push(BrokenTask {
                        split: declared_split(&path),
                        dir: path,
                        error,
                    }),
                }
            }
        }
        if tasks.is_empty() && broken.is_empty() {
            return Err(TaskError::Empty(dir.to_path_buf()));
        }
        broken.sort_by(|a, b| a.dir.cmp(&b.dir));
        Ok((tasks, broken))
    }

    /// A set of already loaded tasks (e.g. the valid subset of another set), sorted by id.
    pub fn from_tasks(mut tasks: Vec<Arc<Task>>) -> TaskSet {
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        TaskSet {
            tasks,
            broken: Arc::default(),
        }
    }

    /// The task folders that failed to load, each with its reason.
    pub fn broken(&self) -> &[BrokenTask] {
        &self.broken
    }

    /// The tasks of `split`, refused when a broken task belongs to it (or declares no readable
    /// split): training or evaluating on a silently shrunken split would skew every number it
    /// reports.
    pub fn split_checked(&self, split: Split) -> Result<Vec<Arc<Task>>, TaskError> {
        let broken: Vec<&BrokenTask> = self
            .broken
            .iter()
            .filter(|b| b.split.is_none_or(|s| s == split))
            .collect();
        if !broken.is_empty() {
            return Err(TaskError::BrokenSplit {
                split,
                reasons: broken.iter().map(|b| b.error.to_string()).collect(),
            });
        }
        Ok(self.split(split))
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

/// A task folder that failed to load.
#[derive(Debug)]
pub struct BrokenTask {
    pub dir: PathBuf,
    /// The split its `task.toml` declares, when that much can be read.
    pub split: Option<Split>,
    pub error: TaskError,
}

/// The `split` field of a task folder's `task.toml`, read leniently.
fn declared_split(dir: &Path) -> Option<Split> {
    let text = std::fs::read_to_string(dir.join(TASK_FILE)).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    table.get("split")?.as_str()?.parse().ok()
}

fn list_broken(broken: &[BrokenTask]) -> String {
    broken
        .iter()
        .map(|b| format!("\n  {}", b.error))
        .collect::<String>()
}

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{} broken task folder(s):{}", .0.len(), list_broken(.0))]
    Broken(Vec<BrokenTask>),
    #[error("split {split} has broken task folder(s); fix or remove them:\n  {}", reasons.join("\n  "))]
    BrokenSplit { split: Split, reasons: Vec<String> },
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
