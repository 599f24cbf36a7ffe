//! The episode table every protocol of `agentrl gym serve` shares: its bounds, its sessions,
//! and the start, step, state and close that the native routes, OpenEnv ([`super::openenv`])
//! and ORS ([`super::ors`]) all go through, so they share the bounds, the reaper and the
//! verdicts.
//!
//! Where it sits: below the three protocols' routes and [`super::server`], which wires them
//! onto one port; above the gym's [`BugFixEnv`]. Each started episode is a [`BugFixEnv`] of
//! its own, stepped on a blocking thread of the server's runtime (one request at a time per
//! episode; different episodes in parallel).
//!
//! Bounds: at most `max_episodes` live (started, not finished) episodes, and at most
//! `max_workspace_mib` of workspace quota across them (each live episode's workspace is a tmpfs
//! of its task's `limits.disk_mib`, see `sandbox/scratch.rs`, so this bounds the memory that
//! candidates' files can take): past either a start is a 429 with `Retry-After`, never a queue
//! that grows without end. An episode with no request for `idle_timeout` is closed by
//! `reap` (its workspace deleted), finished or not. A finished episode keeps only its last
//! answer (for a repeated request) until it is closed. Every bad request is an `HttpError`
//! 4xx whose message names the field or id at fault; a failure of the gym itself (a sandbox
//! that cannot start) is a 500.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::access::AccessRule;
use super::http::{self, HttpLimits};
use super::wire::{
    EpisodeState, ErrorBody, ErrorDetail, Load, StartRequest, StartResponse, StepRequest,
    StepResponse,
};
use crate::env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
use crate::sandbox::Executor;
use crate::task::{TaskError, TaskSet};
use crate::types::{Env, Observation};

/// Largest request body read: an `edit` rewriting a whole module fits many times over.
pub(crate) const MAX_BODY: usize = 16 << 20;

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
    /// Threads running requests' gym work (tool calls, verdicts included): the runtime's
    /// blocking pool. Requests past it wait for a thread (each holds only its connection).
    pub http_threads: usize,
    /// The HTTP stack's time-outs and connection bound ([`HttpLimits`]).
    pub http: HttpLimits,
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
            http: HttpLimits::default(),
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
    /// The observation `reset` gave (the ORS prompt is its text).
    first: Observation,
    /// The turn limit the episode runs under.
    max_turns: u32,
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

/// What every request shares.
pub(crate) struct Shared {
    pub(crate) tasks: Arc<TaskSet>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    pub(crate) options: GymServeOptions,
    table: Mutex<Table>,
    counters: Counters,
    /// Episode ids are `ep-N-RANDOM`: the random part keeps an id from another server (or an
    /// earlier run of this one) from naming an episode here by accident.
    next_id: AtomicU64,
    /// Set on shutdown: starts are refused (503) while live requests finish.
    pub(crate) closing: AtomicBool,
    /// OpenEnv sessions (WebSocket or MCP-over-HTTP): session id → its episode, bounded by
    /// `max_episodes` as OpenEnv bounds its sessions by `max_concurrent_envs`.
    pub(crate) openenv: Mutex<HashMap<String, Session>>,
    /// ORS sessions: session id → its episode, see [`super::ors`].
    pub(crate) ors: Mutex<HashMap<String, Session>>,
}

impl Shared {
    pub(crate) fn new(
        tasks: Arc<TaskSet>,
        executor: Arc<dyn Executor>,
        options: GymServeOptions,
    ) -> Self {
        Self {
            tasks,
            executor,
            cache: OutcomeCache::new(),
            table: Mutex::new(Table::default()),
            counters: Counters::default(),
            next_id: AtomicU64::new(1),
            closing: AtomicBool::new(false),
            openenv: Mutex::new(HashMap::new()),
            ors: Mutex::new(HashMap::new()),
            options,
        }
    }
}

/// A protocol's session (OpenEnv's WebSocket or MCP session, ORS's session): the episode it
/// started, if any.
pub(crate) struct Session {
    pub(crate) episode: Option<String>,
    pub(crate) last_used: Instant,
    /// A WebSocket is attached (OpenEnv only): the reaper leaves the session alone, the
    /// socket's own time-out rules.
    pub(crate) attached: bool,
}

impl Session {
    pub(crate) fn new(attached: bool) -> Self {
        Self {
            episode: None,
            last_used: Instant::now(),
            attached,
        }
    }
}

/// Drops every episode (and with it its workspace) and every protocol session.
pub(crate) fn close_all(shared: &Shared) {
    lock(&shared.ors).clear();
    lock(&shared.openenv).clear();
    let slots: Vec<_> = {
        let mut table = lock(&shared.table);
        table.live = 0;
        table.workspace_mib = 0;
        table.slots.drain().map(|(_, slot)| slot).collect()
    };
    // An episode mid-step holds its lock until the step is done; waiting for it here (the
    // runtime's blocking pool has already been given its grace time) means its workspace
    // is removed before the process exits.
    for slot in slots {
        lock(&slot).env = None;
    }
}

/// An error answer.
#[derive(Debug)]
pub(crate) struct HttpError {
    pub(crate) status: u16,
    pub(crate) message: String,
}

