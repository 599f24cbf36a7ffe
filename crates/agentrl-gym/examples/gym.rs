//! `agentrl gym …` and `agentrl bench gym --remote` without the root binary (which builds the
//! tensor stack): `cargo run -p agentrl-gym --features cli --example gym -- serve --port 0`,
//! `… --example gym -- bench-remote [--json]`. The same commands and flags; a leading `gym`
//! is skipped, so the remote bench's `CURRENT_EXE gym serve` starts this binary's server.

use clap::Parser;

#[derive(Parser)]
#[command(name = "agentrl gym")]
struct Cli {
    #[command(flatten)]
    args: agentrl_gym::cli::GymArgs,
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("gym") {
        args.remove(1);
    }
    if args.get(1).map(String::as_str) == Some("bench-remote") {
        return agentrl_gym::bench::remote::run(args.iter().any(|a| a == "--json"));
    }
    agentrl_gym::cli::run(Cli::parse_from(args).args)
}
