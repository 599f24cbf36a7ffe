//! `agentrl gym …` without the root binary (which builds the tensor stack): `cargo run -p
//! agentrl-gym --features cli --example gym -- serve --port 0`. The same commands and flags.

use clap::Parser;

#[derive(Parser)]
#[command(name = "agentrl gym")]
struct Cli {
    #[command(flatten)]
    args: agentrl_gym::cli::GymArgs,
}

fn main() -> anyhow::Result<()> {
    agentrl_gym::cli::run(Cli::parse().args)
}
