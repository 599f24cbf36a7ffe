//! The monitor on real runs: a healthy run and four runs made to fail on purpose, trained
//! once at a small budget (25 steps of 4 tasks x 8 episodes) and shared by every test here.
//!
//! - public-test reward (`reward.kind = "public"`): reward hacking;
//! - high LR with no entropy bonus: entropy collapse (on two seeds);
//! - no KL and a large LR (warmed up to it, four minibatches so one update moves the policy
//!   several times): KL blow-up;
//! - an engine with injected log-prob noise (`engine.logprob_noise = 0.5`): engine/trainer
//!   mismatch;
//! - the default recipe: the doctor must stay silent.
//!
//! Every run uses seed 1 except the collapse runs. The doctor's thresholds were tuned on
//! seed 0 (seeds 0–11 for entropy collapse); seed 1 was not tuned on, except for collapse.
//! Collapse runs twice: on seed 2, a tuning seed whose entropy crashes to 40% of its baseline
//! and comes back to about half (an older, deep-only rule missed it), and on seed 12, run only
//! after the collapse rule's thresholds were fixed (docs/monitor.md has the tables over seeds).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use agentrl_run::metrics::read_metrics;

use crate::tfrecord_reader;

/// The seed of every run that does not name its own.
const SEED: u64 = 1;
/// A seed the entropy-collapse rule was not tuned on (its thresholds were fixed before seeds
/// 12–15 were run).
const HELDOUT: u64 = 12;

/// A run of the suite: its name, its `--set`s, and the signature the doctor must name.
struct Scenario {
    name: &'static str,
    seed: u64,
    sets: &'static [&'static str],
    expect: Option<&'static str>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "healthy",
        seed: SEED,
        sets: &[],
        expect: None,
    },
    Scenario {
        name: "hacking",
        seed: SEED,
        sets: &["reward.kind=\"public\"", "train.doctor=true"],
        expect: Some("reward_hacking"),
    },
    Scenario {
        name: "collapse",
        seed: 2,
        sets: &["optim.lr=3e-2", "algorithm.entropy_coef=0"],
        expect: Some("entropy_collapse"),
    },
    Scenario {
        name: "collapse-heldout",
        seed: HELDOUT,
        sets: &["optim.lr=3e-2", "algorithm.entropy_coef=0"],
        expect: Some("entropy_collapse"),
    },
    Scenario {
        name: "kl",
        seed: SEED,
        sets: &[
            "optim.lr=5e-2",
            "optim.warmup_steps=20",
            "algorithm.minibatches=4",
            "algorithm.entropy_coef=0",
        ],
        expect: Some("kl_blow_up"),
    },
    Scenario {
        name: "mismatch",
        seed: SEED,
        sets: &["engine.logprob_noise=0.5"],
        expect: Some("growing_mismatch"),
    },
];

struct Trained {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outputs: Vec<Output>,
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrl"))
}

/// Trains every scenario once (one after the other: the machine's cores go to each run).
fn trained() -> &'static Trained {
    static RUNS: OnceLock<Trained> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("runs");
        let outputs = SCENARIOS
            .iter()
            .map(|s| {
                let mut cmd = bin();
                cmd.arg("train").arg("--no-summary");
                for set in [
                    format!("train.runs_root={}", root.display()),
                    format!("train.run_name={}", s.name),
                    format!("train.seed={}", s.seed),
                    "train.steps=25".into(),
                    "rollout.tasks_per_step=4".into(),
                    "rollout.group_size=8".into(),
                    "train.checkpoint_every=0".into(),
                    "train.episodes_every=5".into(),
                ]
                .iter()
                .map(String::as_str)
                .chain(s.sets.iter().copied())
                {
                    cmd.arg("--set").arg(set);
                }
                let out = cmd.output().unwrap();
                assert!(
                    out.status.success(),
                    "training {} failed: {}",
                    s.name,
                    String::from_utf8_lossy(&out.stderr)
                );
                out
            })
            .collect();
        Trained {
            _dir: dir,
            root,
            outputs,
        }
    })
}

