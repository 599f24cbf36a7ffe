//! `agentrl dpo`: DPO on verified-against-failed pairs of the same task, the start weights
//! (`--init RUN`'s, or the fresh policy's) as the frozen reference, with the run directory,
//! live monitor and report of `agentrl train` (`super::train`).

use clap::Args;

use agentrl_train::recipes::dpo::run_dpo_session;
use agentrl_train::recipes::Recipe;

use super::train::{run_recipe, TrainArgs};

#[derive(Debug, Args)]
pub struct DpoArgs {
    #[command(flatten)]
    pub common: TrainArgs,
}

pub fn dpo(args: DpoArgs) -> anyhow::Result<()> {
    run_recipe(
        args.common,
        Some("DPO"),
        Recipe::Dpo,
        &mut |trainer, options, observer| run_dpo_session(trainer, options, observer),
    )
}
