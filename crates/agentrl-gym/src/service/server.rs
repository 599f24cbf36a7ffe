//! `agentrl gym serve`'s server: the gym (tasks, tools, sandbox, verifier, tamper check) over
//! HTTP/JSON, so episodes run on machines other than the trainer's.
//!
//! Where it sits: a [`GymServer`] holds one task set, one sandbox executor and one outcome
//! cache, like a trainer's in-process gym, and an episode table: each started episode is a
//! [`BugFixEnv`] of its own, stepped by whichever HTTP thread takes its request (one request at
//! a time per episode; different episodes in parallel). Routes and bodies are in
//! [`super::wire`] and `docs/GYM_SERVICE.md`.
//!
//! Bounds: at most `max_episodes` live (started, not finished) episodes, and at most
//! `max_workspace_mib` of workspace quota across them (each live episode's workspace is a tmpfs
//! of its task's `limits.disk_mib`, see `sandbox/scratch.rs`, so this bounds the memory that
//! candidates' files can take): past either a start is a 429 with `Retry-After`, never a queue
//! that grows without end. An episode with no request
//! for `idle_timeout` is closed by a reaper thread (its workspace deleted), finished or not.
//! A finished episode keeps only its last answer (for a repeated request) until it is closed.
//! Every bad request is a 4xx whose message names the field or id at fault; a failure of the
//! gym itself (a sandbox that cannot start) is a 500. Nothing a request sends can panic a
//! thread: bodies are parsed into the protocol's types and every lookup is checked.
//!
//! `tiny_http` (the synchronous HTTP/1.1 server `agentrl serve` uses): a verdict is CPU work in
//! sandboxed child processes, so blocking threads are the natural shape, and the workspace has
//! no async runtime.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use super::access::AccessRule;
use super::wire::{
    EpisodeState, ErrorBody, ErrorDetail, Health, Load, StartRequest, StartResponse, StepRequest,
    StepResponse, TaskInfo, TaskList, PROTOCOL_VERSION,
};
use crate::env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
use crate::sandbox::Executor;
use crate::task::{Split, TaskError, TaskSet};
use crate::types::Env;

/// Largest request body read: an `edit` rewriting a whole module fits many times over.
const MAX_BODY: u64 = 16 << 20;

/// How a gym server behaves.
#[derive(Debug, Clone)]
pub struct GymServeOptions {
    /// Live episodes at most; a start past it is answered 429.
    pub max_episodes: usize,
    /// An episode with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Workspace quota (MiB) across live episodes at most; a start past it is answered 429.
    /// Each live episode counts its task's `limits.disk_mib` (64 by default), whether or not it
    /// has written anything: that is what its candidates could take.
    pub max_workspace_mib: u64,
    /// Threads taking requests (each runs its episode's tool calls, verdicts included).
    pub http_threads: usize,
    /// The token rule ([`AccessRule`]).
    pub access: AccessRule,
    /// Episode settings a start request does not override (turn limit, reward, sandbox limits).
    pub env: EnvConfig,
}

impl Default for GymServeOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            max_episodes: 256,
            // The default episode bound at the default quota.
            max_workspace_mib: 256 * 64,
            idle_timeout: Duration::from_secs(600),
            http_threads: (4 * cores).max(16),
            access: AccessRule::open(),
            env: EnvConfig::default(),
        }
    }
}

/// One episode of the table.
struct Slot {
    /// `None` once the episode is over (the workspace is gone; the record stays).
    env: Option<BugFixEnv>,
    task_id: String,
    seed: u64,
    turn: u32,
    done: bool,
    /// Its workspace quota in MiB, counted in [`Table::workspace_mib`] while it is live.
    workspace_mib: u64,
    reward: Option<crate::types::Reward>,
    /// The last step's action and answer, for a repeated request.
    last: Option<(crate::types::Action, StepResponse)>,
    last_used: Instant,
}

