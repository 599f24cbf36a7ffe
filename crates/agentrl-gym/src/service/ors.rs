//! The Open Reward Standard (ORS) over the gym: `agentrl gym serve`'s routes at the root, for
//! the `openreward` client and TRL's `OpenRewardSpec(url, env_name=...)`.
//!
//! Where it sits: routes of [`super::server`]'s router; an ORS session is an entry of the
//! server's session map naming at most one episode of the episode table, so the bounds, the
//! reaper and the verdicts are the native routes'. The wire formats follow `openreward`
//! 0.1.167 (its `environments/server.py` and `api/environments/client.py`); the client joins
//! absolute paths to its base URL, so these routes sit at the root, not under a prefix. One
//! environment, `bugfix`; every environment route is served both bare (`/tools`, what a client
//! given a URL calls) and as `/bugfix/tools`.
//! - Splits: `train` (type train), `heldout` (validation), `heldout-family` (test). A task is
//!   `{"task_id", "family", "split", "fingerprint"}`, by index in the split's order.
//! - A session: `POST /create_session` (SSE: `task_id` = the session id, then `end`), `POST
//!   /create` with `X-Session-ID` and `{"split", "index"}` or `{"task_spec"}` (starts the
//!   episode), `GET /prompt` (the task as text blocks), `POST /call` `{"name", "input"}` (SSE:
//!   `task_id`, then `end` with `{"ok": true, "output": {"blocks", "metadata", "reward",
//!   "finished"}}`), `POST /delete` (closes the episode), `POST /delete_session`.
//! - The reward is on the call that finishes the episode only (`null` before), the verdict in
//!   that output's `metadata.verdict`. A failure of the gym (a sandbox that cannot start) is an
//!   SSE `error` event: the client raises, and no reward of 0 is ever made up for it. A bound
//!   reached is a 429 on `/create`, also an error to the client.
//! - The key: `X-API-Key: KEY` (the client's header) or `Authorization: Bearer KEY`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::episodes::{self, blocking, lock, HttpError, Session, Shared};
use super::wire::{StartRequest, StepRequest};
use crate::render::render_text;
use crate::task::{Split, Task};
use crate::types::{Action, ToolCall};

/// The one environment's name.
pub const ENV_NAME: &str = "bugfix";

/// The routes, at the root.
pub(crate) fn router() -> Router<Arc<Shared>> {
    let mut router = Router::new()
        .route("/version", get(version))
        .route(
            "/list_environments",
            get(|| async { axum::Json(json!([ENV_NAME])) }),
        )
        .route("/ping", post(ping))
        .route("/create_session", post(create_session))
        .route("/delete_session", post(delete_session))
        .route("/create", post(create))
        .route("/delete", post(delete));
    // The environment routes, bare and under `/{env}`.
    macro_rules! env_routes {
        ($($path:literal => $method:ident($bare:ident, $named:ident)),* $(,)?) => {
            $(router = router
                .route(concat!("/", $path), $method($bare))
                .route(concat!("/{env}/", $path), $method($named));)*
        };
    }
    env_routes! {
        "tools" => get(tools, tools_named),
        "task_tools" => get(task_tools, task_tools_named),
        "splits" => get(splits, splits_named),
        "tasks" => post(tasks, tasks_named),
        "num_tasks" => post(num_tasks, num_tasks_named),
        "task" => post(task, task_named),
        "task_range" => post(task_range, task_range_named),
        "prompt" => get(prompt, prompt_named),
        "messages" => get(messages, messages_named),
        "call" => post(call, call_named),
    }
    router
}

type Answer = Result<Response, HttpError>;

fn respond(answer: Answer) -> Response {
    answer.unwrap_or_else(IntoResponse::into_response)
}

fn check_env(env: &str) -> Result<(), HttpError> {
    if env == ENV_NAME {
        return Ok(());
    }
    Err(HttpError::new(
        404,
        format!("unknown environment {env:?}: this server has one, {ENV_NAME:?}"),
    ))
}

/// Defines `$named(Path(env), ...)` as `$bare(...)` after checking the environment's name.
macro_rules! named {
    ($named:ident => $bare:ident($($arg:ident: $ty:ty),*)) => {
        async fn $named(Path(env): Path<String>, $($arg: $ty),*) -> Response {
            match check_env(&env) {
                Ok(()) => $bare($($arg),*).await,
                Err(e) => e.into_response(),
            }
        }
    };
}

