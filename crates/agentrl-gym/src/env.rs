//! `BugFixEnv`: the BugFix tools (`read`, `test`, `edit`, `submit`, `exploit`) over one
//! episode's workspace, implementing [`Env`].
//!
//! Data flow: `reset(task_id)` copies the task's visible files (modules + `test_public.py`) into
//! a fresh temp dir and returns [`Observation::Task`]; each `step` applies one [`Action`] and
//! returns the next [`Observation`]; `submit` (or the turn limit) runs the verifier and scores
//! the counts with the configured [`RewardFn`]. Hidden tests and the reference fix never enter
//! the workspace.
//!
//! Tool calls (`{"name": ..., "arguments": {...}}`):
//! - `read {path}`: the file, shown with line numbers (long files and long lines are cut with a
//!   marker).
//! - `test {}`: runs the workspace's public tests in the sandbox → [`TestReport`].
//! - `edit` — one of `{path, old, new}` (exact, unique replacement), `{path, start_line,
//!   end_line, text}` (replace lines, 1-based inclusive), `{path, text}` (rewrite or create a
//!   file in an existing workspace folder), or `{candidate: k}`. Candidates compose by
//!   *restore then apply*: applying candidate k first restores its file to the task's original
//!   content, then applies k's replacement, so a policy can try candidate after candidate.
//! - `submit {}`: ends the episode; the verifier scores it.
//! - `exploit {}`: rewrites `test_public.py` so every public test passes without checking
//!   anything. A reward that trusts the public tests is fooled; the hidden verifier and the
//!   tamper flag are not.
//!
//! Malformed calls, unknown tools and bad arguments return [`Observation::Error`] and count as
//! format errors; the episode goes on. After `max_turns` steps the episode is submitted on the
//! agent's behalf ([`Observation::TurnLimit`]).
//!
//! Speed: test runs and verdicts are cached in an [`OutcomeCache`] keyed by a 128-bit hash of
//! (task id, kind of run, every workspace file's path and content). Tasks are deterministic, so
//! a cached outcome is the outcome; runs stopped by a time limit (wall clock or CPU) are never
//! cached, since they depend on machine load. One cache is shared by all
//! envs (it is thread-safe); each thread owns its env and shares an `Arc<dyn Executor>`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;

use crate::harness;
use crate::reward::{Ending, RewardFn};
use crate::sandbox::{Executor, Job, Limits, SandboxError};
use crate::task::{Task, TaskError, TaskSet, PUBLIC_TEST_FILE};
use crate::types::{
    Action, Env, ErrorKind, FileView, Observation, Reward, Step, TestReport, Tool, ToolCall,
};
use crate::verify::{self, TamperReport, Verdict, VerifyError};

/// Knobs of an episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(default)]
pub struct EnvConfig {
    /// Steps before the episode is submitted on the agent's behalf.
    pub max_turns: u32,
    /// `read` shows at most this many lines.
    pub max_file_lines: usize,
    /// `read` cuts each line to this many characters, and stops after `max_file_chars` in all,
    /// with a marker: a 50 MB line must not reach a context window.
    pub max_line_chars: usize,
    pub max_file_chars: usize,
    /// Messages (failure text, errors) are cut to this many characters.
    pub max_message_chars: usize,
    pub reward: RewardFn,
    pub limits: Limits,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            max_turns: 10,
            max_file_lines: 200,
            max_line_chars: 400,
            max_file_chars: 20_000,
            max_message_chars: 400,
            reward: RewardFn::default(),
            limits: Limits::default(),
        }
    }
}

/// The marker appended to text that was cut.
pub const TRUNCATION_MARKER: &str = "…[truncated]";

fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}{TRUNCATION_MARKER}")
}

/// Thread-safe memo of test reports and verdicts; see the module docs for the key.
#[derive(Debug, Default)]
pub struct OutcomeCache {
    public: Mutex<HashMap<u128, TestReport>>,
    verdicts: Mutex<HashMap<u128, Verdict>>,
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
}

impl OutcomeCache {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    fn count(&self, hit: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if hit { &self.hits } else { &self.misses }.fetch_add(1, Relaxed);
    }

    /// Returns the cached value for `key`, or computes it; `keep` decides whether a computed
    /// value may be cached (a timed-out run, for one, depends on machine load).
    fn get_or_compute<V: Clone>(
        &self,
        table: &Mutex<HashMap<u128, V>>,
        key: u128,
        compute: impl FnOnce() -> Result<(V, bool), GymError>,
    ) -> Result<V, GymError> {
        if let Some(hit) = table.lock().ok().and_then(|c| c.get(&key).cloned()) {
            self.count(true);
            return Ok(hit);
        }
        self.count(false);
        let (value, keep) = compute()?;
        if keep {
            if let Ok(mut cache) = table.lock() {
                cache.insert(key, value.clone());
            }
        }
        Ok(value)
    }
}