#[derive(Default)]
struct Table {
    slots: HashMap<String, Arc<Mutex<Slot>>>,
    live: usize,
    /// The workspace quotas of the live episodes, in MiB.
    workspace_mib: u64,
}

impl Table {
    /// A live episode with a workspace quota of `mib` ended (finished, closed or reaped).
    fn release(&mut self, mib: u64) {
        self.live -= 1;
        self.workspace_mib -= mib;
    }
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    finished: AtomicU64,
    reaped: AtomicU64,
    steps: AtomicU64,
    refused_full: AtomicU64,
}

/// What every HTTP thread shares.
struct Shared {
    tasks: Arc<TaskSet>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    options: GymServeOptions,
    table: Mutex<Table>,
    counters: Counters,
    /// Episode ids are `ep-N-RANDOM`: the random part keeps an id from another server (or an
    /// earlier run of this one) from naming an episode here by accident.
    next_id: AtomicU64,
}

/// A running gym server; [`GymServer::shutdown`] (or drop) stops it.
pub struct GymServer {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    http: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl GymServer {
    /// Binds `addr` (`host:port`, port 0 = any free port) and serves `tasks`.
    pub fn start(
        tasks: Arc<TaskSet>,
        executor: Arc<dyn Executor>,
        options: GymServeOptions,
        addr: &str,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            options.max_episodes > 0,
            "--max-episodes must be at least 1"
        );
        let http = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("gym serve: binding {addr}: {e}"))?;
        let bound = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow::anyhow!("gym serve: {addr} is not an IP address"))?;
        let http = Arc::new(http);
        let shared = Arc::new(Shared {
            tasks,
            executor,
            cache: OutcomeCache::new(),
            table: Mutex::new(Table::default()),
            counters: Counters::default(),
            next_id: AtomicU64::new(1),
            options,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..shared.options.http_threads.max(1) {
            let (http, stop, shared) = (http.clone(), stop.clone(), shared.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("gym-http-{i}"))
                    .spawn(move || {
                        while !stop.load(Ordering::SeqCst) {
                            match http.recv_timeout(Duration::from_millis(50)) {
                                Ok(Some(request)) => handle(&shared, request),
                                Ok(None) => {}
                                Err(_) => break,
                            }
                        }
                    })
                    .context("gym serve: starting an HTTP thread")?,
            );
        }
        let (reaper_stop, reaper_shared) = (stop.clone(), shared.clone());
        threads.push(
            std::thread::Builder::new()
                .name("gym-reaper".into())
                .spawn(move || {
                    let tick = (reaper_shared.options.idle_timeout / 4)
                        .clamp(Duration::from_millis(20), Duration::from_secs(5));
                    let mut last = Instant::now();
                    // Short naps, so a shutdown never waits a whole tick.
                    while !reaper_stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(20));
                        if last.elapsed() >= tick {
                            reap(&reaper_shared);
                            last = Instant::now();
                        }
                    }
                })
                .context("gym serve: starting the reaper")?,
        );
        Ok(Self {
            addr: bound,
            shared,
            http,
            stop,
            threads,
        })
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The figures of `GET /v1/load`.
    pub fn load(&self) -> Load {
        load(&self.shared)
    }

    /// Blocks until the server stops (never, unless its threads end).
    pub fn wait(mut self) {
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }

    /// Stops taking requests and closes every episode.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.http.unblock();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
        if let Ok(mut table) = self.shared.table.lock() {
            table.slots.clear();
            table.live = 0;
            table.workspace_mib = 0;
        }
    }
}

impl Drop for GymServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// An error answer.
#[derive(Debug)]
struct HttpError {
    status: u16,
    message: String,
}

