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

#[test]
fn reward_hacking_reproduces_its_recorded_verdict() -> anyhow::Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let recorded = std::fs::read_to_string(repo.join("experiments/reward-hacking.md"))?;
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("reward-hacking");
    let run = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["experiment", "reward-hacking", "--out"])
        .arg(&out)
        .current_dir(tmp.path())
        .output()?;
    anyhow::ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
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

/// `post-training` takes about 15 minutes (6 methods × 3 seeds), too long for CI: its
/// recorded output (`experiments/post-training.md`) is not re-run here, but it is listed.
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
    ] {
        assert!(
            listed.lines().any(|l| l.starts_with(name)),
            "{name} not in\n{listed}"
        );
    }
    Ok(())
}
