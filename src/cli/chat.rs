//! `agentrl chat render` and `agentrl score`: real-model formats on the command line.

use clap::Args;

#[derive(Debug, Args)]
pub struct ChatArgs {}

#[derive(Debug, Args)]
pub struct ScoreArgs {}

pub fn chat(_args: ChatArgs) -> anyhow::Result<()> {
    anyhow::bail!("chat render is not built yet")
}

pub fn score(_args: ScoreArgs) -> anyhow::Result<()> {
    anyhow::bail!("score is not built yet")
}
