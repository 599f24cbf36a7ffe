//! Helpers of the session tests that train a small TinyAgent on a few real tasks (`sft`,
//! `post_training`, `train_loop`): their config, quiet session options and the evaluation
//! they measure learning with.

use std::path::Path;

use agentrl_gym::Split;
use agentrl_train::config::{load_config, Config};
use agentrl_train::session::{Progress, SessionOptions};
use agentrl_train::trainer::Trainer;
use agentrl_train::EvalSpec;

/// The train split, every task, 16 episodes each at T = 1, pass@16, from the stream `seed`.
pub(crate) fn train_split_16(seed: u64) -> EvalSpec {
    EvalSpec {
        split: Split::Train,
        max_tasks: None,
        samples_per_task: 16,
        k: 16,
        temperature: 1.0,
        seed,
    }
}

/// The keys every small TinyAgent run of these tests sets: where it writes and reads, one
/// thread, a one-layer model, 4 turns.
pub(crate) fn small_model_sets(root: &Path, tasks: &Path, name: &str) -> Vec<String> {
    vec![
        format!("train.runs_root={:?}", root.display().to_string()),
        format!("train.run_name={name}"),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        "train.threads=1".into(),
        "model.d_model=32".into(),
        "model.layers=1".into(),
        "model.heads=2".into(),
        "model.max_seq=160".into(),
        "rollout.max_turns=4".into(),
    ]
}

/// The post-training tests' config: [`small_model_sets`], 2 tasks × 8 episodes a step, no
/// checkpoints or episode files, then `extra`.
pub(crate) fn config(
    root: &Path,
    tasks: &Path,
    name: &str,
    extra: &[String],
) -> anyhow::Result<Config> {
    let mut sets = small_model_sets(root, tasks, name);
    sets.extend(
        [
            "rollout.tasks_per_step=2",
            "rollout.group_size=8",
            "train.checkpoint_every=0",
            "train.episodes_every=0",
        ]
        .map(String::from),
    );
    sets.extend(extra.iter().cloned());
    load_config(None, &sets)
}

pub(crate) fn quiet() -> SessionOptions {
    SessionOptions {
        progress: Progress::Off,
        summary_evals: false,
        stop: None,
    }
}

/// Hidden solve rate on the train split, 16 samples per task.
pub(crate) fn solve_rate(trainer: &Trainer) -> anyhow::Result<f64> {
    Ok(trainer.evaluate(&train_split_16(7))?.hidden_solve_rate)
}