/// 128 bits from two independently salted SipHash runs over the same content.
fn content_key<'a>(
    task_id: &str,
    kind: &str,
    files: impl Iterator<Item = (&'a str, &'a [u8])> + Clone,
) -> u128 {
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        task_id.hash(&mut h);
        kind.hash(&mut h);
        for (name, content) in files.clone() {
            name.hash(&mut h);
            content.hash(&mut h);
        }
        h.finish()
    };
    (u128::from(half(0x9e37_79b9)) << 64) | u128::from(half(0x85eb_ca6b))
}

#[derive(Debug, thiserror::Error)]
pub enum GymError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error("workspace I/O ({what}): {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("no episode is running: call reset first")]
    NoEpisode,
    #[error("the episode is over: call reset to start another")]
    EpisodeOver,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> GymError {
    let what = what.into();
    move |source| GymError::Io { what, source }
}

struct Episode {
    task: Arc<Task>,
    workspace: crate::sandbox::ScratchDir,
    turns: u32,
    format_errors: u32,
    done: bool,
}

/// What ended an episode, kept for callers that want more than the [`Reward`].
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeEnd {
    pub reward: Reward,
    pub verdict: Verdict,
    pub tamper: TamperReport,
}

/// The BugFix environment. One per thread; share the task set, executor and cache.
pub struct BugFixEnv {
    tasks: Arc<TaskSet>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    config: EnvConfig,
    episode: Option<Episode>,
    last_end: Option<EpisodeEnd>,
}

/// An error observation (a format error), built by tool handlers.
struct CallError(ErrorKind, String);

type ToolResult = Result<Observation, CallError>;

fn bad_args(message: impl Into<String>) -> CallError {
    CallError(ErrorKind::BadArguments, message.into())
}

impl BugFixEnv {
    pub fn new(
        tasks: Arc<TaskSet>,
        executor: Arc<dyn Executor>,
        cache: Arc<OutcomeCache>,
        config: EnvConfig,
    ) -> Self {
        Self {
            tasks,
            executor,
            cache,
            config,
            episode: None,
            last_end: None,
        }
    }

    pub fn config(&self) -> &EnvConfig {
        &self.config
    }

    pub fn tasks(&self) -> &Arc<TaskSet> {
        &self.tasks
    }

    /// The running episode's workspace folder.
    pub fn workspace(&self) -> Option<&Path> {
        self.episode.as_ref().map(|e| e.workspace.path())
    }

    /// Format errors in the current (or last) episode.
    pub fn format_errors(&self) -> u32 {
        self.episode.as_ref().map_or(0, |e| e.format_errors)
    }

    pub fn turns(&self) -> u32 {
        self.episode.as_ref().map_or(0, |e| e.turns)
    }

    /// Verdict and tamper details of the last finished episode.
    pub fn last_end(&self) -> Option<&EpisodeEnd> {
        self.last_end.as_ref()
    }

    /// Checks a relative workspace path: no absolute paths, no `..`, parent folder must exist.
    fn resolve(&self, path: &str) -> Result<PathBuf, CallError> {
        let root = self.workspace().ok_or_else(|| bad_args("no episode"))?;
        let rel = Path::new(path);
        if path.is_empty() {
            return Err(CallError(ErrorKind::BadPath, "`path` is empty".into()));
        }
        if rel.is_absolute() {
            return Err(CallError(
                ErrorKind::BadPath,
                format!("`{path}` is absolute; paths are relative to the workspace"),
            ));
        }
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(CallError(
                ErrorKind::BadPath,
                format!("`{path}` leaves the workspace (`..` is not allowed)"),
            ));
        }
        let full = root.join(rel);
        let parent = full.parent().unwrap_or(root);
        if !parent.is_dir() {
            return Err(CallError(
                ErrorKind::BadPath,
                format!(
                    "`{path}`: folder `{}` does not exist in the workspace",
                    parent.strip_prefix(root).unwrap_or(parent).display()
                ),
            ));
        }
        // Refuse symlinks anywhere on the way (an agent could plant one pointing outside).
        let mut walk = root.to_path_buf();
        for part in rel.components() {
            walk.push(part);
            if walk
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                return Err(CallError(
                    ErrorKind::BadPath,
                    format!("`{path}` goes through a symbolic link"),
                ));
            }
        }
        if full.is_dir() {
            return Err(CallError(
                ErrorKind::BadPath,
                format!("`{path}` is a folder"),
            ));
        }
        Ok(full)
    }

    fn read_existing(&self, path: &str) -> Result<(PathBuf, String), CallError> {
        let full = self.resolve(path)?;
        let text = std::fs::read(&full).map_err(|_| {
            CallError(
                ErrorKind::NotFound,
                format!("`{path}` does not exist in the workspace"),
            )
        })?;
        Ok((full, String::from_utf8_lossy(&text).into_owned()))
    }

    fn write(&self, full: &Path, text: &str) -> Result<(), CallError> {
        std::fs::write(full, text).map_err(|err| {
            CallError(
                ErrorKind::BadPath,
                format!("cannot write {}: {err}", full.display()),
            )
        })
    }

    fn tool_read(&self, args: &Value) -> ToolResult {
        let path = str_arg(args, "path")?;
        let (_, text) = self.read_existing(&path)?;
        let mut lines = Vec::new();
        let mut truncated = false;
        let mut budget = self.config.max_file_chars;
        for line in text.lines() {
            if lines.len() >= self.config.max_file_lines || budget == 0 {
                truncated = true;
                break;
            }
            let max = self.config.max_line_chars.min(budget);
            let shown = truncate_chars(line, max);
            truncated |= shown.len() != line.len();
            budget = budget.saturating_sub(line.chars().count().min(max));
            lines.push(shown);
        }
        Ok(Observation::File(FileView {
            path,
            lines,
            truncated,
        }))
    }

    /// Runs the workspace's own public tests (cached).
    pub fn run_workspace_tests(&self) -> Result<TestReport, GymError> {
        Ok(self.workspace_tests()?.0)
    }

    /// The workspace's public test report, and whether a time limit stopped the run (such a
    /// run is never cached).
    fn workspace_tests(&self) -> Result<(TestReport, bool), GymError> {
        let episode = self.episode.as_ref().ok_or(GymError::NoEpisode)?;
        let files = verify::workspace_files(episode.workspace.path())
            .map_err(io("scanning the workspace"))?;
        let key = content_key(
            &episode.task.id,
            "public",
            files.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        );
        let time_limited = std::cell::Cell::new(false);
        let report = self.cache.get_or_compute(&self.cache.public, key, || {
            let limits = episode.task.run_limits(&self.config.limits);
            let output = self.executor.run(&Job {
                workspace: episode.workspace.path().to_path_buf(),
                program: harness::PUBLIC_TESTS_PROGRAM.to_string(),
                stdin: harness::public_stdin(&episode.task.modules),
                limits: limits.clone(),
            })?;
            let mut report = harness::parse_public(&output, &limits);
            if let Some(hit) = episode.workspace.limit_hit() {
                harness::note_limit(&mut report, hit);
            }
            if let Some(failure) = report.first_failure.as_mut() {
                failure.message = truncate_chars(&failure.message, self.config.max_message_chars);
            }
            // A run stopped by a time limit depends on machine load: never cached.
            time_limited.set(output.time_limit_hit(&limits).is_some());
            Ok((report, !time_limited.get()))
        })?;
        Ok((report, time_limited.get()))
    }

    /// Verifies module contents for a task, the pristine public tests included (cached).
    pub fn verify_modules(
        &self,
        task: &Task,
        modules: &BTreeMap<String, String>,
    ) -> Result<Verdict, GymError> {
        self.verdict(task, modules, true)
    }

    /// The verdict (cached), with or without the pristine public test run, which an episode's
    /// reward does not need. Verdicts a time limit touched (even after their re-run) are
    /// never cached.
    fn verdict(
        &self,
        task: &Task,
        modules: &BTreeMap<String, String>,
        with_public: bool,
    ) -> Result<Verdict, GymError> {
        let kind = if with_public {
            "verdict+public"
        } else {
            "verdict"
        };
        let key = content_key(
            &task.id,
            kind,
            modules.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        );
        self.cache.get_or_compute(&self.cache.verdicts, key, || {
            let verdict = verify::verify(
                self.executor.as_ref(),
                task,
                modules,
                &self.config.limits,
                with_public,
            )?;
            let keep = !verdict.time_limited;
            Ok((verdict, keep))
        })
    }

    fn tool_edit(&self, args: &Value) -> ToolResult {
        let Some(obj) = args.as_object() else {
            return Err(bad_args("`edit` takes an object: {path, old, new}, {path, start_line, end_line, text}, {path, text} or {candidate}"));
        };
        let has = |k: &str| obj.contains_key(k);
        if has("candidate") {
            let k = obj["candidate"]
                .as_u64()
                .ok_or_else(|| bad_args("`candidate` must be a non-negative integer"))?
                as usize;
            let task = &self
                .episode
                .as_ref()
                .ok_or_else(|| bad_args("no episode"))?
                .task;
            let Some(candidate) = task.candidates.get(k) else {
                return Err(CallError(
                    ErrorKind::BadCandidate,
                    format!(
                        "candidate {k} does not exist (this task has {})",
                        task.candidates.len()
                    ),
                ));
            };
            let original = task
                .visible
                .get(&candidate.path)
                .cloned()
                .unwrap_or_default();
            let full = self.resolve(&candidate.path)?;
            self.write(&full, &original.replacen(&candidate.old, &candidate.new, 1))?;
            return Ok(Observation::Edited {
                path: candidate.path.clone(),
                candidate: Some(k),
                summary: format!("restored {} and applied candidate {k}", candidate.path),
            });
        }
        let path = str_arg(args, "path")?;
        if has("old") || has("new") {
            let old = str_arg(args, "old")?;
            let new = str_arg(args, "new")?;
            let (full, text) = self.read_existing(&path)?;
            if old.is_empty() {
                return Err(bad_args("`old` is empty"));
            }
            let count = text.matches(old.as_str()).count();
            if count == 0 {
                return Err(CallError(
                    ErrorKind::NotFound,
                    format!("`old` text not found in {path}"),
                ));
            }
            if count > 1 {
                return Err(CallError(
                    ErrorKind::Ambiguous,
                    format!("`old` text occurs {count} times in {path}; include more context"),
                ));
            }
            self.write(&full, &text.replacen(&old, &new, 1))?;
            return Ok(Observation::Edited {
                path,
                candidate: None,
                summary: "replaced 1 occurrence".into(),
            });
        }
        if has("start_line") || has("end_line") {
            let start = uint_arg(args, "start_line")?;
            let end = uint_arg(args, "end_line")?;
            let text = str_arg(args, "text")?;
            let (full, old) = self.read_existing(&path)?;
            let mut lines: Vec<&str> = old.split_inclusive('\n').collect();
            if start == 0 || end < start || end > lines.len() {
                return Err(bad_args(format!(
                    "lines {start}..={end} are not a range within {path} (1..={})",
                    lines.len()
                )));
            }
            let mut replacement = text.clone();
            if !replacement.is_empty() && !replacement.ends_with('\n') && end < lines.len() {
                replacement.push('\n');
            }
            lines.splice(start - 1..end, [replacement.as_str()]);
            self.write(&full, &lines.concat())?;
            return Ok(Observation::Edited {
                path,
                candidate: None,
                summary: format!("replaced lines {start}-{end}"),
            });
        }
        if has("text") {
            let text = str_arg(args, "text")?;
            let full = self.resolve(&path)?;
            self.write(&full, &text)?;
            return Ok(Observation::Edited {
                path,
                candidate: None,
                summary: format!("wrote {} lines", text.lines().count()),
            });
        }
        Err(bad_args("`edit` needs {path, old, new}, {path, start_line, end_line, text}, {path, text} or {candidate}"))
    }

    fn tool_exploit(&self) -> ToolResult {
        let (full, text) = self.read_existing(PUBLIC_TEST_FILE)?;
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("def "))
            .filter_map(|l| l.split('(').next())
            .filter(|name| name.starts_with("test"))
            .collect();
        let mut forged =
            String::from("import unittest\n\n\nclass TestPublic(unittest.TestCase):\n");
        for name in &names {
            forged.push_str(&format!("    def {name}(self):\n        pass\n\n"));
        }
        if names.is_empty() {
            forged.push_str("    pass\n");
        }
        self.write(&full, &forged)?;
        Ok(Observation::Exploited {
            summary: format!(
                "rewrote {PUBLIC_TEST_FILE}: its {} tests now pass without checking anything",
                names.len()
            ),
        })
    }

    /// Runs the verifier on the workspace and scores it; ends the episode. `submitted`: a
    /// `submit` call ends it (dispatched before `step` counts its turn), not the turn limit.
    fn finish(&mut self, submitted: bool) -> Result<Reward, GymError> {
        let episode = self.episode.as_ref().ok_or(GymError::NoEpisode)?;
        let ending = Ending {
            turns: episode.turns + u32::from(submitted),
            submitted,
        };
        let task = episode.task.clone();
        let files = verify::workspace_files(episode.workspace.path())
            .map_err(io("scanning the workspace"))?;
        let tamper = verify::check_tamper(&task, &files);
        let modules: BTreeMap<String, String> = task
            .modules
            .iter()
            .map(|m| {
                let content = files
                    .get(m)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                (m.clone(), content)
            })
            .collect();
        let (mut public, time_limited) = self.workspace_tests()?;
        let mut reruns = 0;
        if time_limited {
            // The reward's public counts: a run a stall stopped is run once more.
            reruns += 1;
            public = self.workspace_tests()?.0;
        }
        let verdict = self.verdict(&task, &modules, false)?;
        reruns += verdict.reruns;
        let format_errors = episode.format_errors;
        let tampered = tamper.tampered();
        let counts = Reward {
            score: 0.0,
            public_passed: public.passed.len() as u32,
            public_total: (public.passed.len() + public.failed.len()) as u32,
            // A tampered workspace's hidden result fails, whatever the cases said: a forgery
            // the cases missed must not pay (the verdict's own counts stay in `last_end`).
            hidden_passed: if tampered { 0 } else { verdict.hidden_passed() },
            hidden_total: verdict.hidden_total(),
            tampered,
            format_errors,
            verdict_reruns: reruns,
        };
        let reward = self.config.reward.apply(counts, ending);
        if let Some(e) = self.episode.as_mut() {
            e.done = true;
        }
        self.last_end = Some(EpisodeEnd {
            reward: reward.clone(),
            verdict,
            tamper,
        });
        Ok(reward)
    }

    fn dispatch(&mut self, call: &ToolCall) -> Result<Result<Observation, CallError>, GymError> {
        let args = &call.arguments;
        let Some(tool) = Tool::from_name(&call.name) else {
            return Ok(Err(CallError(
                ErrorKind::UnknownTool,
                format!(
                    "unknown tool `{}`; the tools are {}",
                    call.name,
                    Tool::list()
                ),
            )));
        };
        Ok(match tool {
            Tool::Read => self.tool_read(args),
            Tool::Test => Ok(Observation::Tests(self.run_workspace_tests()?)),
            Tool::Edit => self.tool_edit(args),
            Tool::Exploit => self.tool_exploit(),
            Tool::Submit => Ok(Observation::Submitted(self.finish(true)?)),
        })
    }
}

