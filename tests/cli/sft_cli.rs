//! `agentrl sft` and `agentrl train --init RUN` through the real binary: SFT writes the run
//! directory `train` writes (config, metrics, checkpoints, summary), and RL starts from its
//! newest checkpoint, saying so.

use std::path::Path;
use std::process::{Command, Output};

use agentrl_gym::{Split, TaskSet};

const BIN: &str = env!("CARGO_BIN_EXE_agentrl");

use crate::support::copy_dir;

/// `command` of a tiny run named `name` under `root/runs`, on one task of each split.
fn args(root: &Path, command: &str, name: &str, extra: &[String]) -> Vec<String> {
    let tasks = root.join("tasks");
    if !tasks.exists() {
        let all = TaskSet::builtin().unwrap();
        for split in Split::ALL {
            let task = &all.split(split)[0];
            copy_dir(&task.dir, &tasks.join(&task.id));
        }
    }
    let runs = root.join("runs").display().to_string();
    let sets = [
        format!("train.runs_root={runs:?}"),
        format!("train.run_name={name}"),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        "train.steps=3".into(),
        "train.threads=1".into(),
        "rollout.tasks_per_step=1".into(),
        "rollout.group_size=4".into(),
        "model.d_model=16".into(),
        "model.layers=1".into(),
        "model.heads=2".into(),
        "model.max_seq=160".into(),
        "eval.samples=2".into(),
    ];
    let mut out = vec![command.to_string(), "--json".into()];
    for set in sets.iter() {
        out.push("--set".into());
        out.push(set.clone());
    }
    out.extend(extra.iter().cloned());
    out
}

fn run(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn sft_writes_a_run_that_train_init_starts_from() {
    let tmp = tempfile::tempdir().unwrap();
    let sft = run(&args(tmp.path(), "sft", "sft", &[]));
    let stderr = String::from_utf8_lossy(&sft.stderr);
    assert!(sft.status.success(), "{stderr}");
    assert!(stderr.contains("with SFT"), "{stderr}");
    let outcome: serde_json::Value = serde_json::from_slice(&sft.stdout).unwrap();
    assert_eq!(outcome["steps"], 3);
    let sft_run = tmp.path().join("runs/sft");
    assert!(sft_run.join("summary.json").is_file());
    assert!(sft_run.join("checkpoints/step_000003").is_dir());
    let metrics = std::fs::read_to_string(sft_run.join("metrics.jsonl")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.contains("\"actor/sft_loss\""))
            .count(),
        3
    );

    let init = vec!["--init".to_string(), sft_run.display().to_string()];
    let rl = run(&args(tmp.path(), "train", "rl", &init));
    let stderr = String::from_utf8_lossy(&rl.stderr);
    assert!(rl.status.success(), "{stderr}");
    assert!(
        stderr.contains("starting from the weights of") && stderr.contains("step_000003"),
        "{stderr}"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("runs/rl/init.json")).unwrap())
            .unwrap();
    assert!(record["checkpoint"]
        .as_str()
        .unwrap()
        .ends_with("step_000003"));
    let outcome: serde_json::Value = serde_json::from_slice(&rl.stdout).unwrap();
    assert_eq!(outcome["steps"], 3, "a fresh step counter");

    // A folder that is not a run, and a data file that is not there, are named.
    let bad = vec![
        "--init".to_string(),
        tmp.path().join("nope").display().to_string(),
    ];
    let out = run(&args(tmp.path(), "train", "bad", &bad));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    let missing = tmp.path().join("missing.jsonl").display().to_string();
    let out = run(&args(
        tmp.path(),
        "sft",
        "bad2",
        &["--data".into(), missing],
    ));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.jsonl"));
}

/// A learning-rate key the command does not read is refused, naming the one it reads:
/// `agentrl sft --set optim.lr=…` used to be accepted and change nothing.
#[test]
fn a_learning_rate_the_command_does_not_read_is_refused() {
    for (command, set, applies) in [
        ("sft", "optim.lr=1e-3", "sft.lr"),
        ("rft", "optim.warmup_steps=2", "sft.lr"),
        ("dpo", "optim.lr=1e-3", "dpo.lr"),
        ("train", "dpo.lr=1e-3", "optim.lr"),
    ] {
        let out = run(&[
            command.to_string(),
            "--set".into(),
            set.into(),
            "--print-config".into(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let key = set.split('=').next().unwrap();
        assert!(
            !out.status.success(),
            "agentrl {command} --set {set}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("does not read `{key}`"))
                && stderr.contains(&format!("--set {applies}=")),
            "agentrl {command} --set {set}: {stderr}"
        );
    }
    // The key that applies is accepted.
    let out = run(&[
        "sft".into(),
        "--set".into(),
        "sft.lr=1e-3".into(),
        "--print-config".into(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
