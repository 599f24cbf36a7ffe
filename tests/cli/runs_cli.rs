//! The run directory's guarantees, through the real binary and real processes: one writer at
//! a time, `eval` on a live run touches no training file, a finished run's summary survives
//! `--resume`, Ctrl-C checkpoints and says how to continue, and a closed pipe ends quietly.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentrl_gym::{Split, TaskSet};

const BIN: &str = env!("CARGO_BIN_EXE_agentrl");

/// One built-in task of each split, copied into `dir`.
fn tasks(dir: &Path) -> PathBuf {
    let all = TaskSet::builtin().unwrap();
    for split in Split::ALL {
        let task = &all.split(split)[0];
        copy_dir(&task.dir, &dir.join(&task.id));
    }
    dir.to_path_buf()
}

use crate::support::copy_dir;

/// `train` arguments of a tiny run named `name` under `root/runs`.
fn train_args(root: &Path, name: &str, steps: usize, extra: &[&str]) -> Vec<String> {
    let tasks = tasks(&root.join("tasks"));
    let mut args: Vec<String> = vec!["train".into(), "--no-summary".into()];
    let sets = [
        format!(
            "train.runs_root={:?}",
            root.join("runs").display().to_string()
        ),
        format!("train.run_name={name}"),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        format!("train.steps={steps}"),
        "train.threads=1".into(),
        "train.episodes_every=0".into(),
        "rollout.tasks_per_step=1".into(),
        "rollout.group_size=2".into(),
        "model.d_model=16".into(),
        "model.layers=1".into(),
        "model.heads=2".into(),
        "model.max_seq=160".into(),
        "eval.samples=1".into(),
    ];
    for set in sets.iter().map(String::as_str).chain(extra.iter().copied()) {
        args.push("--set".into());
        args.push(set.into());
    }
    args
}

