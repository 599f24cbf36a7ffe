//! `agentrl train` and `agentrl eval`.

use clap::Args;

#[derive(Debug, Args)]
pub struct TrainArgs {}

#[derive(Debug, Args)]
pub struct EvalArgs {}

pub fn train(_args: TrainArgs) -> anyhow::Result<()> {
    anyhow::bail!("training is not built yet; try `agentrl gym play ID`")
}

pub fn eval(_args: EvalArgs) -> anyhow::Result<()> {
    anyhow::bail!("evaluation is not built yet")
}
