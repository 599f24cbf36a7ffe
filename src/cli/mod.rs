//! The `agentrl` command line: one clap enum, each subcommand handled by the module that owns
//! the concept.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod dashboard;
mod distill;
mod doctor;
mod dpo;
mod experiment;
mod plan;
mod presets;
mod print_config;
mod replay;
mod rft;
mod score;
mod serve;
mod sft;
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
    /// Supervised fine-tuning on the gym expert's demonstrations or a JSONL file of episodes
    /// (same run directory as `train`; hand it on with `agentrl train --init RUN`).
    Sft(sft::SftArgs),
    /// Rejection-sampling fine-tuning: SFT on the policy's own samples that pass the hidden
    /// tests, round by round (same run directory as `train`).
    Rft(rft::RftArgs),
    /// DPO on pairs of one task (a verified episode against a failed sample), with the start
    /// weights as the frozen reference (same run directory as `train`).
    Dpo(dpo::DpoArgs),
    /// On-policy distillation: the student samples, a teacher run's checkpoint scores every
    /// sampled token (per-token reverse KL); same run directory as `train`.
    Distill(distill::DistillArgs),
    /// Evaluate a run's checkpoint (`agentrl eval RUN`): pass@k and pass^k with 95% intervals on
    /// hidden tests, per split; the full report (per family) goes to RUN/eval/.
    Eval(train::EvalArgs),
    /// The BugFix gym: list, show, play, run, validate tasks.
    Gym(agentrl_gym::cli::GymArgs),
    /// Chat-template tools for real models.
    Chat(chat::ChatArgs),
    /// Per-token log-probs of a model on given inputs.
    Score(score::ScoreArgs),
    /// Speed measurements against a baseline measured in the same run.
    Bench(bench::BenchArgs),
    /// Serve a Qwen3 model folder over vLLM's and SGLang's HTTP routes.
    Serve(serve::ServeArgs),
    /// Write a run's dashboard: one self-contained HTML page (runs overlaid) and PNG panels.
    Dashboard(dashboard::DashboardArgs),
    /// Name the failure signatures in a run's metrics (exit 0 healthy, 1 findings).
    Doctor(doctor::DoctorArgs),
    /// Play a run's policy on one task and print the transcript.
    Replay(replay::ReplayArgs),
    /// Where a training step's memory and tokens go, before it runs.
    Plan(plan::PlanArgs),
    /// A phenomenon of large RL runs on TinyAgent, over seeds, ending in a checked verdict.
    Experiment(experiment::ExperimentArgs),
}

/// Set by the first Ctrl-C once [`catch_interrupts`] ran.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What the first Ctrl-C prints at once, whatever the session is doing (a step, the
/// untrained evaluation, a checkpoint): the session only looks at the flag between steps.
const INTERRUPT_ACK: &[u8] = b"\ninterrupted: finishing the current step or evaluation, then \
writing the run directory (Ctrl-C again to quit at once)\n";

/// Catches Ctrl-C (SIGINT) from now on: the first says so on stderr at once and sets the
/// returned flag (a training session checkpoints after the current step and says how to
/// resume); the handler resets itself, so a second Ctrl-C ends the process at once. Only the
/// training commands call this; every other command keeps the default (Ctrl-C ends it).
pub fn catch_interrupts() -> &'static AtomicBool {
    #[cfg(unix)]
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
    &INTERRUPTED
}

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store and write(2): both async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
    // SAFETY: write(2) of a static buffer to stderr; a short or failed write loses only the
    // message.
    unsafe {
        libc::write(2, INTERRUPT_ACK.as_ptr().cast(), INTERRUPT_ACK.len());
    }
}

/// SIGPIPE back to the default, once, at the entry point: the Rust runtime ignores it, so a
/// closed pipe (`agentrl eval --json | head`) became a "failed printing to stdout" panic; with
/// the default the process ends quietly, as Unix tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: a plain libc call at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Parses the command line, runs it, and turns errors into a message and a non-zero exit code.
pub fn main() -> ExitCode {
    restore_sigpipe();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => train::train(args),
        Command::Sft(args) => sft::sft(args),
        Command::Rft(args) => rft::rft(args),
        Command::Dpo(args) => dpo::dpo(args),
        Command::Distill(args) => distill::distill(args),
        Command::Eval(args) => train::eval(args),
        Command::Gym(args) => agentrl_gym::cli::run(args),
        Command::Chat(args) => chat::chat(args),
        Command::Score(args) => score::score(args),
        Command::Bench(args) => bench::bench(args),
        Command::Serve(args) => serve::serve(args),
        Command::Dashboard(args) => dashboard::dashboard(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Replay(args) => replay::replay(args),
        Command::Plan(args) => plan::plan(args),
        Command::Experiment(args) => experiment::experiment(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_chain(&err));
            ExitCode::FAILURE
        }
    }
}

/// `outer: inner: cause`, skipping a cause whose text the message before it already ends
/// with (contexts that repeat their source would print `no such file: no such file`).
fn error_chain(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_section_has_its_keys_for_print_config() {
        assert!(print_config::sections().contains(&"algorithm"));
        assert_eq!(print_config::sections_without_keys(), Vec::<&str>::new());
    }

    #[test]
    fn a_cause_repeated_by_its_context_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::new(io).context("reading x.toml: no such file");
        assert_eq!(error_chain(&err), "reading x.toml: no such file");
        let err = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&err), "outer: inner");
    }
}
