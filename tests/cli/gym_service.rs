//! The gym as a service end to end, through the binary: `agentrl gym serve` processes on
//! loopback, a run whose episodes go to them (`[gym] endpoints`), and the token rule of both
//! servers.
//! - Over two gym servers the default TinyAgent run samples the very episodes, rewards and
//!   evaluations it samples in process (same seed).
//! - Two gym servers and two `agentrl serve` engines (a tiny Qwen3 with the real tokenizer):
//!   one gym server is killed mid-run; the run finishes, every step has all its episodes, and
//!   the failures and restarts are in `metrics.jsonl`.
//! - Bound off loopback without a key, both servers refuse to start; with a key, they answer
//!   401 to a request without it.
//! - SIGTERM with live episodes (native, OpenEnv, ORS): `agentrl gym serve` exits within a few
//!   seconds and leaves no workspace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{spawn_server, tiny_qwen3, Served};

fn gym_server() -> Served {
    spawn_server(&["gym", "serve"], None)
}

fn get(url: &str, key: Option<&str>) -> (u16, Value) {
    let mut request = ureq::get(url).set("Connection", "close");
    if let Some(key) = key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let response = match request.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let status = response.status();
    let text = response.into_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn endpoints(servers: &[&Served]) -> String {
    let urls: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();
    serde_json::to_string(&urls).unwrap()
}

fn train(runs: &Path, name: &str, sets: &[String], config: Option<&Path>) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentrl"));
    command.args(["train", "--no-summary"]);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command
        .arg("--set")
        .arg(format!(
            "train.runs_root={}",
            serde_json::to_string(runs).unwrap()
        ))
        .arg("--set")
        .arg(format!("train.run_name={name:?}"));
    for set in sets {
        command.arg("--set").arg(set);
    }
    command
        .env_remove("AGENTRL_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every figure of a metrics line but the clocks, memory and the remote counters.
fn learning_figures(line: &Value) -> Vec<(String, Value)> {
    line.as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("timing_s/") && !k.starts_with("perf/") && !k.starts_with("env/remote_")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path.file_name().unwrap().into(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_run_over_gym_servers_samples_the_in_process_episodes_and_rewards() {
    let (a, b) = (gym_server(), gym_server());
    let runs = tempfile::tempdir().unwrap();
    let common = [
        "train.steps=4".to_string(),
        "train.episodes_every=2".to_string(),
        "train.eval_every=2".to_string(),
    ];
    let mut remote = common.to_vec();
    remote.push(format!("gym.endpoints={}", endpoints(&[&a, &b])));
    finish(train(runs.path(), "in-process", &common, None));
    finish(train(runs.path(), "served", &remote, None));
    let (local, served) = (runs.path().join("in-process"), runs.path().join("served"));
    let (local_episodes, served_episodes) = (
        files(&local.join("episodes")),
        files(&served.join("episodes")),
    );
    assert_eq!(local_episodes.len(), 2);
    assert!(
        local_episodes == served_episodes,
        "the episodes differ between the run in process and over gym servers"
    );
    let (local_lines, served_lines) = (metrics(&local), metrics(&served));
    assert_eq!(local_lines.len(), 4);
    for (l, s) in local_lines.iter().zip(&served_lines) {
        assert_eq!(learning_figures(l), learning_figures(s));
        assert_eq!(s["env/remote_failures"], 0.0, "{s}");
        assert!(l.get("env/remote_failures").is_none(), "{l}");
    }
    // Both servers took episodes.
    for server in [&a, &b] {
        let (_, load) = get(&format!("{}/v1/load", server.url), None);
        assert!(load["episodes_started"].as_u64().unwrap() > 0, "{load}");
        assert_eq!(load["live_episodes"], 0, "every episode closed: {load}");
    }
}

#[test]
fn a_run_over_fleets_of_engines_and_gym_servers_survives_a_gym_server_killed_mid_run() {
    let tmp = tempfile::tempdir().unwrap();
    // The shape the Qwen3 tests train: hidden 64, logits not saturated.
    let model = tiny_qwen3(
        tmp.path(),
        &[
            "--hidden-size",
            "64",
            "--scale",
            "0.15",
            "--embed-scale",
            "0.6",
        ],
    );
    let engine = |model: &Path| {
        spawn_server(
            &[
                "serve",
                "--served-model-name",
                "tiny",
                "--logprobs-mode",
                "temperature-scaled",
                "--model",
                model.to_str().unwrap(),
            ],
            None,
        )
    };
    let (engine_a, engine_b) = (engine(&model), engine(&model));
    let (doomed, survivor) = (gym_server(), gym_server());
    let steps = 3;
    let sets = vec![
        format!("model.dir={}", serde_json::to_string(&model).unwrap()),
        format!("train.steps={steps}"),
        "train.format_warmup_steps=0".to_string(),
        "train.episodes_every=1".to_string(),
        "engine.kind=\"vllm\"".to_string(),
        "engine.served_model=\"tiny\"".to_string(),
        format!("engine.endpoints={}", endpoints(&[&engine_a, &engine_b])),
        format!("gym.endpoints={}", endpoints(&[&doomed, &survivor])),
        "gym.backoff_s=0.05".to_string(),
    ];
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tests/qwen3-tiny-grpo.toml");
    let run = train(tmp.path(), "fleet", &sets, Some(&config));
    // Kill the first gym server once it has served a few tool calls of the first step.
    let started = Instant::now();
    loop {
        let (_, load) = get(&format!("{}/v1/load", doomed.url), None);
        if load["steps"].as_u64().unwrap_or(0) >= 3 {
            drop(doomed); // SIGKILL
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the gym server never served a step"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    finish(run);
    let lines = metrics(&tmp.path().join("fleet"));
    assert_eq!(lines.len(), steps);
    let per_step = 2 * 4; // tasks_per_step x group_size of the config
    let (mut failures, mut retries) = (0.0, 0.0);
    for line in &lines {
        assert!(line["critic/rewards/mean"].is_number(), "{line}");
        failures += line["env/remote_failures"].as_f64().unwrap();
        retries += line["env/remote_retries"].as_f64().unwrap();
    }
    // Every episode of every step was sampled, scored and recorded: none dropped.
    let recorded = files(&tmp.path().join("fleet/episodes"));
    assert_eq!(recorded.len(), steps);
    for (file, bytes) in &recorded {
        let episodes = String::from_utf8_lossy(bytes).lines().count();
        assert_eq!(episodes, per_step, "{}", file.display());
    }
    eprintln!("failures {failures}, restarts {retries}");
    assert!(failures >= 1.0, "the lost server's requests are counted");
    assert!(
        retries >= 1.0,
        "the episodes it held were restarted elsewhere"
    );
    let (_, load) = get(&format!("{}/v1/load", survivor.url), None);
    assert!(
        load["episodes_finished"].as_u64().unwrap() >= (per_step * (steps - 1)) as u64,
        "after the kill every episode ran on the survivor: {load}"
    );
    assert_eq!(load["live_episodes"], 0, "{load}");
}

fn refuses_off_loopback(args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(args)
        .args(["--host", "0.0.0.0", "--port", "0"])
        .env_remove("AGENTRL_API_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success(), "{args:?} started without a key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("AGENTRL_API_KEY"), "{args:?}: {stderr}");
}

#[test]
fn both_servers_need_a_key_off_loopback_and_check_it_when_they_have_one() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    refuses_off_loopback(&["gym", "serve"]);
    refuses_off_loopback(&["serve", "--model", model.to_str().unwrap()]);

    let keyed = spawn_server(&["gym", "serve"], Some("sesame"));
    let health = format!("{}/health", keyed.url);
    assert_eq!(get(&health, None).0, 401);
    assert_eq!(get(&health, Some("open")).0, 401);
    assert_eq!(get(&health, Some("sesame")).0, 200);
}

/// Gym servers move between a crash and a resume: `--resume RUN --set gym.endpoints=[...]` is
/// allowed (recorded in `config_changes.jsonl`), and the resumed steps over a gym server are
/// the steps the run takes uninterrupted in process.
#[test]
fn a_run_resumes_over_a_gym_server_and_goes_on_as_in_process() {
    let server = gym_server();
    let runs = tempfile::tempdir().unwrap();
    let steps = |n: usize| vec![format!("train.steps={n}")];
    finish(train(runs.path(), "whole", &steps(4), None));
    finish(train(runs.path(), "resumed", &steps(2), None));
    let resumed_dir = runs.path().join("resumed");
    let resumed = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["train", "--no-summary", "--resume"])
        .arg(&resumed_dir)
        .args(["--set", "train.steps=4", "--set"])
        .arg(format!("gym.endpoints={}", endpoints(&[&server])))
        .env_remove("AGENTRL_API_KEY")
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let changes = std::fs::read_to_string(resumed_dir.join("config_changes.jsonl")).unwrap();
    assert!(changes.contains("gym.endpoints"), "{changes}");
    let (whole, resumed) = (metrics(&runs.path().join("whole")), metrics(&resumed_dir));
    assert_eq!(resumed.len(), 4);
    for (w, r) in whole.iter().zip(&resumed).skip(2) {
        assert_eq!(learning_figures(w), learning_figures(r));
        assert!(r["env/remote_failures"].is_number(), "{r}");
    }
    let (_, load) = get(&format!("{}/v1/load", server.url), None);
    assert!(load["episodes_finished"].as_u64().unwrap() >= 128, "{load}");
}

/// SIGTERM with live episodes (native, OpenEnv's stateless reset, an ORS session): the process
/// is gone within a few seconds, and so is every workspace (its run directory under TMPDIR).
#[test]
fn sigterm_with_live_episodes_exits_quickly_and_leaves_no_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentrl"))
        .args(["gym", "serve", "--port", "0"])
        .env("TMPDIR", tmp.path())
        .env_remove("AGENTRL_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let post = |path: &str, body: &str, sid: Option<&str>| {
        let mut request = ureq::post(&format!("{url}{path}"));
        if let Some(sid) = sid {
            request = request.set("X-Session-ID", sid);
        }
        request
            .send_string(body)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .into_string()
            .unwrap()
    };
    post("/v1/episodes", r#"{"task_id": "intdiv-000"}"#, None);
    post("/openenv/reset", r#"{"task_id": "comparison-000"}"#, None);
    let session = post("/create_session", "", None);
    let sid = session
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| !d.is_empty()))
        .unwrap()
        .to_string();
    post("/create", r#"{"split": "train", "index": 0}"#, Some(&sid));
    let workspaces = |dir: &Path| -> usize {
        walk(dir)
            .iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("agentrl-ws-"))
            })
            .count()
    };
    assert_eq!(
        workspaces(tmp.path()),
        3,
        "three live episodes, three workspaces"
    );
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "gym serve still runs 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // The janitor removes the run directory once the process is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !walk(tmp.path()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(walk(tmp.path()), Vec::<PathBuf>::new(), "left behind");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}
