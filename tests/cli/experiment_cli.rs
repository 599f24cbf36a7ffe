//! `agentrl experiment`: the fast experiments re-run and agree with their recorded outputs in
//! `experiments/<name>.md`: the same verdict, and every number of the result table within
//! 0.15 of the recorded one (runs use one thread, so a machine reproduces its own numbers
//! exactly; another CPU's kernels may round differently and move a run a little).

use std::path::Path;
use std::process::Command;

/// The numbers of a result's table rows and its verdict line, in order.
fn numbers(text: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| arm") || l.starts_with("verdict:"))
        .flat_map(|l| {
            l.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter(|w| w.contains('.'))
                .filter_map(|w| w.trim_matches('.').parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn verdict_phrase(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_default();
    line.split(" — ").next().unwrap_or_default().to_string()
}

/// Runs `agentrl experiment ARGS --out OUT` in `OUT`'s folder; its stdout, or its stderr as
/// the error.
fn run_experiment(args: &[&str], out: &Path) -> anyhow::Result<String> {
    let run = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .arg("experiment")
        .args(args)
        .arg("--out")
        .arg(out)
        .current_dir(out.parent().unwrap_or(Path::new(".")))
        .output()?;
    anyhow::ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(String::from_utf8_lossy(&run.stdout).into_owned())
}

#[test]
fn reward_hacking_reproduces_its_recorded_verdict() -> anyhow::Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let recorded = std::fs::read_to_string(repo.join("experiments/reward-hacking.md"))?;
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("reward-hacking");
    run_experiment(&["reward-hacking"], &out)?;
    let fresh = std::fs::read_to_string(out.join("result.md"))?;
    assert_eq!(verdict_phrase(&fresh), verdict_phrase(&recorded), "{fresh}");
    assert!(verdict_phrase(&fresh).contains("appeared as expected"));
    let (a, b) = (numbers(&fresh), numbers(&recorded));
    assert_eq!(a.len(), b.len(), "{fresh}");
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 0.15, "{x} vs recorded {y}\n{fresh}");
    }
    for png in ["solve_gap.png", "hacking_rate.png"] {
        assert!(std::fs::metadata(out.join(png))?.len() > 1000, "{png}");
    }
    // An experiment never writes over an earlier one.
    let again = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["experiment", "reward-hacking", "--out"])
        .arg(&out)
        .output()?;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    Ok(())
}

/// The other experiments' recorded outputs (`experiments/<name>.md`) are not re-run here,
/// but they are listed. They took 14-15 minutes each on 2026-12-01's build, too long for CI;
/// on 2026-12-06's build each TinyAgent one takes 1-5 minutes, so re-running them here is
/// now a matter of CI time only.
#[test]
fn the_list_names_every_experiment() -> anyhow::Result<()> {
    let run = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["experiment", "list"])
        .output()?;
    assert!(run.status.success());
    let listed = String::from_utf8_lossy(&run.stdout);
    for name in [
        "reward-hacking",
        "mismatch",
        "entropy-collapse",
        "post-training",
        "algorithms",
        "length-effects",
        "format-learning",
        "credit-assignment",
        "qwen3-format",
        "smollm2-learning",
    ] {
        assert!(
            listed.lines().any(|l| l.starts_with(name)),
            "{name} not in\n{listed}"
        );
    }
    // Every listed experiment has its recorded output in the repository.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for line in listed.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let recorded = root.join("experiments").join(format!("{name}.md"));
        assert!(
            recorded.is_file(),
            "experiment {name} has no recorded output at {}",
            recorded.display()
        );
    }
    Ok(())
}

/// `--rejudge` judges and redraws the runs an earlier call left in `--out` without training
/// (here written by hand), and refuses an experiment that judges evaluations it did not keep.
#[test]
fn rejudge_reads_the_runs_in_out_without_training() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("reward-hacking");
    for (arm, gap) in [("verifier", 0.1), ("public", 0.8)] {
        for seed in 1..=3 {
            let run = out.join(format!("{arm}-{seed}"));
            std::fs::create_dir_all(&run)?;
            let lines: Vec<String> = (1..=25)
                .map(|step| {
                    serde_json::json!({
                        "step": step,
                        "env/solve_gap": gap,
                        "env/hacking_rate": gap,
                        "env/solve_hidden": 0.5 - gap / 2.0,
                        "env/solve_public": 0.5 + gap / 2.0,
                    })
                    .to_string()
                })
                .collect();
            std::fs::write(run.join("metrics.jsonl"), lines.join("\n") + "\n")?;
        }
    }
    let stdout = run_experiment(&["reward-hacking", "--rejudge"], &out)?;
    let result = std::fs::read_to_string(out.join("result.md"))?;
    assert!(
        result.contains("the gap is 0.80 and 0.80 of episodes hack (verifier: 0.10, 0.10)"),
        "{result}"
    );
    assert!(stdout.contains("re-judged in"), "{stdout}");
    for png in ["solve_gap.png", "hacking_rate.png"] {
        assert!(std::fs::metadata(out.join(png))?.len() > 1000, "{png}");
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["experiment", "entropy-collapse", "--rejudge", "--out"])
        .arg(&out)
        .output()?;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("evaluations"));
    Ok(())
}
