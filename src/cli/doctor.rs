//! `agentrl doctor RUN`: names the failure signatures in a run's metrics, with their
//! evidence and remedies (`agentrl_monitor::doctor`). Always says what it checked: on a
//! healthy run, "no failure signature found in N checks", with the checks it could not make
//! (a metric the run does not record, too few steps) named. Exit code 0 when healthy, 1 with
//! findings.

use std::io::Write;
use std::path::PathBuf;

use agentrl_monitor::{Doctor, DoctorConfig, RunData, Signature};
use clap::Args;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Run directory to examine (reads its metrics.jsonl; safe on a live run).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// Print the findings as JSON (a list, empty when healthy) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn doctor(args: DoctorArgs) -> anyhow::Result<()> {
    let run = RunData::load(&args.run)?;
    let config = DoctorConfig::default();
    let mut doctor = Doctor::new(config.clone());
    for line in &run.lines {
        doctor.observe(line);
    }
    let min_steps = doctor.min_steps();
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
    let findings = doctor.findings();
    let checked = doctor.checked();
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&findings)?)?;
    } else {
        let steps = run.lines.len();
        let checks = plural(checked.len(), "check");
        if findings.is_empty() {
            writeln!(
                out,
                "{}: no failure signature found in {checks} over {steps} steps",
                args.run.display(),
            )?;
        } else {
            writeln!(
                out,
                "{}: {} in {steps} steps ({checks})",
                args.run.display(),
                plural(findings.len(), "failure signature"),
            )?;
            for f in &findings {
                write!(out, "{}", f.render())?;
            }
        }
        if steps == 0 {
            writeln!(
                out,
                "  not checked: all {} signatures (no step recorded yet)",
                Signature::ALL.len()
            )?;
        } else {
            writeln!(out, "  checked: {}", titles(&checked))?;
            for (signature, why) in doctor.unchecked() {
                writeln!(out, "  not checked: {} ({why})", signature.title())?;
            }
        }
    }
    out.flush()?;
    if !findings.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// `1 check`, `10 checks`.
fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `entropy collapse, reward hacking, …` (or `none`).
fn titles(signatures: &[Signature]) -> String {
    if signatures.is_empty() {
        return "none".into();
    }
    signatures
        .iter()
        .map(|s| s.title())
        .collect::<Vec<_>>()
        .join(", ")
}
