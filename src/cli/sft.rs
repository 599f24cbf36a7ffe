//! `agentrl sft`: supervised fine-tuning on the gym expert's demonstrations (or `--data FILE`),
//! with the run directory, live monitor and report of `agentrl train` (`super::train`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use agentrl_train::recipes::sft::run_sft_session;
use agentrl_train::recipes::Recipe;

use super::train::{run_recipe, TrainArgs};

#[derive(Debug, Args)]
pub struct SftArgs {
    #[command(flatten)]
    pub common: TrainArgs,
    /// Train on this JSONL file of episodes (one per line, e.g. a run's episodes/*.jsonl)
    /// instead of the expert's demonstrations: sets sft.data.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub data: Option<PathBuf>,
}

pub fn sft(mut args: SftArgs) -> anyhow::Result<()> {
    if let Some(file) = &args.data {
        let file = file
            .to_str()
            .with_context(|| format!("--data {}: the path is not valid UTF-8", file.display()))?;
        // Before the user's --set, so an explicit --set still wins.
        let mut set = vec![format!("sft.data={}", serde_json::to_string(file)?)];
        set.append(&mut args.common.set);
        args.common.set = set;
    }
    run_recipe(
        args.common,
        Some("SFT"),
        Recipe::Sft,
        &mut |trainer, options, observer| run_sft_session(trainer, options, observer),
    )
}
