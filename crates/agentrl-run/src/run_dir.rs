//! The run directory: where a training run leaves everything it produced, written so that a
//! SIGKILL at any moment leaves the last checkpoint loadable.
//!
//! ```text
//! runs/<name>/
//!   config.toml                      resolved config (every algorithm knob written out)
//!   metrics.jsonl                    one JSON object per training step (crate::metrics)
//!   events.out.tfevents.<secs>.<host> the same scalars for TensorBoard, one file a session
//!   dashboard.html, dashboard/*.png  the monitor's page and panel images (agentrl-monitor)
//!   episodes/step_000010.jsonl       sampled episodes of every `train.episodes_every`-th step
//!   checkpoints/step_000020/         model.safetensors, optimizer.safetensors, state.json
//!   checkpoints/latest               name of the newest complete checkpoint
//!   summary.json                     the untrained → trained evaluation, at the end
//!   summary.step_000020.json         an earlier session's summary, kept when a resume rewrites it
//!   config_changes.jsonl             every `--set` applied on `--resume`, with the old value
//!   eval/step_000020-<time>.json     results of `agentrl eval --run` (never the training files),
//!   eval/step_000020-<time>.md       with its report (pass@k, pass^k, intervals, families)
//!   .lock                            held (flock) by the one process writing the run
//! ```
//!
//! Writers: one at a time. [`RunDir::create`] and [`RunDir::open_for_writing`] take an
//! exclusive `flock` on `.lock` for the life of the [`RunDir`] (the kernel drops it when the
//! process dies, so a SIGKILL leaves no stale lock); a second writer is refused with the
//! holder's pid. Readers ([`RunDir::open`], `agentrl eval`) take no lock and write only new,
//! uniquely named files under `eval/`.
//!
//! Atomicity: every file goes to a temporary name, is fsynced, then renamed; a checkpoint is
//! staged in `checkpoints/.partial-step_N/` and renamed whole; `latest` is replaced last.
//! Loading ignores staging directories and, if `latest` is unusable, falls back to the newest
//! complete `step_*` directory.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::metrics::MetricLine;
use crate::tensorboard::EventFile;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory
/// (`tempfile`), fsync, rename over `path`, fsync of the directory. A reader sees the old
/// file or the new one, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, |tmp| {
        fs::write(tmp, bytes).with_context(|| format!("writing {}", tmp.display()))
    })
}

/// Produces a file at `path` atomically with a writer that only knows how to write to a path
/// (e.g. safetensors savers).
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file beside {}", path.display()))?;
    write(tmp.path())?;
    // tempfile creates 0600 files; run outputs are meant to be read by the group.
    set_readable(tmp.path())?;
    File::open(tmp.path())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", tmp.path().display()))?;
    tmp.persist(path)
        .with_context(|| format!("renaming a temporary file to {}", path.display()))?;
    sync_parent(path)
}

/// Mode 0644 (owner writes, everyone reads), as other outputs of a run.
#[cfg(unix)]
fn set_readable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

#[cfg(not(unix))]
fn set_readable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

fn sync_parent(path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        // Directory fsync makes the rename durable; not all platforms allow opening a dir.
        if let Ok(dir) = File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// What a checkpoint records besides the weights: enough to continue the run exactly.
///
/// RNG streams are derived from `(seed, step, purpose)`, so the step counter is the whole RNG
/// state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Training steps completed.
    pub step: usize,
    pub seed: u64,
    /// Compute threads the run used (determinism holds for the same count).
    pub threads: usize,
    /// Current β of the KL penalty (moves with the adaptive controller). serde_json is built
    /// with `float_roundtrip`, so the value read back is bit-identical and a resumed run
    /// continues with the very same β.
    pub kl_coef: f64,
    pub optimizer_steps: u64,
    pub episodes_seen: u64,
    /// Training wall time so far, seconds (excluding evaluations).
    pub train_seconds: f64,
}

/// Files of one checkpoint directory.
pub struct CheckpointPaths {
    pub dir: PathBuf,
    pub model: PathBuf,
    pub optimizer: PathBuf,
    pub state: PathBuf,
}

