//! `agentrl rft`: rejection-sampling fine-tuning (the policy's samples that pass the hidden
//! tests, trained on with SFT, round by round), with the run directory, live monitor and
//! report of `agentrl train` (`super::train`).

use clap::Args;

use agentrl_train::recipes::rft::run_rft_session;
use agentrl_train::recipes::Recipe;

use super::train::{run_recipe, TrainArgs};

#[derive(Debug, Args)]
pub struct RftArgs {
    #[command(flatten)]
    pub common: TrainArgs,
}

pub fn rft(args: RftArgs) -> anyhow::Result<()> {
    run_recipe(
        args.common,
        Some("RFT"),
        Recipe::Rft,
        &mut |trainer, options, observer| run_rft_session(trainer, options, observer),
    )
}
