//! A run as the monitor reads it: the run directory's metric lines, and each metric as a
//! series of `(step, value)` points.
//!
//! Where it sits: first stop after the run directory; the doctor, the dashboard and the
//! episode view all read through it.

use std::path::{Path, PathBuf};

use agentrl_run::metrics::{read_metrics, MetricLine};
use anyhow::{bail, Context};

/// One run's metrics.
#[derive(Debug, Clone)]
pub struct RunData {
    /// The run directory's folder name (the legend label).
    pub name: String,
    pub root: PathBuf,
    pub lines: Vec<MetricLine>,
}

impl RunData {
    /// Reads `root/metrics.jsonl`. A run directory (it has its `config.toml`) without
    /// metrics yet, one stopped before its first step ended, has no lines. Refuses a folder
    /// that is not a run, naming what is missing.
    pub fn load(root: &Path) -> anyhow::Result<Self> {
        if !root.is_dir() {
            bail!(
                "{} is not a run directory (no such directory)",
                root.display()
            );
        }
        let metrics = root.join("metrics.jsonl");
        let lines = if metrics.is_file() {
            read_metrics(&metrics)?
        } else if root.join("config.toml").is_file() {
            Vec::new()
        } else {
            bail!(
                "{} is not a run directory (no metrics.jsonl or config.toml in it)",
                root.display()
            );
        };
        let name = root
            .canonicalize()
            .with_context(|| format!("resolving {}", root.display()))?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| root.display().to_string());
        Ok(Self {
            name,
            root: root.to_path_buf(),
            lines,
        })
    }

    /// The steps at which `metric` was recorded, with its values (NaN where it diverged).
    pub fn series(&self, metric: &str) -> Vec<(f64, f64)> {
        series(&self.lines, metric)
    }

    /// The last step recorded (0 for a run with no line).
    pub fn last_step(&self) -> usize {
        self.lines.last().map_or(0, |l| l.step)
    }
}

/// `(step, value)` of `metric` over `lines`, in line order.
pub fn series(lines: &[MetricLine], metric: &str) -> Vec<(f64, f64)> {
    lines
        .iter()
        .filter_map(|l| l.get(metric).map(|v| (l.step as f64, v)))
        .collect()
}
