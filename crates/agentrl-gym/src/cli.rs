//! `agentrl gym …`: list, show, play, run and validate tasks from the command line.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `--tasks-dir DIR`, shared by every gym command: a folder of task folders instead of the
/// built-in tasks.
#[derive(Debug, Clone, Args)]
pub struct TasksDirArg {
    #[arg(long, value_name = "DIR")]
    pub tasks_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GymArgs {
    #[command(subcommand)]
    pub command: GymCommand,
}

#[derive(Debug, Subcommand)]
pub enum GymCommand {
    /// List tasks.
    List {
        #[arg(long)]
        split: Option<String>,
        #[command(flatten)]
        tasks: TasksDirArg,
    },
}

pub fn run(args: GymArgs) -> anyhow::Result<()> {
    match args.command {
        GymCommand::List { .. } => anyhow::bail!("gym list is not built yet"),
    }
}
