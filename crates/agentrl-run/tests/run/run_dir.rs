//! The run directory: run names, the writer's lock, atomic checkpoints and their pruning, metrics
//! truncation, summaries, and what resume clears after a kill.

use std::fs;
use std::io::Write;

use agentrl_run::run_dir::{
    timestamp_name, validate_run_name, write_atomic, CheckpointPaths, RunDir, TrainState,
};

fn state(step: usize) -> TrainState {
    TrainState {
        step,
        seed: 1,
        threads: 1,
        kl_coef: 0.0,
        optimizer_steps: step as u64,
        episodes_seen: 0,
        train_seconds: 0.0,
    }
}

fn fake_files(paths: &CheckpointPaths) -> anyhow::Result<()> {
    fs::write(&paths.model, b"model")?;
    fs::write(&paths.optimizer, b"optim")?;
    Ok(())
}

#[test]
fn runs_started_in_the_same_second_get_distinct_names() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let first = RunDir::create(tmp.path(), None)?;
    first.write_config("x = 1")?;
    let second = RunDir::create(tmp.path(), None)?;
    let third = RunDir::create(tmp.path(), None)?;
    assert_ne!(first.root, second.root);
    assert_ne!(second.root, third.root);
    assert!(first.root.join("config.toml").is_file());
    assert!(!second.root.join("config.toml").exists());
    Ok(())
}

#[test]
fn run_names_are_utc_timestamps() {
    let name = timestamp_name();
    let (date, rest) = name.split_once('-').unwrap();
    assert_eq!(date.len(), 8);
    assert!(date.starts_with("20"));
    assert!(rest.starts_with(|c: char| c.is_ascii_digit()));
}

#[test]
fn latest_checkpoint_survives_partial_writes() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("r"))?;
    run.write_config("x = 1")?;
    assert!(run.latest_checkpoint()?.is_none());
    run.save_checkpoint(&state(2), 0, fake_files)?;
    run.save_checkpoint(&state(4), 0, fake_files)?;
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);

    // A kill mid-checkpoint: a staging directory with half the files, and a torn temp file
    // of `latest`. Neither is seen.
    let cps = run.root.join("checkpoints");
    fs::create_dir_all(cps.join(".partial-step_000006"))?;
    fs::write(cps.join(".partial-step_000006/model.safetensors"), b"half")?;
    fs::write(cps.join(".latest.tmp-999"), b"step_0000")?;
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);

    // `latest` naming a directory that lost its state file falls back to the older one.
    fs::remove_file(cps.join("step_000004/state.json"))?;
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 2);

    // Re-saving a step replaces it whole.
    run.save_checkpoint(&state(4), 0, fake_files)?;
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 4);
    Ok(())
}

#[test]
fn metrics_truncation_keeps_earlier_steps_and_drops_torn_lines() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("m"))?;
    for step in 1..=5 {
        run.append_metrics(&serde_json::json!({ "step": step }))?;
    }
    fs::OpenOptions::new()
        .append(true)
        .open(run.metrics_path())?
        .write_all(b"{\"step\": 6, \"rew")?;
    run.truncate_metrics_after(3)?;
    let text = fs::read_to_string(run.metrics_path())?;
    assert_eq!(text, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
    Ok(())
}

#[test]
fn refuses_to_overwrite_a_run() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("same"))?;
    run.write_config("a = 1")?;
    drop(run);
    let err = RunDir::create(tmp.path(), Some("same")).unwrap_err();
    assert!(err.to_string().contains("--resume"), "{err}");
    Ok(())
}

#[test]
fn a_second_writer_is_refused_with_the_holders_pid() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("busy"))?;
    run.write_config("a = 1")?;
    // flock locks belong to an open file, so a second open in this process conflicts as
    // another process would.
    let err = RunDir::open_for_writing(&run.root).unwrap_err().to_string();
    assert!(
        err.contains("in use") && err.contains(&std::process::id().to_string()),
        "{err}"
    );
    let err = RunDir::create(tmp.path(), Some("busy"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("in use"), "{err}");
    // Readers are not writers: they take no lock and cannot touch the training files.
    let reader = RunDir::open(&run.root)?;
    assert!(reader
        .append_metrics(&serde_json::json!({"step": 1}))
        .is_err());
    assert!(reader.truncate_metrics_after(0).is_err());
    drop(run);
    let again = RunDir::open_for_writing(&tmp.path().join("busy"))?;
    assert!(again.is_locked());
    Ok(())
}

