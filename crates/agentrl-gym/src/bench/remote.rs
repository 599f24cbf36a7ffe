//! `agentrl bench gym --remote`: what running the gym as a service costs and gives, side by
//! side in one run. The unit is a whole verdict episode of the bench task (the built-in train
//! task with the most hidden cases): start, one `edit` per module writing the reference fix
//! (with a line that makes every episode's content new, so no outcome cache answers it), and
//! `submit`, whose reward must be a solve. The same episodes, from the same client threads, run
//! (1) in process (a `BugFixEnv` on this process's sandbox pool), (2) through one local
//! `agentrl gym serve` process and (3) through two; each twice, interleaved, and the median
//! of the two windows is reported.
//!
//! On one machine the servers share its cores with each other and with the client, so (2)/(1)
//! is the service's own cost (HTTP, JSON, a process boundary) and (3) shows what a second
//! server adds when it has no cores of its own (nothing, or less); on separate hosts each
//! server brings its own cores and verdicts/s add up.
//!
//! The protocol layers: the same episodes through the one server's OpenEnv routes (the
//! simulation-mode `/openenv/reset` and `/openenv/step`, MCP-shaped `call_tool` actions) and
//! its ORS routes (`/create_session`, `/create`, SSE `/call`, `/delete`), each against the
//! native route through the same server (`vs native`): what OpenEnv's and ORS's shapes cost
//! over the gym's own.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use serde_json::json;

use super::{load_average_1m, measure_work, verdict_task, MEASURE_FOR};
use crate::env::{EnvConfig, OutcomeCache};
use crate::service::{FleetConfig, GymBackend, GymFleet};
use crate::task::{Task, TaskSet};
use crate::types::{Action, Env, ToolCall};

/// A local `agentrl gym serve` process; killed when dropped.
struct LocalServer {
    child: Child,
    url: String,
}

impl LocalServer {
    /// Starts this binary's `gym serve` on a free loopback port.
    fn start() -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the agentrl binary")?;
        let mut child = Command::new(&exe)
            .args(["gym", "serve", "--port", "0"])
            .env_remove(crate::service::access::API_KEY_ENV)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {} gym serve", exe.display()))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout).read_line(&mut line)?;
        }
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("gym serve printed {line:?} instead of its address"))?
            .to_string();
        Ok(Self { child, url })
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Serialize)]
struct Side {
    gym: String,
    verdicts_per_s: f64,
    case_execs_per_s: f64,
    /// Over the in-process gym's verdicts/s.
    ratio_to_in_process: f64,
    /// Over the native route through the same one server (the protocol sides only).
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to_native: Option<f64>,
    verdicts: u64,
}

/// How a side reaches the gym.
enum Route {
    /// The gym's own `Env`: in process, or the native protocol's client over servers.
    Native(GymBackend),
    /// OpenEnv's HTTP routes of the server at this URL.
    OpenEnv(String),
    /// ORS's routes of the server at this URL.
    Ors(String),
}

/// A fresh connection per request, as the native client does (see `service/client.rs`).
fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(120))
        .max_idle_connections(0)
        .build()
}

fn post(
    agent: &ureq::Agent,
    url: &str,
    body: &serde_json::Value,
    sid: Option<&str>,
) -> anyhow::Result<String> {
    let mut request = agent.post(url);
    if let Some(sid) = sid {
        request = request.set("X-Session-ID", sid);
    }
    match request.send_string(&body.to_string()) {
        Ok(response) => Ok(response.into_string()?),
        Err(ureq::Error::Status(status, response)) => {
            anyhow::bail!(
                "{url}: {status} {}",
                response.into_string().unwrap_or_default()
            )
        }
        Err(e) => Err(anyhow::anyhow!("{url}: {e}")),
    }
}

/// The edits of a bench episode: the reference fix, with a line that makes it new.
fn fix_edits(task: &Task, serial: u64) -> Vec<serde_json::Value> {
    task.reference
        .iter()
        .map(|(path, fixed)| {
            json!({ "path": path, "text": format!("{fixed}\n# bench episode {serial}\n") })
        })
        .collect()
}