fn run_dir(name: &str) -> PathBuf {
    trained().root.join(name)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_doctor_names_each_failure_and_stays_silent_on_the_healthy_run() {
    for s in SCENARIOS {
        let out = bin()
            .arg("doctor")
            .arg(run_dir(s.name))
            .arg("--json")
            .output()
            .unwrap();
        let findings: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{}: {e}: {}", s.name, text(&out.stdout)));
        let names: Vec<&str> = findings
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["signature"].as_str().unwrap())
            .collect();
        match s.expect {
            None => {
                assert_eq!(out.status.code(), Some(0), "{}: {names:?}", s.name);
                assert!(names.is_empty(), "{}: {names:?}", s.name);
                // No finding, and the report says what was checked.
                let plain = bin().arg("doctor").arg(run_dir(s.name)).output().unwrap();
                assert_eq!(plain.status.code(), Some(0));
                let report = text(&plain.stdout);
                let checks: usize = report
                    .split("no failure signature found in ")
                    .nth(1)
                    .and_then(|rest| rest.split(" checks over 25 steps").next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no count of checks: {report}"));
                assert!(checks >= 8, "{report}");
                let checked = report.lines().find(|l| l.contains("checked: ")).unwrap();
                for title in ["entropy collapse", "reward hacking", "KL blow-up"] {
                    assert!(checked.contains(title), "{title}: {report}");
                }
            }
            Some(signature) => {
                assert_eq!(out.status.code(), Some(1), "{}", s.name);
                assert!(names.contains(&signature), "{}: found {names:?}", s.name);
            }
        }
    }
    // The text report names the signature, its step range, the evidence and the remedies.
    let out = bin()
        .arg("doctor")
        .arg(run_dir("hacking"))
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(report.contains("[reward hacking] steps "), "{report}");
    assert!(report.contains("env/solve_hidden") && report.contains("median of steps 1–5"));
    assert!(report.contains("reward.kind = \"hidden\""), "{report}");
}

#[test]
fn the_live_doctor_warns_while_training_and_train_ends_with_the_dashboard() {
    let hacking = SCENARIOS.iter().position(|s| s.name == "hacking").unwrap();
    let out = &trained().outputs[hacking];
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning: doctor at step") && stderr.contains("[reward hacking]"),
        "{stderr}"
    );
    let healthy = &trained().outputs[0];
    assert!(!text(&healthy.stderr).contains("doctor at step"));
    let stdout = text(&healthy.stdout);
    let page = run_dir("healthy").join("dashboard.html");
    assert!(
        stdout.contains(&format!("dashboard: {}", page.display())),
        "{stdout}"
    );
    assert!(page.is_file());
    assert!(run_dir("healthy").join("dashboard/reward.png").is_file());
}

#[test]
fn tensorboard_events_of_a_real_run_match_its_metrics() {
    let run = run_dir("healthy");
    let lines = read_metrics(&run.join("metrics.jsonl")).unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let events = tfrecord_reader::read_events(&files[0]);
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    let scalar_events: Vec<_> = events[1..].iter().collect();
    let written: usize = lines.iter().map(|l| l.scalars.len()).sum();
    assert_eq!(scalar_events.len(), written, "one event per scalar");
    for name in [
        "critic/rewards/mean",
        "critic/score/mean",
        "critic/score/max",
        "critic/score/min",
        "actor/entropy",
        "env/solve_hidden",
        "timing_s/step",
    ] {
        let from_events: Vec<(i64, f32)> = scalar_events
            .iter()
            .flat_map(|e| e.scalars.iter().map(move |(t, v)| (e.step, t, *v)))
            .filter(|(_, t, _)| t.as_str() == name)
            .map(|(s, _, v)| (s, v))
            .collect();
        let from_jsonl: Vec<(i64, f32)> = lines
            .iter()
            .filter_map(|l| l.get(name).map(|v| (l.step as i64, v as f32)))
            .collect();
        assert_eq!(from_events.len(), 25, "{name}");
        assert_eq!(from_events, from_jsonl, "{name}");
    }
}

