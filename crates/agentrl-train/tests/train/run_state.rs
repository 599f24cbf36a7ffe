//! What a run directory promises across sessions: resume with overrides, a config or a
//! checkpoint that cannot be trusted, configs refused before anything is created, task folders
//! without some splits, NaN weights, pruning. Tiny model, one or two steps each.

use std::path::Path;

use agentrl_gym::Split;
use agentrl_train::config::{load_config, Config};
use agentrl_train::recipes::rl::run_rl_session;
use agentrl_train::session::{Progress, SessionOptions};
use agentrl_train::trainer::Trainer;
use candle_core::Tensor;

use crate::common::task_dir;

/// A tiny two-step config on the tasks in `tasks`, its run at `root/runs/name`.
fn tiny(root: &Path, tasks: &Path, name: &str, extra: &[&str]) -> anyhow::Result<Config> {
    let mut sets: Vec<String> = vec![
        format!(
            "train.runs_root={:?}",
            root.join("runs").display().to_string()
        ),
        format!("train.run_name={name}"),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        "train.threads=1".into(),
        "train.steps=2".into(),
        "train.checkpoint_every=1".into(),
        "train.episodes_every=0".into(),
        "rollout.tasks_per_step=1".into(),
        "rollout.group_size=2".into(),
        "model.d_model=16".into(),
        "model.layers=1".into(),
        "model.heads=2".into(),
        "model.max_seq=160".into(),
        "eval.samples=1".into(),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    load_config(None, &sets)
}

fn quiet(summary: bool) -> SessionOptions {
    SessionOptions {
        progress: Progress::Off,
        summary_evals: summary,
        stop: None,
    }
}

/// A finished two-step run (checkpoints at steps 1 and 2) in a fresh temp dir.
fn finished_run(
    name: &str,
    extra: &[&str],
) -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    task_dir(&tasks, [1, 1, 1])?;
    let (trainer, _) = Trainer::create(tiny(tmp.path(), &tasks, name, extra)?)?;
    run_rl_session(trainer, &quiet(false))?;
    let run = tmp.path().join("runs").join(name);
    Ok((tmp, run))
}

/// A run may resume on a machine without an AMX unit: `engine.cpu_matmul` is one of the keys
/// `--resume` may change, and the change is recorded like the others.
#[test]
fn a_resume_may_change_the_engine_s_cpu_matmul() -> anyhow::Result<()> {
    let (_tmp, run) = finished_run("cpu-matmul", &[])?;
    let trainer = Trainer::resume(
        &run,
        &["train.steps=3".into(), "engine.cpu_matmul=\"auto\"".into()],
    )?;
    assert_eq!(
        trainer.config.engine.cpu_matmul,
        agentrl_model::fused::amx_matmul::CpuMatmul::Auto
    );
    run_rl_session(trainer, &quiet(false))?;
    let changes = std::fs::read_to_string(run.join("config_changes.jsonl"))?;
    assert!(changes.contains("engine.cpu_matmul"), "{changes}");
    Ok(())
}

#[test]
fn a_finished_run_is_extended_with_recorded_overrides_and_others_are_refused() -> anyhow::Result<()>
{
    let (_tmp, run) = finished_run("extend", &[])?;
    let summary = std::fs::read_to_string(run.join("summary.json"))?;

    let err = format!("{:#}", Trainer::resume(&run, &[]).err().unwrap());
    assert!(
        err.contains("finished") && err.contains("train.steps"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        Trainer::resume(&run, &["optim.lr=0.5".into()])
            .err()
            .unwrap()
    );
    assert!(
        err.contains("optim.lr") && err.contains("cannot change"),
        "{err}"
    );
    // Refusals changed nothing.
    assert_eq!(std::fs::read_to_string(run.join("summary.json"))?, summary);
    assert!(!run.join("config_changes.jsonl").exists());

    let trainer = Trainer::resume(&run, &["train.steps=3".into(), "eval.samples=2".into()])?;
    assert_eq!((trainer.state.step, trainer.config.train.steps), (2, 3));
    run_rl_session(trainer, &quiet(false))?;
    let changes = std::fs::read_to_string(run.join("config_changes.jsonl"))?;
    let lines: Vec<serde_json::Value> = changes
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 2, "{changes}");
    assert_eq!(lines[0]["key"], "train.steps");
    assert_eq!(
        (lines[0]["from"].as_str(), lines[0]["to"].as_str()),
        (Some("2"), Some("3"))
    );
    assert_eq!(lines[0]["at_step"], 2);
    assert!(std::fs::read_to_string(run.join("config.toml"))?.contains("steps = 3"));
    // The first session's summary is kept beside the new one.
    assert_eq!(
        std::fs::read_to_string(run.join("summary.step_000002.json"))?,
        summary
    );
    Ok(())
}