/// One verdict episode through OpenEnv's routes.
fn openenv_episode(agent: &ureq::Agent, url: &str, task: &Task, serial: u64) -> anyhow::Result<()> {
    let reset: serde_json::Value = serde_json::from_str(&post(
        agent,
        &format!("{url}/openenv/reset"),
        &json!({ "task_id": task.id }),
        None,
    )?)?;
    let id = reset["metadata"]["episode_id"]
        .as_str()
        .context("no episode_id in the reset's metadata")?
        .to_string();
    let step = |tool: &str, arguments: serde_json::Value| -> anyhow::Result<serde_json::Value> {
        let body = json!({ "episode_id": id,
            "action": {"type": "call_tool", "tool_name": tool, "arguments": arguments} });
        Ok(serde_json::from_str(&post(
            agent,
            &format!("{url}/openenv/step"),
            &body,
            None,
        )?)?)
    };
    for edit in fix_edits(task, serial) {
        step("edit", edit)?;
    }
    let last = step("submit", json!({}))?;
    anyhow::ensure!(
        last["reward"].as_f64() == Some(1.0),
        "the reference fix of {} did not solve it through OpenEnv: {last}",
        task.id
    );
    Ok(())
}

/// The `end` event's data of an SSE answer.
fn sse_end(text: &str) -> anyhow::Result<String> {
    let mut event = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("event: ") {
            event = name;
        } else if let Some(data) = line.strip_prefix("data: ") {
            match event {
                "end" => return Ok(data.to_string()),
                "error" => anyhow::bail!("SSE error: {data}"),
                _ => {}
            }
        }
    }
    anyhow::bail!("no end event in {text:?}")
}

/// One verdict episode through ORS's routes.
fn ors_episode(agent: &ureq::Agent, url: &str, task: &Task, serial: u64) -> anyhow::Result<()> {
    let sid = {
        let text = post(agent, &format!("{url}/create_session"), &json!({}), None)?;
        text.lines()
            .find_map(|l| l.strip_prefix("data: ").filter(|d| !d.is_empty()))
            .context("no session id")?
            .to_string()
    };
    let sid = Some(sid.as_str());
    post(
        agent,
        &format!("{url}/create"),
        &json!({ "task_spec": {"task_id": task.id} }),
        sid,
    )?;
    let call = |name: &str, input: serde_json::Value| -> anyhow::Result<serde_json::Value> {
        let text = post(
            agent,
            &format!("{url}/call"),
            &json!({ "name": name, "input": input }),
            sid,
        )?;
        Ok(serde_json::from_str(&sse_end(&text)?)?)
    };
    for edit in fix_edits(task, serial) {
        call("edit", edit)?;
    }
    let last = call("submit", json!({}))?;
    post(agent, &format!("{url}/delete"), &json!({}), sid)?;
    anyhow::ensure!(
        last["output"]["reward"].as_f64() == Some(1.0),
        "the reference fix of {} did not solve it through ORS: {last}",
        task.id
    );
    Ok(())
}

/// One verdict episode by `route`.
fn route_episode(
    route: &Route,
    agent: &ureq::Agent,
    task: &Task,
    serial: u64,
) -> anyhow::Result<()> {
    match route {
        Route::Native(backend) => verdict_episode(backend, task, serial),
        Route::OpenEnv(url) => openenv_episode(agent, url, task, serial),
        Route::Ors(url) => ors_episode(agent, url, task, serial),
    }
}

#[derive(Debug, Serialize)]
struct RemoteReport {
    task: String,
    cases_per_verdict: usize,
    client_threads: usize,
    cores: usize,
    seconds_per_window: f64,
    sides: Vec<Side>,
    load_average_1m: Option<f64>,
    note: &'static str,
}

/// One verdict episode on `backend`; its content is new (`serial`), so no cache answers it.
fn verdict_episode(backend: &GymBackend, task: &Task, serial: u64) -> anyhow::Result<()> {
    let mut env = backend.env(&EnvConfig::default());
    env.reset(&task.id)?;
    for (path, fixed) in &task.reference {
        let edit = Action::Call(ToolCall {
            name: "edit".into(),
            arguments: json!({ "path": path, "text": format!("{fixed}\n# bench episode {serial}\n") }),
        });
        env.step(&edit)?;
    }
    let submit = Action::Call(ToolCall {
        name: "submit".into(),
        arguments: json!({}),
    });
    let step = env.step(&submit)?;
    let reward = step.reward.context("submit ended no episode")?;
    anyhow::ensure!(
        reward.solved(),
        "the reference fix of {} did not solve it through this gym: {reward:?}",
        task.id
    );
    Ok(())
}