impl CheckpointPaths {
    fn in_dir(dir: PathBuf) -> Self {
        Self {
            model: dir.join("model.safetensors"),
            optimizer: dir.join("optimizer.safetensors"),
            state: dir.join("state.json"),
            dir,
        }
    }
}

/// The exclusive lock of a run directory's writer: an `flock` on `.lock`, with the holder's
/// pid written in the file for the message a second writer gets. Released when dropped or
/// when the process dies.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Takes the lock of the run in `root`, or fails naming the pid that holds it.
    pub fn acquire(root: &Path) -> anyhow::Result<Self> {
        let path = root.join(".lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        if !lock_with_grace(&file).with_context(|| format!("locking {}", path.display()))? {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_string(),
                pid => format!("process {pid}"),
            };
            bail!(
                "run directory {} is in use: {holder} is writing to it (it holds {}); wait \
                 for it to finish or stop it first",
                root.display(),
                path.display()
            );
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.flush())
            .with_context(|| format!("writing the pid to {}", path.display()))?;
        Ok(Self { _file: file })
    }
}

/// How long a busy lock is retried before the run counts as in use.
///
/// Why a grace period: an `flock` belongs to an open file description, and every child this
/// process forks holds a copy of every descriptor between its `fork` and its `exec` (close-on-
/// exec closes them only at the `exec`). The gym's sandbox forks jobs all the time, so a lock
/// just released by this process can stay held for the few milliseconds a child takes to
/// reach `exec`. A real second writer holds its lock for the life of its run, far longer.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// [`try_lock_exclusive`], retried for [`LOCK_GRACE`].
fn lock_with_grace(file: &File) -> std::io::Result<bool> {
    let started = std::time::Instant::now();
    loop {
        if try_lock_exclusive(file)? {
            return Ok(true);
        }
        if started.elapsed() >= LOCK_GRACE {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: `Ok(false)` when another open file description holds it.
#[cfg(unix)]
fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a file descriptor this `File` owns for the duration of the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(err)
    }
}

#[cfg(not(unix))]
fn try_lock_exclusive(_file: &File) -> std::io::Result<bool> {
    Ok(true)
}

/// Checks a run name: one plain path component (letters, digits, `.`, `_`, `-`; not starting
/// with `.`), so a run always lands inside `runs_root`.
pub fn validate_run_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("train.run_name is empty; leave it unset for a timestamped name".into());
    }
    if name.starts_with('.') {
        return Err(format!(
            "train.run_name = {name:?} may not start with `.` (`.`, `..` and hidden names \
             would escape or hide in train.runs_root)"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "train.run_name = {name:?} contains {bad:?}; a run name is one folder name of \
             letters, digits, `.`, `_` and `-`"
        ));
    }
    if name.len() > 200 {
        return Err(format!(
            "train.run_name is {} characters long; at most 200",
            name.len()
        ));
    }
    Ok(())
}

/// A run directory on disk. A `RunDir` from [`RunDir::create`] or [`RunDir::open_for_writing`]
/// holds the run's lock for as long as it (or a clone) lives.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub root: PathBuf,
    lock: Option<Arc<RunLock>>,
    /// This session's TensorBoard event file, created at the first [`RunDir::log_metrics`].
    events: Arc<Mutex<Option<EventFile>>>,
}