fn run(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn spawn(args: &[String]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metrics_lines(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_live_run_refuses_a_second_writer_and_eval_reads_it_without_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let args = train_args(tmp.path(), "live", 100_000, &["train.checkpoint_every=2"]);
    let run_dir = tmp.path().join("runs/live");
    let mut first = spawn(&args);
    wait_for("a checkpoint of the live run", || {
        run_dir.join("checkpoints/latest").is_file() && metrics_lines(&run_dir).len() >= 3
    });
    let pid = first.id().to_string();

    // The same run name again, and a resume of the live run: both refused, naming the pid.
    for second in [
        train_args(tmp.path(), "live", 4, &[]),
        vec![
            "train".into(),
            "--resume".into(),
            run_dir.display().to_string(),
        ],
    ] {
        let out = run(&second);
        let err = stderr_of(&out);
        assert!(!out.status.success(), "a second writer ran: {err}");
        assert!(err.contains("in use") && err.contains(&pid), "{err}");
    }

    // eval on the live run: succeeds, and the training files only ever grow.
    let before = metrics_lines(&run_dir);
    let out = run(&[
        "eval".into(),
        "--run".into(),
        run_dir.display().to_string(),
        "--split".into(),
        "train".into(),
        "--json".into(),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["reports"][0]["split"], "train");
    let after = metrics_lines(&run_dir);
    assert!(
        after.len() >= before.len() && after[..before.len()] == before[..],
        "eval rewrote metrics.jsonl"
    );
    // One evaluation: its JSON and its Markdown report, under one name.
    let mut saved: Vec<std::path::PathBuf> = std::fs::read_dir(run_dir.join("eval"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    saved.sort();
    assert_eq!(saved.len(), 2, "{saved:?}");
    assert_eq!(saved[0].with_extension(""), saved[1].with_extension(""));

    first.kill().unwrap();
    first.wait().unwrap();
    // Every step once: nobody else wrote into the run.
    let steps: Vec<u64> = metrics_lines(&run_dir)
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["step"].as_u64())
        .collect();
    let expected: Vec<u64> = (1..=steps.len() as u64).collect();
    assert_eq!(steps, expected);
    // The lock died with its holder: the killed run resumes (and cleans up after itself).
    let out = run(&[
        "train".into(),
        "--resume".into(),
        run_dir.display().to_string(),
        "--set".into(),
        format!("train.steps={}", steps.len() + 1),
        "--no-summary".into(),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn resuming_a_finished_run_keeps_its_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = train_args(tmp.path(), "done", 2, &["train.checkpoint_every=1"]);
    args.retain(|a| a != "--no-summary");
    let out = run(&args);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    // Off a terminal: the run directory up front, then a plain line per step.
    let run_dir = tmp.path().join("runs/done");
    assert!(
        err.contains(&format!("run directory: {}", run_dir.display())),
        "{err}"
    );
    assert!(
        err.contains("step 1/2") && err.contains("step 2/2"),
        "{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "colour codes off a terminal: {err:?}"
    );
    let summary = std::fs::read_to_string(run_dir.join("summary.json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert!(!value["before"].as_array().unwrap().is_empty());

    let out = run(&[
        "train".into(),
        "--resume".into(),
        run_dir.display().to_string(),
    ]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("finished") && err.contains("train.steps"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("summary.json")).unwrap(),
        summary
    );

    // Extending it: the earlier summary is kept, the new one keeps the untrained column. A
    // `latest` naming nothing of this run is warned about (without colour codes in a file).
    std::fs::write(run_dir.join("checkpoints/latest"), "/elsewhere/step_000002").unwrap();
    let out = run(&[
        "train".into(),
        "--resume".into(),
        run_dir.display().to_string(),
        "--set".into(),
        "train.steps=3".into(),
    ]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("WARN") && err.contains("latest"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes off a terminal: {err:?}"
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("summary.step_000002.json")).unwrap(),
        summary
    );
    let extended: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(extended["steps"], 3);
    assert_eq!(extended["before"], value["before"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("→") && table.contains("1 in this session"),
        "{table}"
    );

    // A negative temperature is the command's own error, not clap's "unexpected argument".
    let out = run(&[
        "eval".into(),
        "--run".into(),
        run_dir.display().to_string(),
        "--temperature".into(),
        "-1".into(),
    ]);
    let err = stderr_of(&out);
    assert!(
        !out.status.success() && err.contains("must be >= 0"),
        "{err}"
    );
}

#[test]
fn a_folder_that_is_not_a_run_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().display().to_string();
    for args in [
        vec!["eval".to_string(), "--run".into(), dir.clone()],
        vec!["train".to_string(), "--resume".into(), dir.clone()],
    ] {
        let out = run(&args);
        let err = stderr_of(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains("not a run directory"), "{args:?}: {err}");
    }
}

#[test]
fn ctrl_c_saves_a_checkpoint_and_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let args = train_args(tmp.path(), "int", 100_000, &["train.checkpoint_every=0"]);
    let run_dir = tmp.path().join("runs/int");
    let mut child = spawn(&args);
    wait_for("a training step", || !metrics_lines(&run_dir).is_empty());
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("checkpoint saved") && err.contains("--resume"),
        "{err}"
    );
    let latest = std::fs::read_to_string(run_dir.join("checkpoints/latest")).unwrap();
    assert!(err.contains(latest.trim()), "{err}");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [&["gym", "list"][..], &["train", "--print-config"][..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr_of(&out);
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn two_runs_started_together_under_one_name_make_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let args = train_args(tmp.path(), "twin", 2, &["train.seed=0"]);
    let other = train_args(tmp.path(), "twin", 2, &["train.seed=1"]);
    let children = [spawn(&args), spawn(&other)];
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let ok = outs.iter().filter(|o| o.status.success()).count();
    let errs: Vec<String> = outs.iter().map(stderr_of).collect();
    assert_eq!(ok, 1, "{errs:?}");
    let refused = outs
        .iter()
        .find(|o| !o.status.success())
        .map(stderr_of)
        .unwrap();
    assert!(
        refused.contains("in use") || refused.contains("already holds a run"),
        "{refused}"
    );
    let steps: Vec<u64> = metrics_lines(&tmp.path().join("runs/twin"))
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [1, 2]);
}

#[test]
fn eval_of_a_run_on_own_tasks_evaluates_the_splits_that_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let own = tmp.path().join("own");
    let all = TaskSet::builtin().unwrap();
    let task = &all.split(Split::Train)[0];
    copy_dir(&task.dir, &own.join(&task.id));
    let mut args = train_args(tmp.path(), "mine", 1, &[]);
    args.push("--set".into());
    args.push(format!("rollout.tasks_dir={:?}", own.display().to_string()));
    args.retain(|a| a != "--no-summary");
    let out = run(&args);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("train split (1 tasks)"), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("train (1)") && table.contains("no tasks"),
        "{table}"
    );

    let out = run(&[
        "eval".into(),
        "--run".into(),
        tmp.path().join("runs/mine").display().to_string(),
        "--json".into(),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["reports"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["absent_splits"],
        serde_json::json!(["heldout", "heldout-family"])
    );
}