fn measure(
    route: &Route,
    task: &Task,
    threads: usize,
    serial: &AtomicU64,
) -> anyhow::Result<(f64, u64)> {
    let agent = agent();
    measure_work(threads, |_| {
        route_episode(route, &agent, task, serial.fetch_add(1, Ordering::Relaxed))
    })
}

/// `agentrl bench gym --remote`.
pub fn run(json: bool) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2);
    // Enough episodes in flight to keep every sandbox worker of every server busy while
    // others wait on HTTP.
    let threads = 4 * cores;
    let task = verdict_task()?;
    let tasks = Arc::new(TaskSet::builtin()?);
    let fleet = |servers: &[&LocalServer]| -> anyhow::Result<GymBackend> {
        let config = FleetConfig {
            endpoints: servers.iter().map(|s| s.url.clone()).collect(),
            max_in_flight: threads,
            ..FleetConfig::default()
        };
        Ok(GymBackend::Servers(GymFleet::connect(&config, &tasks)?))
    };
    let (a, b) = (LocalServer::start()?, LocalServer::start()?);
    let backends = [
        (
            "in process".to_string(),
            Route::Native(GymBackend::InProcess {
                tasks: tasks.clone(),
                executor: crate::sandbox::default_executor()?,
                cache: OutcomeCache::new(),
            }),
        ),
        ("one gym server".to_string(), Route::Native(fleet(&[&a])?)),
        (
            "two gym servers".to_string(),
            Route::Native(fleet(&[&a, &b])?),
        ),
        (
            "one server, OpenEnv".to_string(),
            Route::OpenEnv(a.url.clone()),
        ),
        ("one server, ORS".to_string(), Route::Ors(a.url.clone())),
    ];
    let serial = AtomicU64::new(0);
    for (name, backend) in &backends {
        route_episode(
            backend,
            &agent(),
            &task,
            serial.fetch_add(1, Ordering::Relaxed),
        )
        .with_context(|| format!("warm-up episode {name}"))?;
    }
    let mut windows: Vec<Vec<(f64, u64)>> = vec![Vec::new(); backends.len()];
    for _round in 0..2 {
        for (i, (name, backend)) in backends.iter().enumerate() {
            windows[i].push(measure(backend, &task, threads, &serial).context(name.clone())?);
        }
    }
    let cases = task.hidden.len();
    let medians: Vec<(f64, u64)> = windows
        .iter()
        .map(|w| {
            let rate = (w[0].0 + w[1].0) / 2.0;
            (rate, w.iter().map(|x| x.1).sum())
        })
        .collect();
    let (in_process, native) = (medians[0].0, medians[1].0);
    let sides = backends
        .iter()
        .zip(&medians)
        .map(|((name, route), &(rate, verdicts))| Side {
            gym: name.clone(),
            verdicts_per_s: rate,
            case_execs_per_s: rate * cases as f64,
            ratio_to_in_process: if in_process > 0.0 {
                rate / in_process
            } else {
                f64::NAN
            },
            ratio_to_native: (!matches!(route, Route::Native(_)) && native > 0.0)
                .then(|| rate / native),
            verdicts,
        })
        .collect();
    let report = RemoteReport {
        task: task.id.clone(),
        cases_per_verdict: cases,
        client_threads: threads,
        cores,
        seconds_per_window: MEASURE_FOR.as_secs_f64(),
        sides,
        load_average_1m: load_average_1m(),
        note: "the servers run on this machine's cores: the ratios show the service's cost; \
               on hosts of their own, servers add their cores",
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "verdict episodes of {} ({} hidden cases; {} client threads on {} cores; 2 windows of \
         {:.1} s each, interleaved)",
        report.task, cases, threads, cores, report.seconds_per_window
    );
    println!(
        "{:<22}{:>12}{:>12}{:>14}{:>11}{:>10}",
        "gym", "verdicts/s", "cases/s", "vs in process", "vs native", "verdicts"
    );
    for side in &report.sides {
        let vs_native = side
            .ratio_to_native
            .map(|r| format!("{r:.2}x"))
            .unwrap_or_default();
        println!(
            "{:<22}{:>12.1}{:>12.1}{:>13.2}x{:>11}{:>10}",
            side.gym,
            side.verdicts_per_s,
            side.case_execs_per_s,
            side.ratio_to_in_process,
            vs_native,
            side.verdicts
        );
    }
    println!(
        "1-min load average now: {}; {}",
        report
            .load_average_1m
            .map(|l| format!("{l:.1}"))
            .unwrap_or_else(|| "unknown".into()),
        report.note
    );
    Ok(())
}
