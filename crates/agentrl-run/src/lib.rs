//! # agentrl-run: what a run leaves on disk
//!
//! The run directory's layout and contract ([`run_dir`]): the resolved config, one metrics
//! line per training step (named scalars, [`metrics`]; also as TensorBoard events,
//! [`tensorboard`]), sampled episodes as JSONL, checkpoints staged and renamed whole,
//! and the summary, every file written atomically, with one writer at a time (an exclusive
//! lock on the directory) and read-only access for evaluation. Records are any `Serialize` type, so this
//! crate knows nothing of tensors or models and builds in seconds.
//!
//! Where it sits: at the end of the data flow. The trainer (`agentrl-train`) writes here;
//! evaluation, the dashboard and the doctor read from here.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod metrics;
pub mod run_dir;
pub mod tensorboard;

pub use metrics::{read_metrics, MetricLine};
pub use run_dir::{
    validate_run_name, write_atomic, write_atomic_with, CheckpointPaths, RunDir, RunLock,
    TrainState,
};