#[test]
fn run_names_stay_inside_runs_root() {
    for bad in [
        "", ".", "..", "../..", "/abs", "a/b", ".hidden", "a b", "a\\b",
    ] {
        assert!(validate_run_name(bad).is_err(), "{bad:?} accepted");
        let tmp = tempfile::tempdir().unwrap();
        assert!(RunDir::create(tmp.path(), Some(bad)).is_err(), "{bad:?}");
    }
    for good in ["run-1", "grpo_seed.3", "20260101"] {
        assert!(validate_run_name(good).is_ok(), "{good:?} refused");
    }
}

#[test]
fn latest_and_state_are_checked_against_the_run() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let other = RunDir::create(tmp.path(), Some("other"))?;
    other.save_checkpoint(&state(8), 0, fake_files)?;
    let run = RunDir::create(tmp.path(), Some("r"))?;
    run.save_checkpoint(&state(2), 0, fake_files)?;
    let cps = run.root.join("checkpoints");
    // `latest` holding a path into another run is ignored.
    let elsewhere = other.root.join("checkpoints/step_000008");
    fs::write(cps.join("latest"), elsewhere.display().to_string())?;
    let (paths, st) = run.latest_checkpoint()?.unwrap();
    assert_eq!(st.step, 2);
    assert!(paths.dir.starts_with(&run.root));
    fs::write(cps.join("latest"), "../../other/checkpoints/step_000008")?;
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 2);
    // A state.json whose step is not its directory's is not a checkpoint.
    let mut forged = state(999);
    forged.seed = 1;
    fs::write(
        cps.join("step_000002/state.json"),
        serde_json::to_vec(&forged)?,
    )?;
    assert!(run.latest_checkpoint()?.is_none());
    Ok(())
}

#[test]
fn old_checkpoints_are_pruned_and_files_are_group_readable() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("p"))?;
    for step in 1..=5 {
        run.save_checkpoint(&state(step), 2, |paths| {
            write_atomic(&paths.model, b"model")?;
            write_atomic(&paths.optimizer, b"optim")
        })?;
    }
    let names = run.checkpoint_names();
    assert_eq!(names, ["step_000005", "step_000004"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let cp = run.root.join("checkpoints/step_000005");
        for file in ["model.safetensors", "optimizer.safetensors", "state.json"] {
            let mode = fs::metadata(cp.join(file))?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{file}");
        }
    }
    Ok(())
}

#[test]
fn resume_clears_what_a_killed_writer_left() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("k"))?;
    run.write_config("a = 1")?;
    run.save_checkpoint(&state(2), 0, fake_files)?;
    let cps = run.root.join("checkpoints");
    fs::create_dir_all(cps.join(".partial-step_000003"))?;
    fs::write(cps.join(".partial-step_000003/model.safetensors"), b"half")?;
    fs::write(cps.join(".latest.tmp-123"), b"step_")?;
    fs::write(cps.join("step_000002/.model.safetensors.tmp-9"), b"x")?;
    fs::write(run.root.join(".metrics.jsonl.tmp-4"), b"x")?;
    drop(run);
    let run = RunDir::open_for_writing(&tmp.path().join("k"))?;
    assert!(!cps.join(".partial-step_000003").exists());
    assert!(!cps.join(".latest.tmp-123").exists());
    assert!(!cps.join("step_000002/.model.safetensors.tmp-9").exists());
    assert!(!run.root.join(".metrics.jsonl.tmp-4").exists());
    assert_eq!(run.latest_checkpoint()?.unwrap().1.step, 2);
    Ok(())
}

#[test]
fn a_rewritten_summary_keeps_the_previous_one() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("s"))?;
    run.write_config("a = 1")?;
    run.write_summary(b"first", None)?;
    run.write_summary(b"second", Some(8))?;
    assert_eq!(fs::read(run.summary_path())?, b"second");
    assert_eq!(
        fs::read(run.root.join("summary.step_000008.json"))?,
        b"first"
    );
    let reader = RunDir::open_for_writing(&run.root);
    assert!(reader.is_err(), "the lock is still held by `run`");
    let eval = RunDir::open(&run.root)?.write_eval(8, b"{}")?;
    assert!(eval.starts_with(run.root.join("eval")));
    Ok(())
}