#[test]
fn eval_with_no_flags_reports_pass_at_and_pass_hat_at_1_5_and_10() {
    // Its own run folder: `eval_writes_a_markdown_and_json_report` reads the healthy run's
    // eval/ at the same time.
    let run = run_dir("kl");
    let out = bin().arg("eval").arg(&run).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = std::fs::read_dir(run.join("eval"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["report"]["samples_per_task"], 10);
    let md = std::fs::read_to_string(json.with_extension("md")).unwrap();
    assert!(!md.contains("Not reported"), "{md}");
    for split in doc["report"]["splits"].as_array().unwrap() {
        for k in ["1", "5", "10"] {
            for kind in ["pass_at", "pass_hat"] {
                let e = &split[kind][k];
                let (low, value, high) = (
                    e["low"].as_f64().unwrap(),
                    e["value"].as_f64().unwrap(),
                    e["high"].as_f64().unwrap(),
                );
                assert!(low <= value && value <= high, "{kind}@{k}: {e}");
            }
        }
    }
}

/// The pixels of a PNG as RGBA rows.
fn pixels(path: &Path) -> (u32, u32, Vec<u8>) {
    let pixmap = resvg::tiny_skia::Pixmap::load_png(path).unwrap();
    (pixmap.width(), pixmap.height(), pixmap.data().to_vec())
}

#[test]
fn the_dashboard_renders_in_a_real_browser() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/browser_check.sh");
    let shots = tempfile::tempdir().unwrap();
    let panels = ["reward", "solve", "entropy", "length"];
    let mut outs = Vec::new();
    for run in ["healthy", "hacking"] {
        let out_dir = shots.path().join(run);
        let out = Command::new("bash")
            .arg(&script)
            .arg(run_dir(run).join("dashboard.html"))
            .arg(&out_dir)
            .args(panels)
            .output()
            .unwrap();
        if out.status.code() == Some(77) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have chromium (.ci/run installs it): {}",
                text(&out.stderr)
            );
            eprintln!(
                "SKIPPED the_dashboard_renders_in_a_real_browser: {}",
                text(&out.stderr).trim()
            );
            return;
        }
        assert!(out.status.success(), "{}", text(&out.stderr));
        outs.push(out_dir);
    }
    for panel in panels {
        let (w, h, a) = pixels(&outs[0].join(format!("{panel}.png")));
        let (w2, h2, b) = pixels(&outs[1].join(format!("{panel}.png")));
        assert_eq!((w, h), (w2, h2));
        // The plot area of the panel (SVG at 5,5 inside the figure; plot 62..448 x 30..198).
        let (mut ink, mut differ) = (0, 0);
        for y in 35..203u32 {
            for x in 67..453u32 {
                let i = 4 * (y * w + x) as usize;
                let (r, g, bl) = (a[i] as i32, a[i + 1] as i32, a[i + 2] as i32);
                // Line colours are saturated; the background, grid and text are grey.
                if r.max(g).max(bl) - r.min(g).min(bl) > 60 {
                    ink += 1;
                }
                if (0..3).any(|c| (a[i + c] as i32 - b[i + c] as i32).abs() > 40) {
                    differ += 1;
                }
            }
        }
        assert!(
            ink > 300,
            "{panel}: the healthy run's plot is blank ({ink} coloured pixels)"
        );
        assert!(
            differ > 300,
            "{panel}: two runs drew the same plot ({differ} pixels differ)"
        );
    }
}

