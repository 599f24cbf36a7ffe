//! # agentrl-run: what a run leaves on disk
//!
//! The run directory's layout and contract ([`run_dir`]): the resolved config, one metrics
//! line per training step (named scalars, [`metrics`]; also as TensorBoard events,
//! `tensorboard`), sampled episodes as JSONL, checkpoints staged and renamed whole,
//! and the summary, every file written atomically, with one writer at a time (an exclusive
//! lock on the directory) and read-only access for evaluation. Records are any `Serialize` type, so this
//! crate knows nothing of tensors or models and builds in seconds.
//!
//! Where it sits: at the end of the data flow. The trainer (`agentrl-train`) writes here;
//! evaluation, the dashboard and the doctor read from here.

//! A user starts from a [`RunDir`] ([`RunDir::create`] for a new run, [`RunDir::open`] to read
//! one) and [`MetricLine`]s, named by [`metrics::names`].
//!
//! ```rust
//! use agentrl_run::metrics::names;
//! use agentrl_run::{read_metrics, MetricLine, RunDir};
//!
//! let runs = tempfile::tempdir()?;
//! let run = RunDir::create(runs.path(), Some("demo"))?; // runs/demo, locked while `run` lives
//! let mut line = MetricLine::new(1);
//! line.set(names::REWARD_MEAN, 0.5).set(names::SOLVE_HIDDEN, 0.25);
//! run.log_metrics(&line)?; // a line of metrics.jsonl (and a TensorBoard event)
//!
//! let lines = read_metrics(&run.metrics_path())?;
//! assert_eq!(lines[0].get(names::SOLVE_HIDDEN), Some(0.25));
//! # anyhow::Ok(())
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod metrics;
pub mod run_dir;

// Internal, public for the integration tests (crates/agentrl-run/tests/).
#[doc(hidden)]
pub mod tensorboard;

pub use metrics::{read_metrics, MetricLine};
pub use run_dir::{
    validate_run_name, write_atomic, write_atomic_with, CheckpointPaths, RunDir, RunLock,
    TrainState,
};
