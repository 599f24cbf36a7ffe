//! What an evaluation measures, by name: the split, how many of its tasks, how many episodes
//! of each, pass@k's k, the sampling temperature and the seed of the evaluation's stream.
//!
//! Where it sits: at the side of the data flow. [`crate::trainer::Trainer::evaluate`] takes
//! one and samples fresh episodes of the split's tasks with the trainer's current weights
//! (task → episode), then summarises them (`agentrl_rollout::EvalReport`); nothing of it
//! reaches a batch, a loss or an update.

use agentrl_gym::Split;

use crate::config::EvalConfig;

/// One evaluation of the current policy, every setting named.
///
/// ```
/// use agentrl_gym::Split;
/// use agentrl_train::EvalSpec;
///
/// // Greedy, one episode per task, on the first 8 heldout tasks (spread over the families).
/// let spec = EvalSpec {
///     split: Split::Heldout,
///     max_tasks: Some(8),
///     samples_per_task: 1,
///     k: 1,
///     temperature: 0.0,
///     ..EvalSpec::default()
/// };
/// spec.check()?;
/// assert!(EvalSpec { k: 2, ..spec }.check().is_err(), "pass@2 needs 2 samples per task");
/// # anyhow::Ok(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalSpec {
    /// The split whose tasks are evaluated.
    pub split: Split,
    /// At most this many of the split's tasks, evenly spaced over its order (so every family
    /// is represented, and the same tasks each time); `None` = every task.
    pub max_tasks: Option<usize>,
    /// Episodes sampled per task (the `n` of pass@k), at least 1.
    pub samples_per_task: usize,
    /// The report's pass@k is for this `k`: 1 ≤ `k` ≤ `samples_per_task`.
    pub k: usize,
    /// Sampling temperature; 0 = greedy. The rest of the sampling (top-k, top-p) is the run's
    /// `[sampling]`.
    pub temperature: f64,
    /// Seed of the evaluation's sampling stream, mixed with the run's `train.seed`: the same
    /// spec on the same weights samples the same episodes, and no evaluation draws from the
    /// training streams.
    pub seed: u64,
}

impl Default for EvalSpec {
    /// Every heldout task, 4 episodes each at temperature 1, pass@4 (the default config's
    /// `[eval]`), seed 0.
    fn default() -> Self {
        EvalSpec {
            split: Split::Heldout,
            max_tasks: None,
            samples_per_task: 4,
            k: 4,
            temperature: 1.0,
            seed: 0,
        }
    }
}

impl EvalSpec {
    /// A run's own evaluation of `split` (untrained, periodic, final), as its `[eval]` section
    /// says: `eval.samples` episodes per task and pass@`eval.samples`, at `eval.temperature`,
    /// on at most `eval.tasks_per_split` tasks (0 = every task).
    pub fn for_run(eval: &EvalConfig, split: Split, seed: u64) -> Self {
        EvalSpec {
            split,
            max_tasks: (eval.tasks_per_split > 0).then_some(eval.tasks_per_split),
            samples_per_task: eval.samples,
            k: eval.samples,
            temperature: eval.temperature,
            seed,
        }
    }

    /// An error naming the field at fault when the spec cannot be evaluated.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.samples_per_task >= 1,
            "EvalSpec.samples_per_task must be >= 1"
        );
        anyhow::ensure!(
            (1..=self.samples_per_task).contains(&self.k),
            "EvalSpec.k = {} must be between 1 and samples_per_task = {}",
            self.k,
            self.samples_per_task
        );
        anyhow::ensure!(
            self.temperature.is_finite() && self.temperature >= 0.0,
            "EvalSpec.temperature = {} must be >= 0 (0 = greedy)",
            self.temperature
        );
        anyhow::ensure!(
            self.max_tasks != Some(0),
            "EvalSpec.max_tasks = Some(0) evaluates nothing (None = every task)"
        );
        Ok(())
    }
}