fn str_arg(args: &Value, key: &str) -> Result<String, CallError> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(bad_args(format!("`{key}` must be a string"))),
        None => Err(bad_args(format!("missing argument `{key}`"))),
    }
}

fn uint_arg(args: &Value, key: &str) -> Result<usize, CallError> {
    match args.get(key) {
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| bad_args(format!("`{key}` must be a positive integer"))),
        None => Err(bad_args(format!("missing argument `{key}`"))),
    }
}

impl Env for BugFixEnv {
    type Error = GymError;

    fn reset(&mut self, task_id: &str) -> Result<Observation, GymError> {
        let task = self.tasks.get(task_id)?;
        // Its own tmpfs, with the task's byte and file quota (see sandbox/scratch.rs).
        let quota = crate::sandbox::Quota::of(&task.run_limits(&self.config.limits));
        let workspace = crate::sandbox::bounded_scratch_dir("agentrl-ws-", quota)
            .map_err(io("creating a workspace"))?;
        verify::write_files(
            workspace.path(),
            task.visible.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(io("writing the task files"))?;
        let observation = task.observation();
        self.episode = Some(Episode {
            task,
            workspace,
            turns: 0,
            format_errors: 0,
            done: false,
        });
        self.last_end = None;
        Ok(observation)
    }

    fn step(&mut self, action: &Action) -> Result<Step, GymError> {
        let episode = self.episode.as_ref().ok_or(GymError::NoEpisode)?;
        if episode.done {
            return Err(GymError::EpisodeOver);
        }
        let result = match action {
            Action::Malformed { reason, .. } => Err(CallError(
                ErrorKind::Malformed,
                format!("could not parse a tool call: {reason}"),
            )),
            Action::Call(call) => self.dispatch(call)?,
        };
        let max_chars = self.config.max_message_chars;
        let episode = self.episode.as_mut().ok_or(GymError::NoEpisode)?;
        episode.turns += 1;
        let mut observation = match result {
            Ok(obs) => obs,
            Err(CallError(kind, message)) => {
                episode.format_errors += 1;
                Observation::Error {
                    error: kind,
                    message: truncate_chars(&message, max_chars),
                }
            }
        };
        let mut done = episode.done;
        if !done && episode.turns >= self.config.max_turns {
            observation = Observation::TurnLimit(self.finish(false)?);
            done = true;
        }
        let reward = if done {
            self.last_end.as_ref().map(|e| e.reward.clone())
        } else {
            None
        };
        Ok(Step {
            observation,
            done,
            reward,
        })
    }
}
