//! `agentrl doctor RUN`: names the failure signatures in a run's metrics, with their
//! evidence and remedies (`agentrl_monitor::doctor`). Silent on a healthy run; exit code 0
//! when healthy, 1 with findings.

use std::io::Write;
use std::path::PathBuf;

use agentrl_monitor::{diagnose, Doctor, DoctorConfig, RunData};
use clap::Args;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Run directory to examine (reads its metrics.jsonl; safe on a live run).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// Print the findings as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn doctor(args: DoctorArgs) -> anyhow::Result<()> {
    let run = RunData::load(&args.run)?;
    let config = DoctorConfig::default();
    let min_steps = Doctor::new(config.clone()).min_steps();
    if run.lines.len() < min_steps {
        eprintln!(
            "{}: {} steps recorded; the doctor judges a run from {min_steps} steps on \
             (a baseline of {} steps, a window of {}, {} steps of persistence)",
            args.run.display(),
            run.lines.len(),
            config.baseline_steps,
            config.window,
            config.persistence
        );
    }
    let findings = diagnose(&run.lines, &config);
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&findings)?)?;
    } else if !findings.is_empty() {
        writeln!(
            out,
            "{}: {} failure signature{} in {} steps",
            args.run.display(),
            findings.len(),
            if findings.len() == 1 { "" } else { "s" },
            run.lines.len()
        )?;
        for f in &findings {
            write!(out, "{}", f.render())?;
        }
    }
    out.flush()?;
    if !findings.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
