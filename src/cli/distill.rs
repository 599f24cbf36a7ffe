//! `agentrl distill --teacher RUN`: on-policy distillation (the student samples, the teacher
//! run's newest checkpoint scores every sampled token), with the run directory, live monitor
//! and report of `agentrl train` (`super::train`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use agentrl_train::recipes::distill::run_distill_session;
use agentrl_train::recipes::Recipe;

use super::train::{run_recipe, TrainArgs};

#[derive(Debug, Args)]
pub struct DistillArgs {
    #[command(flatten)]
    pub common: TrainArgs,
    /// The teacher's run directory (its newest loadable checkpoint): sets distill.teacher.
    /// It must share the student's tokenizer (TinyAgent action vocabulary, Qwen3
    /// tokenizer.json); it may be a bigger model.
    #[arg(long, value_name = "RUN", conflicts_with = "resume")]
    pub teacher: Option<PathBuf>,
}

pub fn distill(mut args: DistillArgs) -> anyhow::Result<()> {
    if let Some(run) = &args.teacher {
        let run = run
            .to_str()
            .with_context(|| format!("--teacher {}: the path is not valid UTF-8", run.display()))?;
        // Before the user's --set, so an explicit --set still wins.
        let mut set = vec![format!("distill.teacher={}", serde_json::to_string(run)?)];
        set.append(&mut args.common.set);
        args.common.set = set;
    }
    run_recipe(
        args.common,
        Some("distillation"),
        Recipe::Distill,
        &mut |trainer, options, observer| run_distill_session(trainer, options, observer),
    )
}