#[test]
fn replay_prints_the_policys_transcript() {
    let run = run_dir("healthy");
    let episodes = std::fs::read_to_string(run.join("episodes/step_000025.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(episodes.lines().next().unwrap()).unwrap();
    let task = first["task_id"].as_str().unwrap();
    assert!(first["token_text"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let out = bin()
        .args(["replay"])
        .arg(&run)
        .args(["--task", task, "--temperature", "0"])
        .output()
        .unwrap();
    let transcript = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        transcript.contains(&format!("on task {task}")),
        "{transcript}"
    );
    assert!(
        transcript.contains("\n> "),
        "actions as typed: {transcript}"
    );
    assert!(
        transcript.contains("<call>"),
        "the sampled tokens: {transcript}"
    );
    assert!(transcript.contains("reward "), "{transcript}");
    let again = bin()
        .args(["replay"])
        .arg(&run)
        .args(["--task", task, "--temperature", "0"])
        .output()
        .unwrap();
    assert_eq!(again.stdout, out.stdout, "greedy replay is deterministic");
}

#[test]
fn eval_writes_a_markdown_and_json_report() {
    let run = run_dir("healthy");
    let out = bin()
        .args(["eval", "--run"])
        .arg(&run)
        .args(["--split", "heldout", "--k", "5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let eval_dir = run.join("eval");
    let files: Vec<PathBuf> = std::fs::read_dir(&eval_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let md = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "md"))
        .unwrap();
    let json = md.with_extension("json");
    let report = std::fs::read_to_string(md).unwrap();
    for needle in [
        "5 samples per task",
        "temperature 1",
        "pass@1",
        "pass@5",
        "pass^5",
        "95% percentile bootstrap",
        "Not reported: pass@10",
        "## Public vs hidden tests",
        "## Families of heldout",
    ] {
        assert!(report.contains(needle), "{needle}: {report}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let split = &doc["report"]["splits"][0];
    assert_eq!(doc["report"]["samples_per_task"], 5);
    let p1 = &split["pass_at"]["1"];
    assert!(
        p1["low"].as_f64() <= p1["value"].as_f64() && p1["value"].as_f64() <= p1["high"].as_f64()
    );
    assert!(split["families"].as_array().is_some_and(|f| !f.is_empty()));
}

#[test]
fn stored_episodes_carry_the_trainers_logprobs_and_show_the_injected_mismatch() {
    use agentrl_monitor::episodes::read_episodes;
    // |log π_engine − log π_trainer| per action token of a run's newest stored episodes.
    let gaps = |run: &str| -> Vec<f64> {
        let path = run_dir(run).join("episodes/step_000025.jsonl");
        let episodes = read_episodes(&path).unwrap();
        assert_eq!(episodes.len(), 32, "{run}: every episode of the step");
        episodes
            .iter()
            .flat_map(|e| {
                let trainer = e.trainer_logprobs.as_ref().expect("trainer log-probs");
                assert_eq!(trainer.len(), e.tokens.len(), "{run}: one per token");
                for (t, source) in trainer.iter().zip(&e.sources) {
                    assert!(source == "action" || *t == 0.0, "{run}: 0 off the actions");
                    assert!(*t <= 0.0, "{run}: a log-prob");
                }
                e.action_mismatch().unwrap()
            })
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // The default engine samples with the trainer's own f32 weights: the same numbers.
    let plain = gaps("healthy");
    let worst = plain.iter().copied().fold(0.0, f64::max);
    assert!(
        !plain.is_empty() && worst < 1e-3,
        "healthy: max |Δ log p| {worst}"
    );
    // `engine.logprob_noise = 0.5` perturbs what the engine reports, not what it samples.
    let noisy = gaps("mismatch");
    assert!(
        mean(&noisy) > 0.1,
        "mismatch: mean |Δ log p| {}",
        mean(&noisy)
    );
    let page = std::fs::read_to_string(run_dir("mismatch").join("dashboard.html")).unwrap();
    assert!(page.contains("|log π_engine − log π_trainer| per action token"));
}