named!(tools_named => tools());
named!(task_tools_named => task_tools(s: State<Arc<Shared>>, h: HeaderMap));
named!(splits_named => splits());
named!(tasks_named => tasks(s: State<Arc<Shared>>, b: Body));
named!(num_tasks_named => num_tasks(s: State<Arc<Shared>>, b: Body));
named!(task_named => task(s: State<Arc<Shared>>, b: Body));
named!(task_range_named => task_range(s: State<Arc<Shared>>, b: Body));
named!(prompt_named => prompt(s: State<Arc<Shared>>, h: HeaderMap));
named!(messages_named => messages(s: State<Arc<Shared>>, h: HeaderMap));
named!(call_named => call(s: State<Arc<Shared>>, h: HeaderMap, b: Body));

fn split_type(split: Split) -> &'static str {
    match split {
        Split::Train => "train",
        Split::Heldout => "validation",
        Split::HeldoutFamily => "test",
    }
}

fn parse_split(name: &str) -> Result<Split, HttpError> {
    name.parse()
        .map_err(|e| HttpError::new(400, format!("field split: {e}")))
}

fn task_spec(task: &Task) -> Value {
    json!({
        "task_id": task.id,
        "family": task.family,
        "split": task.split.as_str(),
        "fingerprint": task.fingerprint(),
    })
}

/// The request body as `T`, read under the read time-out.
async fn body<T: serde::de::DeserializeOwned>(shared: &Shared, body: Body) -> Result<T, HttpError> {
    episodes::parse(&episodes::body(shared, body).await?)
}

/// The session a request names in `X-Session-ID`.
fn session_id(headers: &HeaderMap) -> Result<String, HttpError> {
    headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .ok_or_else(|| HttpError::new(400, "X-Session-ID header is required"))
}

/// The episode of the session a request names (touching the session).
fn session_episode(shared: &Shared, headers: &HeaderMap) -> Result<String, HttpError> {
    let sid = session_id(headers)?;
    let mut sessions = lock(&shared.ors);
    let session = sessions.get_mut(&sid).ok_or_else(|| {
        HttpError::new(
            404,
            format!(
                "unknown session {sid:?}: never created here, deleted, or closed after {} s \
                 without a request",
                shared.options.idle_timeout.as_secs_f64()
            ),
        )
    })?;
    session.last_used = Instant::now();
    session.episode.clone().ok_or_else(|| {
        HttpError::new(
            404,
            format!("session {sid:?} has no task: POST /create first"),
        )
    })
}

fn json(value: Value) -> Answer {
    Ok(axum::Json(value).into_response())
}

