//! The `agentrl` command line: one clap enum, each subcommand handled by the module that owns
//! the concept.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod score;
mod train;

#[derive(Debug, Parser)]
#[command(
    name = "agentrl",
    version,
    about = "Train language-model agents with reinforcement learning"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a policy (TinyAgent with GRPO on the BugFix gym by default).
    Train(train::TrainArgs),
    /// Evaluate a run's checkpoint: solve rates and pass@k on hidden tests.
    Eval(train::EvalArgs),
    /// The BugFix gym: list, show, play, run, validate tasks.
    Gym(agentrl_gym::cli::GymArgs),
    /// Chat-template tools for real models.
    Chat(chat::ChatArgs),
    /// Per-token log-probs of a model on given inputs.
    Score(score::ScoreArgs),
    /// Speed measurements against a baseline measured in the same run.
    Bench(bench::BenchArgs),
}

/// Parses the command line, runs it, and turns errors into a message and a non-zero exit code.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => train::train(args),
        Command::Eval(args) => train::eval(args),
        Command::Gym(args) => agentrl_gym::cli::run(args),
        Command::Chat(args) => chat::chat(args),
        Command::Score(args) => score::score(args),
        Command::Bench(args) => bench::bench(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