#[test]
fn steps_below_the_checkpoint_is_an_error_naming_the_config() -> anyhow::Result<()> {
    let (_tmp, run) = finished_run("below", &[])?;
    let path = run.join("config.toml");
    let text = std::fs::read_to_string(&path)?.replace("steps = 2\n", "steps = 1\n");
    std::fs::write(&path, text)?;
    let err = format!("{:#}", Trainer::resume(&run, &[]).err().unwrap());
    assert!(
        err.contains("config.toml") && err.contains("below"),
        "{err}"
    );
    // An empty config is an error naming the file, not a run on defaults.
    std::fs::write(&path, "")?;
    let err = format!("{:#}", Trainer::resume(&run, &[]).err().unwrap());
    assert!(err.contains("config.toml"), "{err}");
    Ok(())
}

/// Writes `model.safetensors` of `checkpoint` with every tensor NaN.
fn poison(checkpoint: &Path) -> anyhow::Result<()> {
    let path = checkpoint.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)?;
    let nan: std::collections::HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(k, t)| Ok((k, (t.ones_like()? * f64::NAN)?)))
        .collect::<anyhow::Result<_>>()?;
    candle_core::safetensors::save(&nan, &path)?;
    Ok(())
}

#[test]
fn torn_or_nan_weights_fall_back_to_the_previous_checkpoint() -> anyhow::Result<()> {
    let (_tmp, run) = finished_run("fallback", &[])?;
    let cps = run.join("checkpoints");
    // A torn model file in the newest checkpoint: the previous complete one loads.
    let model = cps.join("step_000002/model.safetensors");
    let bytes = std::fs::read(&model)?;
    std::fs::write(&model, &bytes[..bytes.len() / 2])?;
    let trainer = Trainer::open_for_eval(&run)?;
    assert_eq!(trainer.state.step, 1);
    // NaN weights are refused the same way.
    std::fs::write(&model, &bytes)?;
    poison(&cps.join("step_000002"))?;
    let trainer = Trainer::open_for_eval(&run)?;
    assert_eq!(trainer.state.step, 1);
    // With no loadable checkpoint left, the error names each file.
    poison(&cps.join("step_000001"))?;
    let err = format!("{:#}", Trainer::open_for_eval(&run).err().unwrap());
    assert!(
        err.contains("step_000001") && err.contains("step_000002") && err.contains("NaN"),
        "{err}"
    );
    Ok(())
}