impl HttpError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = serde_json::to_string(&ErrorBody {
            error: ErrorDetail {
                message: self.message,
                code: self.status,
            },
        })
        .unwrap_or_else(|_| "{}".into());
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = json_response(status, body);
        if matches!(self.status, 429 | 503) {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
        }
        response
    }
}

/// A JSON body with its status.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(HttpError::new(
            400,
            "the request body is empty: send a JSON object",
        ));
    }
    serde_json::from_slice(body).map_err(|e| HttpError::new(400, format!("invalid JSON body: {e}")))
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain data behind (counts, maps); the server goes on.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs gym work (a start, a step: sandboxed processes) on the runtime's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    shared: &Arc<Shared>,
    work: impl FnOnce(&Shared) -> Result<T, HttpError> + Send + 'static,
) -> Result<T, HttpError> {
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || work(&shared))
        .await
        .unwrap_or_else(|e| Err(HttpError::new(500, format!("the gym failed: {e}"))))
}

/// The request body, read within the read time-out (408 past it) and at most [`MAX_BODY`]
/// bytes (413 past it).
pub(crate) async fn body(shared: &Shared, body: Body) -> Result<axum::body::Bytes, HttpError> {
    http::read_body(body, MAX_BODY, shared.options.http.read_timeout)
        .await
        .map_err(|(status, message)| HttpError::new(status, message))
}

pub(crate) fn load(shared: &Shared) -> Load {
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

/// Starts an episode (every protocol's reset).
pub(crate) fn start(shared: &Shared, request: StartRequest) -> Result<StartResponse, HttpError> {
    if shared.closing.load(Ordering::SeqCst) {
        return Err(HttpError::new(
            503,
            "the server is shutting down: start the episode on another server",
        ));
    }
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
    let max_turns = config.max_turns;
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
        first: observation.clone(),
        max_turns,
        last: None,
        last_used: Instant::now(),
    };
    lock(&shared.table)
        .slots
        .insert(episode_id.clone(), Arc::new(Mutex::new(slot)));
    shared.counters.started.fetch_add(1, Ordering::Relaxed);
    Ok(StartResponse {
        episode_id,
        task_id: request.task_id,
        seed: request.seed,
        turn: 0,
        observation,
    })
}

pub(crate) fn gym_error(e: GymError) -> HttpError {
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

/// An episode's state (every protocol's state).
pub(crate) fn episode_state(shared: &Shared, id: &str) -> Result<EpisodeState, HttpError> {
    Ok(episode_info(shared, id)?.0)
}

/// An episode's state, its first observation and its turn limit.
pub(crate) fn episode_info(
    shared: &Shared,
    id: &str,
) -> Result<(EpisodeState, Observation, u32), HttpError> {
    let slot = find(shared, id)?;
    let mut slot = lock(&slot);
    slot.last_used = Instant::now();
    Ok((
        EpisodeState {
            episode_id: id.to_string(),
            task_id: slot.task_id.clone(),
            seed: slot.seed,
            turn: slot.turn,
            done: slot.done,
            reward: slot.reward.clone(),
        },
        slot.first.clone(),
        slot.max_turns,
    ))
}

/// Applies one action (every protocol's step).
pub(crate) fn step(
    shared: &Shared,
    id: &str,
    request: StepRequest,
) -> Result<StepResponse, HttpError> {
    let slot = find(shared, id)?;
    let mut slot = lock(&slot);
    slot.last_used = Instant::now();
    if let Some(turn) = request.turn {
        if turn.checked_add(1) == Some(slot.turn) {
            if let Some((action, last)) = &slot.last {
                if *action == request.action {
                    return Ok(last.clone());
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
    Ok(response)
}

/// Closes an episode, finished or not (its workspace is removed); the turns it ran.
pub(crate) fn close(shared: &Shared, id: &str) -> Result<u32, HttpError> {
    let slot = lock(&shared.table)
        .slots
        .remove(id)
        .ok_or_else(|| HttpError::new(404, format!("unknown episode {id:?} (already closed?)")))?;
    let slot = lock(&slot);
    if !slot.done {
        lock(&shared.table).release(slot.workspace_mib);
    }
    Ok(slot.turn)
}

/// Removes the protocol sessions of `sessions` idle past the idle time-out (none with a socket
/// attached), then closes their episodes (outside the map's lock).
fn reap_sessions(shared: &Shared, sessions: &Mutex<HashMap<String, Session>>) {
    let timeout = shared.options.idle_timeout;
    let episodes: Vec<String> = {
        let mut sessions = lock(sessions);
        sessions
            .extract_if(|_, s| !s.attached && s.last_used.elapsed() > timeout)
            .filter_map(|(_, s)| s.episode)
            .collect()
    };
    for id in episodes {
        let _ = close(shared, &id);
    }
}

/// Closes every episode idle for longer than the timeout, and the protocol sessions that hold
/// none. Episodes whose lock is held are busy, hence not idle.
pub(crate) fn reap(shared: &Shared) {
    reap_sessions(shared, &shared.ors);
    reap_sessions(shared, &shared.openenv);
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
