//! The first hour of a new user, from a directory outside the checkout with the binary alone:
//! presets by name (`--config ppo`), the run as a positional argument, `--print-config` that
//! validates and lists every knob, an evaluation whose terminal table says what the README
//! promises, and a Ctrl-C acknowledged at once that leaves a run the other commands accept.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agentrl_gym::{Split, TaskSet};

use crate::support::copy_dir;

const BIN: &str = env!("CARGO_BIN_EXE_agentrl");

/// The binary, run in `dir` (a folder with no `configs/` in it).
fn agentrl(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The presets' names: the files of `configs/` (what the binary must carry).
fn preset_files() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_preset_of_configs_loads_by_name_from_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in preset_files() {
        let by_name = agentrl(tmp.path(), &["train", "--config", &name, "--print-config"]);
        assert!(by_name.status.success(), "{name}: {}", stderr(&by_name));
        // The compiled-in preset is the file: the same resolved config as the path gives.
        let file = checkout.join("configs").join(format!("{name}.toml"));
        let by_path = agentrl(
            tmp.path(),
            &[
                "train",
                "--config",
                file.to_str().unwrap(),
                "--print-config",
            ],
        );
        assert!(by_path.status.success(), "{name}: {}", stderr(&by_path));
        assert_eq!(stdout(&by_name), stdout(&by_path), "{name}");
    }
    let ppo = stdout(&agentrl(
        tmp.path(),
        &["train", "--config", "ppo", "--print-config"],
    ));
    assert!(ppo.contains("name = \"ppo\""), "{ppo}");
}