#[test]
fn nan_logits_fail_the_step_that_sampled_them() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    task_dir(&tasks, [1, 0, 0])?;
    let (trainer, _) = Trainer::create(tiny(tmp.path(), &tasks, "nan-logits", &[])?)?;
    for (_, var) in trainer.policy.trainable_vars() {
        var.set(&(var.as_tensor().ones_like()? * f64::NAN)?)?;
    }
    let err = format!(
        "{:#}",
        run_rl_session(trainer, &quiet(false)).err().unwrap()
    );
    assert!(
        err.contains("training step 1 of 2") && err.contains("NaN"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_config_that_cannot_run_creates_nothing() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    task_dir(&tasks, [1, 0, 0])?;
    let cases: &[(&[&str], &str)] = &[
        (&["rollout.split=validation"], "rollout.split"),
        (&["rollout.split=heldout"], "no tasks"),
        (&["rollout.tasks_dir=/no/such/dir"], "tasks_dir"),
        (&["model.d_model=0"], "d_model"),
        (&["algorithm.entropy_coef=nan"], "entropy_coef"),
        (&["optim.eps=0"], "optim.eps"),
        (&["reward.format_penalty=-1"], "format_penalty"),
        (&["train.threads=100000"], "train.threads"),
        (&["rollout.tasks_per_step=1000000"], "memory"),
        (&["rollout.group_size=100000"], "memory"),
    ];
    for (sets, needle) in cases {
        let err = match tiny(tmp.path(), &tasks, "never", sets).and_then(Trainer::create) {
            Ok(_) => panic!("{sets:?} was accepted"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.contains(needle), "{sets:?}: {err}");
        assert!(
            !tmp.path().join("runs/never").exists(),
            "{sets:?} left a run dir"
        );
    }
    for name in ["", "..", "../escape", "/abs"] {
        let set = format!("train.run_name={name:?}");
        let err = tiny(tmp.path(), &tasks, "x", &[&set])
            .and_then(Trainer::create)
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("run_name"), "{name:?}: {err:#}");
    }
    assert!(!tmp.path().join("escape").exists());
    Ok(())
}

#[test]
fn own_tasks_without_heldout_splits_train_and_evaluate_what_exists() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    task_dir(&tasks, [1, 0, 0])?;
    let (trainer, _) = Trainer::create(tiny(tmp.path(), &tasks, "own", &[])?)?;
    assert_eq!(trainer.split_len(Split::Train), 1);
    let outcome = run_rl_session(trainer, &quiet(true))?;
    let evaluated: Vec<&str> = outcome.after.iter().map(|r| r.split.as_str()).collect();
    assert_eq!(evaluated, ["train"]);
    assert_eq!(outcome.absent_splits, ["heldout", "heldout-family"]);
    assert_eq!(outcome.after[0].tasks, 1);
    let table = agentrl_train::session::summary_table(&outcome);
    assert!(
        table.contains("heldout") && table.contains("no tasks"),
        "{table}"
    );
    Ok(())
}

#[test]
fn only_the_newest_checkpoints_are_kept() -> anyhow::Result<()> {
    let (_tmp, run) = finished_run("prune", &["train.steps=4", "train.keep_checkpoints=2"])?;
    let mut names: Vec<String> = std::fs::read_dir(run.join("checkpoints"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<_>>()?;
    names.sort();
    assert_eq!(names, ["latest", "step_000003", "step_000004"]);
    Ok(())
}

#[test]
fn a_steps_memory_estimate_is_modest_for_the_default_and_grows_with_the_batch() -> anyhow::Result<()>
{
    use agentrl_train::plan::{ModelShape, StepPlan};
    let peak = |config: &Config| -> anyhow::Result<f64> {
        Ok(StepPlan::new(config, ModelShape::of(config)?).peak(false))
    };
    let default = peak(&Config::builtin()?)?;
    assert!(default < 1e9, "default run estimated at {default} bytes");
    let big = peak(&load_config(None, &["rollout.group_size=100".into()])?)?;
    assert!(
        big > 5.0 * default && big < 20.0 * default,
        "{big} vs {default}"
    );
    Ok(())
}

#[test]
fn a_stop_before_the_first_step_trains_nothing_and_writes_no_summary() -> anyhow::Result<()> {
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    let tmp = tempfile::tempdir()?;
    let tasks = tmp.path().join("tasks");
    task_dir(&tasks, [1, 0, 0])?;
    let (trainer, _) = Trainer::create(tiny(tmp.path(), &tasks, "stopped", &[])?)?;
    let options = SessionOptions {
        stop: Some(&STOP),
        ..quiet(false)
    };
    let outcome = run_rl_session(trainer, &options)?;
    assert!(outcome.interrupted);
    assert_eq!((outcome.steps, outcome.session_steps), (0, 0));
    assert!(!tmp.path().join("runs/stopped/summary.json").exists());
    Ok(())
}