impl HttpError {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

type Answer = Result<(u16, String), HttpError>;

fn ok(value: &impl Serialize) -> Answer {
    with_status(200, value)
}

fn with_status(status: u16, value: &impl Serialize) -> Answer {
    serde_json::to_string(value)
        .map(|body| (status, body))
        .map_err(|e| HttpError::new(500, format!("writing the answer: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, HttpError> {
    if body.trim().is_empty() {
        return Err(HttpError::new(
            400,
            "the request body is empty: send a JSON object",
        ));
    }
    serde_json::from_str(body).map_err(|e| HttpError::new(400, format!("invalid JSON body: {e}")))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain data behind (counts, maps); the server goes on.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn handle(shared: &Shared, mut request: tiny_http::Request) {
    let method = request.method().clone();
    let url = request.url().to_string();
    let authorization = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    let answer = if !shared.options.access.allows(authorization.as_deref()) {
        Err(HttpError::new(
            401,
            "missing or wrong API key: send `Authorization: Bearer KEY` with the server's key",
        ))
    } else {
        let mut body = String::new();
        match request
            .as_reader()
            .take(MAX_BODY + 1)
            .read_to_string(&mut body)
        {
            Err(e) => Err(HttpError::new(
                400,
                format!("reading the request body: {e}"),
            )),
            Ok(n) if n as u64 > MAX_BODY => Err(HttpError::new(
                413,
                format!("the request body is over {MAX_BODY} bytes"),
            )),
            Ok(_) => route(shared, &method, &url, &body),
        }
    };
    let (status, body, retry_after) = match answer {
        Ok((status, body)) => (status, body, false),
        Err(e) => {
            let body = serde_json::to_string(&ErrorBody {
                error: ErrorDetail {
                    message: e.message,
                    code: e.status,
                },
            })
            .unwrap_or_else(|_| "{}".into());
            (e.status, body, e.status == 429)
        }
    };
    let mut response = tiny_http::Response::from_string(body).with_status_code(status);
    if let Ok(header) = tiny_http::Header::from_bytes("Content-Type", "application/json") {
        response = response.with_header(header);
    }
    if retry_after {
        if let Ok(header) = tiny_http::Header::from_bytes("Retry-After", "1") {
            response = response.with_header(header);
        }
    }
    // The client may have gone; nothing to tell it then.
    let _ = request.respond(response);
}

fn route(shared: &Shared, method: &tiny_http::Method, url: &str, body: &str) -> Answer {
    use tiny_http::Method::{Delete, Get, Post};
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (Get, ["health"]) => ok(&Health {
            status: "ok".into(),
            protocol: PROTOCOL_VERSION,
            server: format!("agentrl-gym {}", env!("CARGO_PKG_VERSION")),
        }),
        (Get, ["v1", "load"]) => ok(&load(shared)),
        (Get, ["v1", "tasks"]) => list_tasks(shared, query),
        (Post, ["v1", "episodes"]) => start_episode(shared, body),
        (Get, ["v1", "episodes", id]) => episode_state(shared, id),
        (Post, ["v1", "episodes", id, "step"]) => step_episode(shared, id, body),
        (Delete, ["v1", "episodes", id]) => close_episode(shared, id),
        (_, ["health"] | ["v1", "load" | "tasks" | "episodes"])
        | (_, ["v1", "episodes", _] | ["v1", "episodes", _, "step"]) => Err(HttpError::new(
            405,
            format!("{method} is not a method of {path}"),
        )),
        _ => Err(HttpError::new(404, format!("no route {method} {path}"))),
    }
}

fn load(shared: &Shared) -> Load {
    let (live, workspace_mib) = {
        let table = lock(&shared.table);
        (table.live, table.workspace_mib)
    };
    let c = &shared.counters;
    Load {
        live_episodes: live,
        max_episodes: shared.options.max_episodes,
        workspace_mib,
        max_workspace_mib: shared.options.max_workspace_mib,
        episodes_started: c.started.load(Ordering::Relaxed),
        episodes_finished: c.finished.load(Ordering::Relaxed),
        episodes_reaped: c.reaped.load(Ordering::Relaxed),
        steps: c.steps.load(Ordering::Relaxed),
        refused_full: c.refused_full.load(Ordering::Relaxed),
        idle_timeout_s: shared.options.idle_timeout.as_secs_f64(),
    }
}

fn list_tasks(shared: &Shared, query: &str) -> Answer {
    let mut split = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("split", value)) => {
                split = Some(
                    value
                        .parse::<Split>()
                        .map_err(|e| HttpError::new(400, format!("query parameter split: {e}")))?,
                )
            }
            _ => {
                return Err(HttpError::new(
                    400,
                    format!("unknown query parameter {pair:?} (known: split)"),
                ))
            }
        }
    }
    let tasks = shared
        .tasks
        .tasks()
        .iter()
        .filter(|t| split.is_none_or(|s| t.split == s))
        .map(|t| TaskInfo {
            id: t.id.clone(),
            family: t.family.clone(),
            split: t.split,
            fingerprint: t.fingerprint(),
        })
        .collect();
    ok(&TaskList { tasks })
}

fn start_episode(shared: &Shared, body: &str) -> Answer {
    let request: StartRequest = parse(body)?;
    // Unknown tasks are the client's mistake (404 with the server's suggestion), checked
    // before a slot is taken.
    let task = shared.tasks.get(&request.task_id).map_err(|e| match e {
        TaskError::UnknownTask { .. } => HttpError::new(404, e.to_string()),
        other => HttpError::new(400, other.to_string()),
    })?;
    let workspace_mib = task
        .run_limits(&shared.options.env.limits)
        .disk_bytes
        .div_ceil(1 << 20);
    if request.max_turns == Some(0) {
        return Err(HttpError::new(400, "max_turns must be at least 1"));
    }
    {
        let mut table = lock(&shared.table);
        if table.live >= shared.options.max_episodes {
            shared.counters.refused_full.fetch_add(1, Ordering::Relaxed);
            return Err(HttpError::new(
                429,
                format!(
                    "the server holds its most live episodes ({}): retry later, close unfinished \
                     episodes you no longer need, or start `agentrl gym serve` with a larger \
                     --max-episodes",
                    shared.options.max_episodes
                ),
            ));
        }
        if table.workspace_mib + workspace_mib > shared.options.max_workspace_mib {
            shared.counters.refused_full.fetch_add(1, Ordering::Relaxed);
            return Err(HttpError::new(
                429,
                format!(
                    "the live episodes' workspaces hold {} of the server's {} MiB and this task's \
                     takes {workspace_mib}: retry later, close unfinished episodes you no longer \
                     need, or start `agentrl gym serve` with a larger --max-workspace-mib",
                    table.workspace_mib, shared.options.max_workspace_mib
                ),
            ));
        }
        table.live += 1;
        table.workspace_mib += workspace_mib;
    }
    let mut config = shared.options.env.clone();
    if let Some(turns) = request.max_turns {
        config.max_turns = turns;
    }
    if let Some(reward) = &request.reward {
        config.reward = reward.clone();
    }
    let mut env = BugFixEnv::new(
        shared.tasks.clone(),
        shared.executor.clone(),
        shared.cache.clone(),
        config,
    );
    let observation = match env.reset(&request.task_id) {
        Ok(observation) => observation,
        Err(e) => {
            lock(&shared.table).release(workspace_mib);
            return Err(gym_error(e));
        }
    };
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let episode_id = format!("ep-{n}-{:016x}", rand::random::<u64>());
    let slot = Slot {
        env: Some(env),
        task_id: request.task_id.clone(),
        seed: request.seed,
        turn: 0,
        done: false,
        workspace_mib,
        reward: None,
        last: None,
        last_used: Instant::now(),
    };
    lock(&shared.table)
        .slots
        .insert(episode_id.clone(), Arc::new(Mutex::new(slot)));
    shared.counters.started.fetch_add(1, Ordering::Relaxed);
    with_status(
        201,
        &StartResponse {
            episode_id,
            task_id: request.task_id,
            seed: request.seed,
            turn: 0,
            observation,
        },
    )
}

fn gym_error(e: GymError) -> HttpError {
    HttpError::new(500, format!("the gym failed: {e}"))
}

fn find(shared: &Shared, id: &str) -> Result<Arc<Mutex<Slot>>, HttpError> {
    lock(&shared.table).slots.get(id).cloned().ok_or_else(|| {
        HttpError::new(
            404,
            format!(
                "unknown episode {id:?}: never started here, closed, or reaped after {} s \
                 without a request",
                shared.options.idle_timeout.as_secs_f64()
            ),
        )
    })
}

fn episode_state(shared: &Shared, id: &str) -> Answer {
    let slot = find(shared, id)?;
    let mut slot = lock(&slot);
    slot.last_used = Instant::now();
    ok(&EpisodeState {
        episode_id: id.to_string(),
        task_id: slot.task_id.clone(),
        seed: slot.seed,
        turn: slot.turn,
        done: slot.done,
        reward: slot.reward.clone(),
    })
}

fn step_episode(shared: &Shared, id: &str, body: &str) -> Answer {
    let request: StepRequest = parse(body)?;
    let slot = find(shared, id)?;
    let mut slot = lock(&slot);
    slot.last_used = Instant::now();
    if let Some(turn) = request.turn {
        if turn.checked_add(1) == Some(slot.turn) {
            if let Some((action, last)) = &slot.last {
                if *action == request.action {
                    return ok(last);
                }
                return Err(HttpError::new(
                    409,
                    format!("turn {turn} of episode {id} was another action"),
                ));
            }
        }
        if turn != slot.turn {
            return Err(HttpError::new(
                409,
                format!(
                    "turn {turn} does not follow: episode {id} has applied {} actions",
                    slot.turn
                ),
            ));
        }
    }
    if slot.done {
        return Err(HttpError::new(
            409,
            format!("episode {id} is over: start another"),
        ));
    }
    let Some(env) = slot.env.as_mut() else {
        return Err(HttpError::new(409, format!("episode {id} is over")));
    };
    let step = env.step(&request.action).map_err(gym_error)?;
    shared.counters.steps.fetch_add(1, Ordering::Relaxed);
    slot.turn += 1;
    let response = StepResponse {
        episode_id: id.to_string(),
        turn: slot.turn,
        step,
    };
    slot.last = Some((request.action, response.clone()));
    if response.step.done {
        slot.done = true;
        slot.reward = response.step.reward.clone();
        slot.env = None;
        shared.counters.finished.fetch_add(1, Ordering::Relaxed);
        // Slot, then table: the order `close_episode` takes them in too.
        lock(&shared.table).release(slot.workspace_mib);
    }
    ok(&response)
}

fn close_episode(shared: &Shared, id: &str) -> Answer {
    let slot = lock(&shared.table)
        .slots
        .remove(id)
        .ok_or_else(|| HttpError::new(404, format!("unknown episode {id:?} (already closed?)")))?;
    let slot = lock(&slot);
    if !slot.done {
        lock(&shared.table).release(slot.workspace_mib);
    }
    ok(&serde_json::json!({ "episode_id": id, "closed": true, "turn": slot.turn }))
}

/// Closes every episode idle for longer than the timeout. Episodes whose lock is held are
/// busy, hence not idle.
fn reap(shared: &Shared) {
    let timeout = shared.options.idle_timeout;
    let mut table = lock(&shared.table);
    let mut idle = Vec::new();
    for (id, slot) in &table.slots {
        if let Ok(slot) = slot.try_lock() {
            if slot.last_used.elapsed() > timeout {
                idle.push((id.clone(), (!slot.done).then_some(slot.workspace_mib)));
            }
        }
    }
    for (id, live) in idle {
        table.slots.remove(&id);
        if let Some(mib) = live {
            table.release(mib);
        }
        shared.counters.reaped.fetch_add(1, Ordering::Relaxed);
    }
}