/// A Server-Sent Events body of `(event, data)` pairs.
fn sse(events: &[(&str, String)]) -> Response {
    let mut text = String::new();
    for (event, data) in events {
        text.push_str("event: ");
        text.push_str(event);
        text.push('\n');
        for line in data.split('\n') {
            text.push_str("data: ");
            text.push_str(line);
            text.push('\n');
        }
        text.push('\n');
    }
    let mut response = Response::new(Body::from(text));
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

fn fresh_id(prefix: &str) -> String {
    format!(
        "{prefix}-{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

// ---- routes ----

async fn version() -> Response {
    axum::Json(json!({"version": env!("CARGO_PKG_VERSION"), "build_sha": null})).into_response()
}

async fn ping(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    respond((|| {
        let sid = session_id(&headers)?;
        let mut sessions = lock(&shared.ors);
        match sessions.get_mut(&sid) {
            Some(session) if session.episode.is_some() => {
                session.last_used = Instant::now();
                json(json!({"status": "ok"}))
            }
            _ => Err(HttpError::new(404, "Active environment not found")),
        }
    })())
}

async fn create_session(State(shared): State<Arc<Shared>>) -> Response {
    let sid = fresh_id("ors");
    lock(&shared.ors).insert(sid.clone(), Session::new(false));
    sse(&[("task_id", sid), ("end", String::new())])
}

async fn delete_session(headers: HeaderMap) -> Response {
    respond(session_id(&headers).and_then(|sid| json(json!({ "sid": sid }))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    env_name: Option<String>,
    task_spec: Option<Value>,
    split: Option<String>,
    index: Option<i64>,
    toolset_name: Option<String>,
}

/// The task a `/create` names.
fn created_task(
    shared: &Shared,
    create: &CreateSession,
) -> Result<(String, Option<u32>), HttpError> {
    if let Some(env) = &create.env_name {
        check_env(env)?;
    }
    if let Some(toolset) = &create.toolset_name {
        return Err(HttpError::new(
            400,
            format!("field toolset_name: unknown toolset {toolset:?}; this environment has none"),
        ));
    }
    match (&create.task_spec, &create.split, create.index) {
        (Some(spec), None, None) => {
            let id = spec.get("task_id").and_then(Value::as_str).ok_or_else(|| {
                HttpError::new(400, "field task_spec.task_id: a string is required")
            })?;
            let max_turns = spec
                .get("max_turns")
                .and_then(Value::as_u64)
                .map(|t| t.min(u32::MAX as u64) as u32);
            Ok((id.to_string(), max_turns))
        }
        (None, Some(split), Some(index)) => {
            let tasks = shared.tasks.split(parse_split(split)?);
            let task = usize::try_from(index)
                .ok()
                .and_then(|i| tasks.get(i))
                .ok_or_else(|| {
                    HttpError::new(
                        400,
                        format!(
                            "field index: Invalid index {index} (split {split} has {} tasks)",
                            tasks.len()
                        ),
                    )
                })?;
            Ok((task.id.clone(), None))
        }
        _ => Err(HttpError::new(
            400,
            "Provide either task_spec or both split and index, not both/neither",
        )),
    }
}

async fn create(State(shared): State<Arc<Shared>>, headers: HeaderMap, request: Body) -> Response {
    respond(
        async {
            let sid = session_id(&headers)?;
            let create: CreateSession = body(&shared, request).await?;
            let (task_id, max_turns) = created_task(&shared, &create)?;
            {
                let sessions = lock(&shared.ors);
                match sessions.get(&sid) {
                    None => {
                        return Err(HttpError::new(
                            404,
                            format!("unknown session {sid:?}: POST /create_session first"),
                        ))
                    }
                    Some(s) if s.episode.is_some() => {
                        return Err(HttpError::new(400, "Session already exists"))
                    }
                    Some(_) => {}
                }
            }
            let request = StartRequest {
                task_id,
                seed: 0,
                max_turns,
                reward: None,
            };
            let started = blocking(&shared, move |s| episodes::start(s, request)).await?;
            let mut sessions = lock(&shared.ors);
            match sessions.get_mut(&sid) {
                Some(session) => {
                    session.episode = Some(started.episode_id);
                    session.last_used = Instant::now();
                }
                None => {
                    // Deleted meanwhile: the episode goes with it.
                    drop(sessions);
                    let _ = episodes::close(&shared, &started.episode_id);
                    return Err(HttpError::new(404, format!("session {sid:?} was deleted")));
                }
            }
            json(json!({ "sid": sid }))
        }
        .await,
    )
}

async fn delete(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    respond(
        async {
            let sid = session_id(&headers)?;
            let removed = lock(&shared.ors).remove(&sid);
            if let Some(id) = removed.and_then(|s| s.episode) {
                let _ = blocking(&shared, move |s| episodes::close(s, &id)).await;
            }
            json(json!({ "sid": sid }))
        }
        .await,
    )
}

fn tools_value() -> Value {
    json!({
        "tools": crate::types::Tool::list_with_schemas("input_schema"),
        "terminal_tool": null,
        "supports_score_group": false,
        "message_block_types": ["text"],
    })
}

async fn tools() -> Response {
    axum::Json(tools_value()).into_response()
}

async fn task_tools(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    respond(session_episode(&shared, &headers).and_then(|_| json(tools_value())))
}

async fn splits() -> Response {
    let splits: Vec<Value> = Split::ALL
        .iter()
        .map(|s| json!({"name": s.as_str(), "type": split_type(*s)}))
        .collect();
    axum::Json(splits).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitBody {
    split: String,
}

async fn tasks(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    respond(
        async {
            let query: SplitBody = body(&shared, request).await?;
            let tasks: Vec<Value> = shared
                .tasks
                .split(parse_split(&query.split)?)
                .iter()
                .map(|t| task_spec(t))
                .collect();
            json(json!({"tasks": tasks, "env_name": ENV_NAME}))
        }
        .await,
    )
}

async fn num_tasks(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    respond(
        async {
            let query: SplitBody = body(&shared, request).await?;
            let n = shared.tasks.split(parse_split(&query.split)?).len();
            json(json!({ "num_tasks": n }))
        }
        .await,
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskBody {
    split: String,
    index: i64,
}

async fn task(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    respond(
        async {
            let query: TaskBody = body(&shared, request).await?;
            let tasks = shared.tasks.split(parse_split(&query.split)?);
            let task = usize::try_from(query.index)
                .ok()
                .and_then(|i| tasks.get(i))
                .ok_or_else(|| {
                    HttpError::new(400, format!("field index: Invalid index {}", query.index))
                })?;
            json(json!({"task": task_spec(task), "env_name": ENV_NAME}))
        }
        .await,
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeBody {
    split: String,
    start: Option<i64>,
    stop: Option<i64>,
}

/// Python's `range(start, stop)` over `n` items, negative indices from the end, clamped.
fn python_range(n: usize, start: Option<i64>, stop: Option<i64>) -> std::ops::Range<usize> {
    let at = |i: i64| -> usize {
        let n = n as i64;
        (if i < 0 { (n + i).max(0) } else { i.min(n) }) as usize
    };
    let start = start.map_or(0, at);
    let stop = stop.map_or(n, at);
    start..stop.max(start)
}

async fn task_range(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    respond(
        async {
            let query: RangeBody = body(&shared, request).await?;
            let tasks = shared.tasks.split(parse_split(&query.split)?);
            let range = python_range(tasks.len(), query.start, query.stop);
            let tasks: Vec<Value> = tasks[range].iter().map(|t| task_spec(t)).collect();
            json(json!({"tasks": tasks, "env_name": ENV_NAME}))
        }
        .await,
    )
}

/// The task's prompt: a text block of the first observation, the observation itself in its
/// `detail` (files, candidates) for clients that act on structure.
fn prompt_block(shared: &Shared, headers: &HeaderMap) -> Result<Value, HttpError> {
    let episode = session_episode(shared, headers)?;
    let (_, first, _) = episodes::episode_info(shared, &episode)?;
    Ok(json!({
        "type": "text",
        "text": render_text(&first),
        "detail": { "observation": serde_json::to_value(&first).unwrap_or(Value::Null) },
    }))
}

async fn prompt(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    respond(prompt_block(&shared, &headers).and_then(|block| json(json!([block]))))
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    respond(
        prompt_block(&shared, &headers)
            .and_then(|block| json(json!([{"role": "user", "blocks": [block]}]))),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallBody {
    name: String,
    #[serde(default)]
    input: Value,
    /// The client's resume token: results are not kept for resuming, so a call that names one
    /// is answered with an SSE `error` (the client raises; nothing is applied twice).
    task_id: Option<String>,
}

async fn call(State(shared): State<Arc<Shared>>, headers: HeaderMap, request: Body) -> Response {
    respond(
        async {
            let episode = session_episode(&shared, &headers)?;
            let call: ToolCallBody = body(&shared, request).await?;
            let call_id = fresh_id("call");
            if let Some(token) = call.task_id {
                return Ok(sse(&[("error", format!("unknown task_id {token:?}: calls are not resumable here"))]));
            }
            let (state, _, _) = episodes::episode_info(&shared, &episode)?;
            if state.done {
                let output = json!({"ok": false, "error": "the episode is over: no call is \
                                    applied after submit or the turn limit", "reason": "episode_finished"});
                return Ok(sse(&[("task_id", call_id), ("end", output.to_string())]));
            }
            let arguments = if call.input.is_null() { json!({}) } else { call.input };
            let request = StepRequest {
                action: Action::Call(ToolCall {
                    name: call.name,
                    arguments,
                }),
                turn: None,
            };
            let id = episode.clone();
            match blocking(&shared, move |s| episodes::step(s, &id, request)).await {
                Ok(answer) => {
                    let step = &answer.step;
                    let mut metadata = json!({
                        "observation": serde_json::to_value(&step.observation).unwrap_or(Value::Null),
                        "episode_id": answer.episode_id,
                        "turn": answer.turn,
                    });
                    let reward = step.reward.as_ref().filter(|_| step.done);
                    if let Some(reward) = reward {
                        metadata["verdict"] = serde_json::to_value(reward).unwrap_or(Value::Null);
                    }
                    let output = json!({"ok": true, "output": {
                        "blocks": [{"type": "text", "text": render_text(&step.observation)}],
                        "metadata": metadata,
                        "reward": reward.map(|r| r.score),
                        "finished": step.done,
                    }});
                    Ok(sse(&[("task_id", call_id), ("end", output.to_string())]))
                }
                // The gym failed: an error to the client, never a made-up reward.
                Err(e) if e.status >= 500 => Ok(sse(&[("task_id", call_id), ("error", e.message)])),
                Err(e) => Err(e),
            }
        }
        .await,
    )
}