impl RunDir {
    /// Creates `runs_root/name` (or a timestamped name) and takes its lock; refuses a name
    /// that is not one plain folder name, and a directory that already holds a run or is
    /// being written by another process.
    pub fn create(runs_root: &Path, name: Option<&str>) -> anyhow::Result<Self> {
        let root = match name {
            Some(n) => {
                validate_run_name(n).map_err(anyhow::Error::msg)?;
                let root = runs_root.join(n);
                fs::create_dir_all(&root)
                    .with_context(|| format!("creating run directory {}", root.display()))?;
                root
            }
            None => fresh_timestamped_dir(runs_root)?,
        };
        // The lock first, so a run being written is refused with its writer's pid; the check
        // for an existing run is then made under the lock (a writer that started at the same
        // moment and won the lock has written its config by the time it lets go).
        let lock = RunLock::acquire(&root)?;
        if root.join("config.toml").exists() {
            bail!(
                "run directory {} already holds a run; continue it with `agentrl train --resume {}` \
                 or choose another train.run_name",
                root.display(),
                root.display()
            );
        }
        fs::create_dir_all(root.join("checkpoints"))
            .with_context(|| format!("creating run directory {}", root.display()))?;
        fs::create_dir_all(root.join("episodes"))
            .with_context(|| format!("creating {}", root.join("episodes").display()))?;
        Ok(Self {
            root,
            lock: Some(Arc::new(lock)),
            events: Arc::default(),
        })
    }

