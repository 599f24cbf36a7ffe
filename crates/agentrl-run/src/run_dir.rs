//! The run directory: where a training run leaves everything it produced, written so that a
//! SIGKILL at any moment leaves the last checkpoint loadable.
//!
//! ```text
//! runs/<name>/
//!   config.toml                      resolved config (every algorithm knob written out)
//!   metrics.jsonl                    one JSON object per training step
//!   episodes/step_000010.jsonl       sampled episodes of every `train.episodes_every`-th step
//!   checkpoints/step_000020/         model.safetensors, optimizer.safetensors, state.json
//!   checkpoints/latest               name of the newest complete checkpoint
//!   summary.json                     the untrained → trained evaluation, at the end
//! ```
//!
//! Atomicity: every file goes to a temporary name, is fsynced, then renamed; a checkpoint is
//! staged in `checkpoints/.partial-step_N/` and renamed whole; `latest` is replaced last.
//! Loading ignores staging directories and, if `latest` is unusable, falls back to the newest
//! complete `step_*` directory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

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
    File::open(tmp.path())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", tmp.path().display()))?;
    tmp.persist(path)
        .with_context(|| format!("renaming a temporary file to {}", path.display()))?;
    sync_parent(path)
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

/// A run directory on disk.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    /// Creates `runs_root/name` (or a timestamped name); refuses to reuse a directory that
    /// already holds a run.
    pub fn create(runs_root: &Path, name: Option<&str>) -> anyhow::Result<Self> {
        let name = match name {
            Some(n) => n.to_string(),
            None => timestamp_name(),
        };
        let root = runs_root.join(&name);
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
        Ok(Self { root })
    }

    /// Opens an existing run (for `--resume` and `eval --run`).
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        if !root.join("config.toml").is_file() {
            bail!(
                "{} is not a run directory (no config.toml in it)",
                root.display()
            );
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
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
        write_atomic(&self.config_path(), text.as_bytes())
    }

    /// Writes one step's sampled episodes, one JSON object per line.
    pub fn write_episodes<T: Serialize>(&self, step: usize, episodes: &[T]) -> anyhow::Result<()> {
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
    /// with a directory rename and an atomic update of `latest`.
    pub fn save_checkpoint(
        &self,
        state: &TrainState,
        write_files: impl FnOnce(&CheckpointPaths) -> anyhow::Result<()>,
    ) -> anyhow::Result<PathBuf> {
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
        Ok(final_dir)
    }

    /// The newest loadable checkpoint: the one `latest` names if it is complete, else the
    /// highest complete `step_*` directory. `None` if the run has no checkpoint.
    pub fn latest_checkpoint(&self) -> anyhow::Result<Option<(CheckpointPaths, TrainState)>> {
        let checkpoints = self.checkpoints_dir();
        if let Ok(name) = fs::read_to_string(checkpoints.join("latest")) {
            let paths = CheckpointPaths::in_dir(checkpoints.join(name.trim()));
            if let Ok(state) = read_complete(&paths) {
                return Ok(Some((paths, state)));
            }
            tracing::warn!(
                "{}: `latest` names {:?}, which is incomplete; looking for an older checkpoint",
                checkpoints.display(),
                name.trim()
            );
        }
        let Ok(entries) = fs::read_dir(&checkpoints) else {
            return Ok(None);
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step_"))
            .collect();
        names.sort();
        for name in names.iter().rev() {
            let paths = CheckpointPaths::in_dir(checkpoints.join(name));
            if let Ok(state) = read_complete(&paths) {
                return Ok(Some((paths, state)));
            }
        }
        Ok(None)
    }

    /// Appends one JSON line to `metrics.jsonl` and flushes it.
    pub fn append_metrics<T: Serialize>(&self, record: &T) -> anyhow::Result<()> {
        let line = serde_json::to_string(record).context("serialising a metrics record")?;
        let path = self.metrics_path();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(file, "{line}").with_context(|| format!("appending to {}", path.display()))?;
        file.flush()?;
        Ok(())
    }

    /// Drops metrics lines of steps after `step` (written by a run killed after its last
    /// checkpoint), so a resumed run's log has each step once.
    pub fn truncate_metrics_after(&self, step: usize) -> anyhow::Result<()> {
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

fn read_complete(paths: &CheckpointPaths) -> anyhow::Result<TrainState> {
    let text = fs::read_to_string(&paths.state)
        .with_context(|| format!("reading {}", paths.state.display()))?;
    let state: TrainState = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", paths.state.display()))?;
    for file in [&paths.model, &paths.optimizer] {
        if !file.is_file() {
            bail!("{} is missing", file.display());
        }
    }
    Ok(state)
}

/// `YYYYmmdd-HHMMSS` in UTC, plus the process id so two runs started in the same second differ.
fn timestamp_name() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn state(step: usize) -> TrainState {
        TrainState {
            step,
            seed: 1,
            threads: 1,
            kl_coef: 0.0,
            optimizer_steps: step as u64,
            episodes_seen: 0,
            train_seconds: 0.0,
        }
    }

    fn fake_files(paths: &CheckpointPaths) -> anyhow::Result<()> {
        fs::write(&paths.model, b"model")?;
        fs::write(&paths.optimizer, b"optim")?;
        Ok(())
    }

    #[test]
    fn run_names_are_utc_timestamps() {
        let name = timestamp_name();
        let (date, rest) = name.split_once('-').unwrap();
        assert_eq!(date.len(), 8);
        assert!(date.starts_with("20"));
        assert!(rest.starts_with(|c: char| c.is_ascii_digit()));
    }

    #[test]
    fn latest_checkpoint_survives_partial_writes() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let run = RunDir::create(tmp.path(), Some("r"))?;
        run.write_config("x = 1")?;
        assert!(run.latest_checkpoint()?.is_none());
        run.save_checkpoint(&state(2), fake_files)?;
        run.save_checkpoint(&state(4), fake_files)?;
        assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);

        // A kill mid-checkpoint: a staging directory with half the files, and a torn temp file
        // of `latest`. Neither is seen.
        let cps = run.root.join("checkpoints");
        fs::create_dir_all(cps.join(".partial-step_000006"))?;
        fs::write(cps.join(".partial-step_000006/model.safetensors"), b"half")?;
        fs::write(cps.join(".latest.tmp-999"), b"step_0000")?;
        assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);

        // `latest` naming a directory that lost its state file falls back to the older one.
        fs::remove_file(cps.join("step_000004/state.json"))?;
        assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 2);

        // Re-saving a step replaces it whole.
        run.save_checkpoint(&state(4), fake_files)?;
        assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);
        Ok(())
    }

    #[test]
    fn metrics_truncation_keeps_earlier_steps_and_drops_torn_lines() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let run = RunDir::create(tmp.path(), Some("m"))?;
        for step in 1..=5 {
            run.append_metrics(&serde_json::json!({ "step": step }))?;
        }
        fs::OpenOptions::new()
            .append(true)
            .open(run.metrics_path())?
            .write_all(b"{\"step\": 6, \"rew")?;
        run.truncate_metrics_after(3)?;
        let text = fs::read_to_string(run.metrics_path())?;
        assert_eq!(text, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
        Ok(())
    }

    #[test]
    fn refuses_to_overwrite_a_run() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let run = RunDir::create(tmp.path(), Some("same"))?;
        run.write_config("a = 1")?;
        let err = RunDir::create(tmp.path(), Some("same")).unwrap_err();
        assert!(err.to_string().contains("--resume"), "{err}");
        Ok(())
    }
}