#[test]
fn a_preset_path_outside_the_checkout_uses_the_preset_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let out = agentrl(
        tmp.path(),
        &["train", "--config", "configs/ppo.toml", "--print-config"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("configs/ppo.toml") && err.contains("built-in preset `ppo`"),
        "{err}"
    );
    assert!(stdout(&out).contains("name = \"ppo\""));

    // A file that is there wins over the preset of its name.
    std::fs::create_dir(tmp.path().join("configs")).unwrap();
    std::fs::write(
        tmp.path().join("configs/ppo.toml"),
        "[algorithm]\nname = \"dapo\"\n",
    )
    .unwrap();
    let out = agentrl(
        tmp.path(),
        &["train", "--config", "configs/ppo.toml", "--print-config"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("name = \"dapo\""));
    assert!(!stderr(&out).contains("built-in"), "{}", stderr(&out));
}

#[test]
fn an_unknown_config_name_lists_the_presets_on_every_command_that_takes_one() {
    let tmp = tempfile::tempdir().unwrap();
    for command in [
        &["train", "--print-config"][..],
        &["sft", "--print-config"],
        &["rft", "--print-config"],
        &["dpo", "--print-config"],
        &["distill", "--print-config"],
        &["plan"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--config", "nosuch"]);
        let out = agentrl(tmp.path(), &args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{command:?}");
        assert!(
            err.contains("nosuch") && err.contains("the presets are") && err.contains("ppo"),
            "{command:?}: {err}"
        );
        // And a name works on each.
        let mut args = command.to_vec();
        args.extend(["--config", "dapo"]);
        let out = agentrl(tmp.path(), &args);
        assert!(out.status.success(), "{command:?}: {}", stderr(&out));
    }
    // The model shapes of configs/models/ by name, for `plan --model-config`.
    let out = agentrl(
        tmp.path(),
        &[
            "plan",
            "--config",
            "qwen3-8b-grpo",
            "--model-config",
            "qwen3-8b",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("hidden 4096"), "{}", stdout(&out));
}

#[test]
fn print_config_refuses_what_train_refuses_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (set, key) in [
        ("optim.lr=-1", "optim.lr"),
        ("train.steps=0", "train.steps"),
    ] {
        let out = agentrl(tmp.path(), &["train", "--set", set, "--print-config"]);
        assert!(!out.status.success(), "{set}: {}", stdout(&out));
        assert!(stderr(&out).contains(key), "{set}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{set}");
    }
}

#[test]
fn print_config_lists_the_unset_knobs_and_loads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = agentrl(tmp.path(), &["train", "--config", "ppo", "--print-config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for knob in ["# kl_target = (unset)", "# dual_clip_c = (unset)"] {
        assert!(text.contains(knob), "{knob}: {text}");
    }
    // Each unset knob sits in its own table.
    let algorithm = text.split("\n[algorithm]\n").nth(1).unwrap();
    let algorithm = algorithm.split("\n[").next().unwrap();
    assert!(algorithm.contains("# kl_target = (unset)"), "{algorithm}");
    // Valid TOML that loads back as the same config.
    let file = tmp.path().join("resolved.toml");
    std::fs::write(&file, &text).unwrap();
    let again = agentrl(
        tmp.path(),
        &[
            "train",
            "--config",
            file.to_str().unwrap(),
            "--print-config",
        ],
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again), text);
}

/// One built-in task of each split, copied into `dir`.
fn tasks(dir: &Path) -> PathBuf {
    let all = TaskSet::builtin().unwrap();
    for split in Split::ALL {
        let task = &all.split(split)[0];
        copy_dir(&task.dir, &dir.join(&task.id));
    }
    dir.to_path_buf()
}

/// `--set`s of a tiny run named `name` under `root/runs`.
fn tiny_run(root: &Path, name: &str, steps: usize) -> Vec<String> {
    let tasks = tasks(&root.join("tasks"));
    let mut args = Vec::new();
    for set in [
        format!(
            "train.runs_root={:?}",
            root.join("runs").display().to_string()
        ),
        format!("train.run_name={name}"),
        format!("rollout.tasks_dir={:?}", tasks.display().to_string()),
        format!("train.steps={steps}"),
        "train.threads=1".into(),
        "rollout.tasks_per_step=1".into(),
        "rollout.group_size=2".into(),
        "model.d_model=16".into(),
        "model.layers=1".into(),
        "model.heads=2".into(),
        "model.max_seq=160".into(),
        "eval.samples=1".into(),
    ] {
        args.push("--set".to_string());
        args.push(set);
    }
    args
}

#[test]
fn eval_takes_the_run_as_an_argument_and_prints_pass_at_and_pass_hat_with_intervals() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec!["train".into(), "--no-summary".into()];
    args.extend(tiny_run(tmp.path(), "e", 1));
    let out = Command::new(BIN).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let run = tmp.path().join("runs/e");
    let run = run.to_str().unwrap();

    let positional = agentrl(tmp.path(), &["eval", run, "--samples", "5"]);
    assert!(positional.status.success(), "{}", stderr(&positional));
    let table = stdout(&positional);
    for needle in [
        "pass@1",
        "pass@5",
        "pass^5",
        "95% bootstrap interval",
        "format err",
        "k = 10 left out",
        "full report (per family, public vs hidden tests): ",
    ] {
        assert!(table.contains(needle), "{needle}: {table}");
    }
    // An interval after each estimate: `50.0% [0, 100]`.
    assert!(table.contains("% ["), "{table}");
    let md = table
        .lines()
        .find_map(|l| l.split("public vs hidden tests): ").nth(1))
        .unwrap();
    assert!(Path::new(md).is_file(), "{md}");
    // A --k outside 1, 5, 10 gets its own column.
    let out = agentrl(tmp.path(), &["eval", run, "--k", "3", "--split", "train"]);
    assert!(stdout(&out).contains("pass@3"), "{}", stdout(&out));

    // The flag still works; both at once is refused; neither says what is missing.
    let flag = agentrl(tmp.path(), &["eval", "--run", run, "--samples", "5"]);
    assert!(flag.status.success(), "{}", stderr(&flag));
    let both = agentrl(tmp.path(), &["eval", run, "--run", run]);
    assert!(!both.status.success());
    let neither = agentrl(tmp.path(), &["eval"]);
    assert!(!neither.status.success());
    assert!(stderr(&neither).contains("RUN"), "{}", stderr(&neither));
}

#[test]
fn every_command_that_reads_a_run_takes_it_as_its_first_argument() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nosuch");
    let missing = missing.to_str().unwrap();
    for command in [
        &["eval", missing][..],
        &["doctor", missing],
        &["dashboard", missing],
        &["replay", missing, "--task", "x"],
    ] {
        let out = agentrl(tmp.path(), command);
        let err = stderr(&out);
        assert!(!out.status.success(), "{command:?}");
        // The command's own refusal of the folder, not clap's "unexpected argument".
        assert!(
            err.contains("not a run directory") && !err.contains("unexpected argument"),
            "{command:?}: {err}"
        );
    }
}

#[test]
fn ctrl_c_in_the_startup_evaluation_is_acknowledged_and_leaves_a_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec!["train".into()];
    // Many evaluation samples: the untrained evaluation is what runs when the signal lands.
    args.extend(tiny_run(tmp.path(), "int", 1000));
    args.extend(["--set".into(), "eval.samples=400".into()]);
    let mut child = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    // The handler is in place once the run directory is named.
    for line in lines.by_ref() {
        let line = line.unwrap();
        let ready = line.starts_with("run directory:");
        seen.push(line);
        if ready {
            break;
        }
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let err = [seen, rest].concat().join("\n");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted: finishing the current step or evaluation"),
        "{err}"
    );
    assert!(!err.contains("not a run directory"), "{err}");
    let run = tmp.path().join("runs/int");
    let run = run.to_str().unwrap();
    let doctor = agentrl(tmp.path(), &["doctor", run]);
    assert!(doctor.status.success(), "{}", stderr(&doctor));
    assert!(
        stdout(&doctor).contains("no failure signature found in"),
        "{}",
        stdout(&doctor)
    );
    let dashboard = agentrl(tmp.path(), &["dashboard", run]);
    assert!(dashboard.status.success(), "{}", stderr(&dashboard));
}