    /// Opens an existing run to read it (`eval --run`): takes no lock, and the only writes
    /// allowed are new files under `eval/` ([`RunDir::write_eval`]).
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        if !root.is_dir() {
            bail!(
                "{} is not a run directory (no such directory)",
                root.display()
            );
        }
        if !root.join("config.toml").is_file() {
            bail!(
                "{} is not a run directory (no config.toml in it)",
                root.display()
            );
        }
        Ok(Self {
            root: root.to_path_buf(),
            lock: None,
            events: Arc::default(),
        })
    }

    /// Opens an existing run to continue it (`--resume`): takes its lock (refused while
    /// another process writes it), then clears what a killed writer left half-done.
    pub fn open_for_writing(root: &Path) -> anyhow::Result<Self> {
        let mut run = Self::open(root)?;
        run.lock = Some(Arc::new(RunLock::acquire(root)?));
        run.remove_leftovers()?;
        Ok(run)
    }

    /// Whether this handle holds the run's lock.
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }

    fn ensure_writer(&self, what: &str) -> anyhow::Result<()> {
        if self.lock.is_none() {
            bail!(
                "{} was opened read-only; {what} needs the run's lock (RunDir::open_for_writing)",
                self.root.display()
            );
        }
        Ok(())
    }

    /// Removes the temporaries of interrupted atomic writes (`.NAME.tmp-*`), staging
    /// directories (`checkpoints/.partial-*`, `.old-*`) of interrupted checkpoints. Only a
    /// lock holder calls this, so none of them belongs to a live writer.
    fn remove_leftovers(&self) -> anyhow::Result<()> {
        let checkpoints = self.checkpoints_dir();
        let mut dirs = vec![
            self.root.clone(),
            self.root.join("episodes"),
            checkpoints.clone(),
        ];
        if let Ok(entries) = fs::read_dir(&checkpoints) {
            dirs.extend(
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("step_"))
                    .map(|e| e.path()),
            );
        }
        for dir in dirs {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = entry.path();
                if name.starts_with('.') && name.contains(".tmp-") && path.is_file() {
                    fs::remove_file(&path)
                        .with_context(|| format!("removing leftover {}", path.display()))?;
                } else if dir == checkpoints
                    && (name.starts_with(".partial-") || name.starts_with(".old-"))
                    && path.is_dir()
                {
                    fs::remove_dir_all(&path)
                        .with_context(|| format!("removing leftover {}", path.display()))?;
                }
            }
        }
        Ok(())
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    pub fn metrics_path(&self) -> PathBuf {
        self.root.join("metrics.jsonl")
    }

    pub fn summary_path(&self) -> PathBuf {
        self.root.join("summary.json")
    }

    fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    pub fn write_config(&self, text: &str) -> anyhow::Result<()> {
        self.ensure_writer("writing config.toml")?;
        write_atomic(&self.config_path(), text.as_bytes())
    }

    /// `config_changes.jsonl`: one line per `--set` applied when the run was resumed.
    pub fn config_changes_path(&self) -> PathBuf {
        self.root.join("config_changes.jsonl")
    }

    /// Records config changes (appended to `config_changes.jsonl`), then writes the new
    /// config: the old values stay on record, so nothing of the run is silently overwritten.
    pub fn change_config<T: Serialize>(&self, changes: &[T], text: &str) -> anyhow::Result<()> {
        self.ensure_writer("changing config.toml")?;
        for change in changes {
            append_line(&self.config_changes_path(), change)?;
        }
        write_atomic(&self.config_path(), text.as_bytes())
    }

    /// Writes `summary.json`. A summary already there (an earlier session of a resumed run)
    /// is kept as `summary.step_N.json`, N its step count, not overwritten.
    pub fn write_summary(&self, json: &[u8], previous_steps: Option<usize>) -> anyhow::Result<()> {
        self.ensure_writer("writing summary.json")?;
        let path = self.summary_path();
        if path.exists() {
            let step = previous_steps.unwrap_or(0);
            let mut keep = self.root.join(format!("summary.step_{step:06}.json"));
            let mut n = 1;
            while keep.exists() {
                keep = self.root.join(format!("summary.step_{step:06}.{n}.json"));
                n += 1;
            }
            fs::rename(&path, &keep).with_context(|| {
                format!(
                    "keeping the previous {} as {}",
                    path.display(),
                    keep.display()
                )
            })?;
        }
        write_atomic(&path, json)
    }

    /// Writes an evaluation's results as a new file under `eval/` (named by the checkpoint's
    /// step and the time); the only write a reader makes. Returns the file's path.
    pub fn write_eval(&self, step: usize, json: &[u8]) -> anyhow::Result<PathBuf> {
        let stem = self.new_eval_stem(step)?;
        let path = stem.with_extension("json");
        write_atomic(&path, json)?;
        Ok(path)
    }

    /// Writes an evaluation report as two new files under `eval/` with one name: the JSON
    /// and its Markdown rendering. Returns both paths (JSON first).
    pub fn write_eval_report(
        &self,
        step: usize,
        json: &[u8],
        markdown: &str,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        let stem = self.new_eval_stem(step)?;
        let (json_path, md_path) = (stem.with_extension("json"), stem.with_extension("md"));
        write_atomic(&json_path, json)?;
        write_atomic(&md_path, markdown.as_bytes())?;
        Ok((json_path, md_path))
    }

    /// `eval/step_N-<time>[.k]`, a name no file of `eval/` has yet (with any extension).
    fn new_eval_stem(&self, step: usize) -> anyhow::Result<PathBuf> {
        let dir = self.root.join("eval");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let base = format!("step_{step:06}-{}", timestamp_name());
        let taken = |stem: &str| {
            ["json", "md"]
                .iter()
                .any(|ext| dir.join(format!("{stem}.{ext}")).exists())
        };
        let mut stem = base.clone();
        let mut n = 1;
        while taken(&stem) {
            stem = format!("{base}.{n}");
            n += 1;
        }
        // `with_extension` on `stem` must not eat a `.k` suffix: give it a placeholder one.
        Ok(dir.join(format!("{stem}.eval")))
    }

    /// Writes one step's sampled episodes, one JSON object per line.
    pub fn write_episodes<T: Serialize>(&self, step: usize, episodes: &[T]) -> anyhow::Result<()> {
        self.ensure_writer("writing episodes")?;
        let mut text = String::new();
        for episode in episodes {
            text.push_str(&serde_json::to_string(episode).context("serialising an episode")?);
            text.push('\n');
        }
        let dir = self.root.join("episodes");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        write_atomic(&dir.join(format!("step_{step:06}.jsonl")), text.as_bytes())
    }

    /// Writes a checkpoint with `write_files` filling the staging directory, then publishes it
    /// with a directory rename and an atomic update of `latest`; then keeps only the newest
    /// `keep` complete checkpoints (0 = keep all).
    pub fn save_checkpoint(
        &self,
        state: &TrainState,
        keep: usize,
        write_files: impl FnOnce(&CheckpointPaths) -> anyhow::Result<()>,
    ) -> anyhow::Result<PathBuf> {
        self.ensure_writer("writing a checkpoint")?;
        let name = format!("step_{:06}", state.step);
        let checkpoints = self.checkpoints_dir();
        fs::create_dir_all(&checkpoints)
            .with_context(|| format!("creating {}", checkpoints.display()))?;
        let staging = checkpoints.join(format!(".partial-{name}"));
        if staging.exists() {
            fs::remove_dir_all(&staging)
                .with_context(|| format!("clearing stale {}", staging.display()))?;
        }
        fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
        let paths = CheckpointPaths::in_dir(staging.clone());
        write_files(&paths)?;
        for file in [&paths.model, &paths.optimizer] {
            File::open(file)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("syncing {}", file.display()))?;
        }
        let state_json = serde_json::to_vec_pretty(state).context("serialising state.json")?;
        write_atomic(&paths.state, &state_json)?;
        sync_parent(&paths.state)?;

        let final_dir = checkpoints.join(&name);
        if final_dir.exists() {
            let old = checkpoints.join(format!(".old-{name}"));
            let _ = fs::remove_dir_all(&old);
            fs::rename(&final_dir, &old)
                .with_context(|| format!("moving aside {}", final_dir.display()))?;
            fs::rename(&staging, &final_dir)
                .with_context(|| format!("publishing {}", final_dir.display()))?;
            let _ = fs::remove_dir_all(&old);
        } else {
            fs::rename(&staging, &final_dir)
                .with_context(|| format!("publishing {}", final_dir.display()))?;
        }
        sync_parent(&final_dir)?;
        write_atomic(&checkpoints.join("latest"), name.as_bytes())?;
        self.prune_checkpoints(keep, &name)?;
        Ok(final_dir)
    }

    /// Names of the `step_N` directories, newest first.
    pub fn checkpoint_names(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.checkpoints_dir()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| step_of_name(n).is_some())
            .collect();
        names.sort_by_key(|n| std::cmp::Reverse(step_of_name(n)));
        names
    }

    /// Deletes all but the newest `keep` checkpoints (never `latest`'s).
    fn prune_checkpoints(&self, keep: usize, latest: &str) -> anyhow::Result<()> {
        if keep == 0 {
            return Ok(());
        }
        for name in self.checkpoint_names().iter().skip(keep) {
            if name == latest {
                continue;
            }
            let dir = self.checkpoints_dir().join(name);
            fs::remove_dir_all(&dir)
                .with_context(|| format!("removing old checkpoint {}", dir.display()))?;
        }
        Ok(())
    }

    /// The newest loadable checkpoint: the one `latest` names if it is complete, else the
    /// highest complete `step_*` directory. `None` if the run has no checkpoint.
    pub fn latest_checkpoint(&self) -> anyhow::Result<Option<(CheckpointPaths, TrainState)>> {
        Ok(self.checkpoints()?.into_iter().next())
    }

    /// Every complete checkpoint, the one to load first: `latest`'s, then the others newest
    /// first (the fallbacks when a file of a newer one turns out torn). A checkpoint counts
    /// when its `state.json` parses, its step is its directory's, and both weight files are
    /// there. `latest` must name a `step_N` directory of this run; anything else (a path, a
    /// name of another run) is ignored with a warning.
    pub fn checkpoints(&self) -> anyhow::Result<Vec<(CheckpointPaths, TrainState)>> {
        let checkpoints = self.checkpoints_dir();
        let mut names = self.checkpoint_names();
        if let Ok(text) = fs::read_to_string(checkpoints.join("latest")) {
            let latest = text.trim();
            match names.iter().position(|n| n == latest) {
                Some(i) => {
                    let name = names.remove(i);
                    names.insert(0, name);
                }
                None => tracing::warn!(
                    "{}: `latest` holds {latest:?}, which is not a checkpoint of this run; \
                     using the newest complete step_* directory",
                    checkpoints.display()
                ),
            }
        }
        let mut found = Vec::new();
        for name in names {
            let paths = CheckpointPaths::in_dir(checkpoints.join(&name));
            match read_complete(&paths, &name) {
                Ok(state) => found.push((paths, state)),
                Err(err) => tracing::warn!("skipping checkpoint {name}: {err:#}"),
            }
        }
        Ok(found)
    }

    /// Appends one JSON line to `metrics.jsonl` and flushes it.
    pub fn append_metrics<T: Serialize>(&self, record: &T) -> anyhow::Result<()> {
        self.ensure_writer("appending to metrics.jsonl")?;
        append_line(&self.metrics_path(), record)
    }

    /// Writes one step's scalars to both sinks: a line of `metrics.jsonl` and scalar events
    /// in this session's TensorBoard event file (`events.out.tfevents.*`, created at the
    /// first call).
    pub fn log_metrics(&self, line: &MetricLine) -> anyhow::Result<()> {
        self.append_metrics(line)?;
        let mut events = self.events.lock().map_err(|_| {
            anyhow::anyhow!("the TensorBoard writer of {} panicked", self.root.display())
        })?;
        if events.is_none() {
            *events = Some(EventFile::create(&self.root)?);
        }
        match events.as_mut() {
            Some(file) => file.append(line),
            None => Ok(()),
        }
    }

    /// The TensorBoard event files in the run directory, oldest first.
    pub fn event_files(&self) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents."))
            })
            .collect();
        files.sort();
        files
    }

    /// Drops metrics lines of steps after `step` (written by a run killed after its last
    /// checkpoint), so a resumed run's log has each step once.
    pub fn truncate_metrics_after(&self, step: usize) -> anyhow::Result<()> {
        self.ensure_writer("truncating metrics.jsonl")?;
        let path = self.metrics_path();
        let Ok(text) = fs::read_to_string(&path) else {
            return Ok(());
        };
        let mut kept = String::new();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                // A torn last line from a kill mid-write.
                continue;
            };
            let line_step = value.get("step").and_then(|s| s.as_u64());
            if line_step.is_some_and(|s| s as usize <= step) {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        write_atomic(&path, kept.as_bytes())
    }
}

