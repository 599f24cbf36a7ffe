//! `agentrl rft`, `agentrl dpo --init SFT_RUN` (and its resume) and `agentrl distill --teacher
//! RUN` through the real binary: each writes the run directory `train` writes (config,
//! metrics, checkpoints, summary) with its own figures.

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
fn rft_and_dpo_from_an_sft_run_write_runs_with_their_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let rft = run(&args(tmp.path(), "rft", "rft", &[]));
    let stderr = String::from_utf8_lossy(&rft.stderr);
    assert!(rft.status.success(), "{stderr}");
    assert!(stderr.contains("with RFT"), "{stderr}");
    let rft_run = tmp.path().join("runs/rft");
    assert!(rft_run.join("summary.json").is_file());
    assert!(rft_run.join("checkpoints/step_000003").is_dir());
    let metrics = std::fs::read_to_string(rft_run.join("metrics.jsonl")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.contains("\"rft/acceptance_rate\""))
            .count(),
        3
    );

    let sft = run(&args(tmp.path(), "sft", "sft", &[]));
    assert!(
        sft.status.success(),
        "{}",
        String::from_utf8_lossy(&sft.stderr)
    );
    let init = vec![
        "--init".to_string(),
        tmp.path().join("runs/sft").display().to_string(),
    ];
    let dpo = run(&args(tmp.path(), "dpo", "dpo", &init));
    let stderr = String::from_utf8_lossy(&dpo.stderr);
    assert!(dpo.status.success(), "{stderr}");
    assert!(
        stderr.contains("with DPO") && stderr.contains("starting from the weights of"),
        "{stderr}"
    );
    let outcome: serde_json::Value = serde_json::from_slice(&dpo.stdout).unwrap();
    assert_eq!(outcome["steps"], 3);
    let dpo_run = tmp.path().join("runs/dpo");
    assert!(dpo_run.join("dpo_pairs.jsonl").is_file());
    assert!(dpo_run.join("summary.json").is_file());
    let metrics = std::fs::read_to_string(dpo_run.join("metrics.jsonl")).unwrap();
    for name in ["\"dpo/loss\"", "\"dpo/margin\""] {
        assert_eq!(
            metrics.lines().filter(|l| l.contains(name)).count(),
            3,
            "{metrics}"
        );
    }

    // A resumed DPO run trains on the pairs it saved, scored by its start weights.
    let pool = std::fs::read(dpo_run.join("dpo_pairs.jsonl")).unwrap();
    let resumed = run(&[
        "dpo".into(),
        "--json".into(),
        "--resume".into(),
        dpo_run.display().to_string(),
        "--set".into(),
        "train.steps=5".into(),
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        std::fs::read(dpo_run.join("dpo_pairs.jsonl")).unwrap(),
        pool
    );
    let metrics = std::fs::read_to_string(dpo_run.join("metrics.jsonl")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.contains("\"dpo/loss\""))
            .count(),
        5
    );
}

#[test]
fn distill_needs_a_teacher_and_learns_from_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&args(tmp.path(), "distill", "no-teacher", &[]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--teacher"), "{stderr}");

    let teacher = run(&args(tmp.path(), "sft", "teacher", &[]));
    assert!(
        teacher.status.success(),
        "{}",
        String::from_utf8_lossy(&teacher.stderr)
    );
    let with = vec![
        "--teacher".to_string(),
        tmp.path().join("runs/teacher").display().to_string(),
    ];
    let out = run(&args(tmp.path(), "distill", "student", &with));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("with distillation"), "{stderr}");
    let metrics = std::fs::read_to_string(tmp.path().join("runs/student/metrics.jsonl")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.contains("\"distill/reverse_kl\""))
            .count(),
        3
    );
}
