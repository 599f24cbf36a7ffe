//! Training from code: what `agentrl train` does, through the library. A config is the
//! defaults plus `key=value` overrides (as `--set` takes them); the [`Trainer`] owns the
//! policy, optimizer, gym and run directory; each `step()` samples a batch of episodes,
//! scores them with the hidden-test verifier and updates the policy; `evaluate` measures a
//! split on fresh episodes.
//!
//! ```sh
//! cargo run --release --example train_in_code
//! ```
//!
//! It prints every step's reward and hidden solve rate, then the train and heldout solve
//! rates before and after. One compute thread and a fixed seed, so the numbers are the same on
//! every machine; `examples/train_in_code.out` is the recorded output, and
//! `tests/cli/examples.rs` runs the example and compares them.

use agentrl_gym::Split;
use agentrl_train::config::load_config;
use agentrl_train::{EvalSpec, Trainer};

const STEPS: usize = 20;

fn main() -> anyhow::Result<()> {
    // The run directory goes to a temporary folder: the example leaves nothing behind.
    let runs = tempfile::tempdir()?;
    let sets = vec![
        format!(
            "train.runs_root={}",
            serde_json::to_string(&runs.path().to_string_lossy())?
        ),
        format!("train.steps={STEPS}"),
        "train.seed=1".to_string(),
        "train.threads=1".to_string(),
        "train.checkpoint_every=0".to_string(),
        "train.episodes_every=0".to_string(),
    ];
    let config = load_config(None, &sets)?;
    println!(
        "algorithm {}, {} tasks x {} episodes per step, lr {}",
        config.algorithm.name,
        config.rollout.tasks_per_step,
        config.rollout.group_size,
        config.optim.lr
    );
    let (mut trainer, _) = Trainer::create(config)?;
    let evaluate = |trainer: &Trainer, split: Split| -> anyhow::Result<f64> {
        // Every task of the split, 4 episodes each at T = 1, from a stream of its own.
        let spec = EvalSpec {
            split,
            max_tasks: None,
            samples_per_task: 4,
            k: 4,
            temperature: 1.0,
            seed: 7,
        };
        Ok(trainer.evaluate(&spec)?.hidden_solve_rate)
    };
    let before = (
        evaluate(&trainer, Split::Train)?,
        evaluate(&trainer, Split::Heldout)?,
    );
    for _ in 0..STEPS {
        let record = trainer.step()?;
        // `log` writes the line to metrics.jsonl and TensorBoard, as `agentrl train` does.
        trainer.log(&record)?;
        println!(
            "step {:>2}  reward {:+.3}  hidden solve {:.3}  entropy {:.3}",
            record.step, record.reward, record.hidden_solve_rate, record.update.entropy
        );
    }
    let after = (
        evaluate(&trainer, Split::Train)?,
        evaluate(&trainer, Split::Heldout)?,
    );
    println!("hidden solve, train:   {:.3} -> {:.3}", before.0, after.0);
    println!("hidden solve, heldout: {:.3} -> {:.3}", before.1, after.1);
    Ok(())
}