/// Appends one JSON line to `path` (created 0644) and flushes it.
fn append_line<T: Serialize>(path: &Path, record: &T) -> anyhow::Result<()> {
    let line = serde_json::to_string(record).context("serialising a record")?;
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{line}").with_context(|| format!("appending to {}", path.display()))?;
    file.flush()?;
    Ok(())
}

/// The step of a checkpoint directory name `step_N`.
fn step_of_name(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("step_")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn read_complete(paths: &CheckpointPaths, name: &str) -> anyhow::Result<TrainState> {
    let text = fs::read_to_string(&paths.state)
        .with_context(|| format!("reading {}", paths.state.display()))?;
    let state: TrainState = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", paths.state.display()))?;
    if Some(state.step) != step_of_name(name) {
        bail!(
            "{} says step {}, but it is the checkpoint of {name}",
            paths.state.display(),
            state.step
        );
    }
    for file in [&paths.model, &paths.optimizer] {
        if !file.is_file() {
            bail!("{} is missing", file.display());
        }
    }
    Ok(state)
}

/// Creates a new, empty `runs_root/<timestamp>` folder. Two runs started in the same second
/// by one process (a sweep, a test) would share a name, so a taken name gets `-2`, `-3`, …;
/// `create_dir` (not `create_dir_all`) makes the claim atomic.
fn fresh_timestamped_dir(runs_root: &Path) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(runs_root)
        .with_context(|| format!("creating the runs root {}", runs_root.display()))?;
    let base = timestamp_name();
    for attempt in 1..=1000 {
        let name = if attempt == 1 {
            base.clone()
        } else {
            format!("{base}-{attempt}")
        };
        let root = runs_root.join(name);
        match fs::create_dir(&root) {
            Ok(()) => return Ok(root),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("creating run directory {}", root.display()))
            }
        }
    }
    bail!(
        "no free run name {base}-N under {} after 1000 tries",
        runs_root.display()
    )
}

/// `YYYYmmdd-HHMMSS` in UTC, plus the process id, so runs two processes start in the same second
/// differ (one process's are told apart by [`fresh_timestamped_dir`]).
// Public for the integration tests (tests/run/run_dir.rs).
#[doc(hidden)]
pub fn timestamp_name() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        std::process::id()
    )
}
