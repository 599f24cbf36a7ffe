//! OpenEnv over the gym: `agentrl gym serve`'s routes under `/openenv`, for OpenEnv's clients
//! (`GenericEnvClient`, `MCPToolClient`; PyPI `openenv`), `openenv validate --url`, TRL's and
//! verifiers' OpenEnv paths and SkyRL's OpenEnv integration.
//!
//! Where it sits: routes of [`super::server`]'s router, nested under `/openenv`; every episode
//! is started, stepped and closed by the server's own functions, so the bounds, the reaper and
//! the verdicts are the native routes'. The wire formats follow `openenv` 0.10.0 (its
//! `env_server/http_server.py`, `env_client.py`, `mcp_client.py` and `cli/_validation.py`):
//! - `GET /ws`: a WebSocket, one session. Messages `{"type": "reset", "data": {...}}`,
//!   `{"type": "step", "data": ACTION}`, `{"type": "state"}`, `{"type": "close"}` and
//!   `{"type": "mcp", "data": JSON-RPC}`; answers `{"type": "observation", "data":
//!   {"observation", "reward", "done", "metadata"}}`, `{"type": "state", "data": …}` or
//!   `{"type": "error", "data": {"message", "code"}}`. A reset takes `task_id`, or `split`
//!   (default `train`) and `seed` (the task at index `seed mod n` of the split), and
//!   `max_turns`. ACTION is MCP-shaped: `{"type": "list_tools"}` or `{"type": "call_tool",
//!   "tool_name", "arguments"}`.
//! - The reward is on the final step only (`null` before); the verdict (hidden tests, tamper
//!   flag) is in that step's `metadata.verdict`, and never before it.
//! - Capacity: a session past `--max-episodes` open sessions, or a reset past the live-episode
//!   or workspace bound, is OpenEnv's `CAPACITY_REACHED` error. A session with no message for
//!   the idle time-out gets `SESSION_ERROR` and is closed (its episode too).
//! - `GET /health` (`{"status": "healthy"}`), `/metadata`, `/schema`, `/openapi.json`; `POST
//!   /mcp` (JSON-RPC 2.0: `initialize`, `tools/list`, `tools/call` with `session_id` = an
//!   episode id); the simulation-mode routes `POST /reset`, `POST /step`, `GET /state`: a reset
//!   starts an episode in the server's table and answers its id in `metadata.episode_id`, which
//!   `/step` and `/state?episode_id=` then name (it is reaped like any other when left idle).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use super::episodes::{self, blocking, json_response, lock, HttpError, Session, Shared};
use super::wire::{StartRequest, StepRequest, StepResponse};
use crate::render::render_text;
use crate::task::Split;
use crate::types::{Action, Observation, Tool, ToolCall};

// An OpenEnv session ([`Session`]): its episode, if reset. A WebSocket without
// `?session_id=` makes one for its lifetime; `openenv/session/create` (MCP over HTTP, what
// `MCPToolClient` does) makes one that a WebSocket then attaches to, closed by
// `openenv/session/close` or the reaper.

/// A new session, or `CAPACITY_REACHED` (as an [`HttpError`] 429) past `max_episodes`.
fn open_session(shared: &Shared, attached: bool) -> Result<String, HttpError> {
    let mut sessions = lock(&shared.openenv);
    let max = shared.options.max_episodes;
    if sessions.len() >= max {
        return Err(HttpError::new(
            429,
            format!(
                "CAPACITY_REACHED: the server holds its most sessions ({max}, --max-episodes): \
                 retry later"
            ),
        ));
    }
    let id = format!(
        "oe-{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    sessions.insert(id.clone(), Session::new(attached));
    Ok(id)
}

/// Removes a session and closes its episode.
async fn close_session(shared: &Arc<Shared>, id: &str) {
    let removed = lock(&shared.openenv).remove(id);
    if let Some(episode) = removed.and_then(|s| s.episode) {
        let _ = blocking(shared, move |s| episodes::close(s, &episode)).await;
    }
}

/// The session's episode (touching the session).
fn session_episode(shared: &Shared, session: &str) -> Result<Option<String>, HttpError> {
    let mut sessions = lock(&shared.openenv);
    let entry = sessions.get_mut(session).ok_or_else(|| {
        HttpError::new(
            404,
            format!("unknown session {session:?} (closed or timed out)"),
        )
    })?;
    entry.last_used = Instant::now();
    Ok(entry.episode.clone())
}

/// The routes, to nest under `/openenv`.
pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/health",
            get(|| async { axum::Json(json!({"status": "healthy"})) }),
        )
        .route("/metadata", get(metadata))
        .route("/schema", get(|| async { axum::Json(schema()) }))
        .route("/openapi.json", get(|| async { axum::Json(openapi()) }))
        .route("/mcp", post(mcp_route))
        .route("/reset", post(reset_route))
        .route("/step", post(step_route))
        .route("/state", get(state_route))
        .route("/ws", get(ws_route))
}

/// A reset's parameters (OpenEnv passes the client's keyword arguments through).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetData {
    task_id: Option<String>,
    split: Option<String>,
    seed: Option<u64>,
    max_turns: Option<u32>,
    /// OpenEnv's own reset field; episode ids are the server's, so it is not used.
    #[serde(default)]
    #[allow(dead_code)]
    episode_id: Option<String>,
}

/// The task a reset names: `task_id`, or the split's task at `seed mod n`.
fn start_request(shared: &Shared, data: ResetData) -> Result<StartRequest, HttpError> {
    let seed = data.seed.unwrap_or(0);
    let task_id = match data.task_id {
        Some(id) => id,
        None => {
            let split: Split = data
                .split
                .as_deref()
                .unwrap_or("train")
                .parse()
                .map_err(|e| HttpError::new(400, format!("field split: {e}")))?;
            let tasks = shared.tasks.split(split);
            if tasks.is_empty() {
                return Err(HttpError::new(
                    404,
                    format!("field split: the server has no {split} task"),
                ));
            }
            tasks[(seed % tasks.len() as u64) as usize].id.clone()
        }
    };
    Ok(StartRequest {
        task_id,
        seed,
        max_turns: data.max_turns,
        reward: None,
    })
}

/// An observation as OpenEnv carries it: the gym's observation, with its text.
pub(crate) fn observation_value(observation: &Observation) -> Value {
    let mut value = serde_json::to_value(observation).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("text".into(), Value::String(render_text(observation)));
    }
    value
}

/// `{"observation", "reward", "done", "metadata"}` after a reset.
fn reset_payload(id: &str, started: &super::wire::StartResponse, max_turns: u32) -> Value {
    json!({
        "observation": observation_value(&started.observation),
        "reward": null,
        "done": false,
        "metadata": {
            "episode_id": id,
            "task_id": started.task_id,
            "seed": started.seed,
            "turn": 0,
            "max_turns": max_turns,
        },
    })
}

/// `{"observation", "reward", "done", "metadata"}` after a tool call: the reward and the
/// verdict only once the episode is over.
fn step_payload(tool: &str, answer: &StepResponse) -> Value {
    let step = &answer.step;
    let mut metadata = json!({ "episode_id": answer.episode_id, "turn": answer.turn });
    if let Some(reward) = step.reward.as_ref().filter(|_| step.done) {
        metadata["verdict"] = serde_json::to_value(reward).unwrap_or(Value::Null);
    }
    json!({
        "observation": {
            "tool_name": tool,
            "result": {
                "data": serde_json::to_value(&step.observation).unwrap_or(Value::Null),
                "text": render_text(&step.observation),
            },
            "error": null,
        },
        "reward": step.reward.as_ref().filter(|_| step.done).map(|r| r.score),
        "done": step.done,
        "metadata": metadata,
    })
}

fn tools_payload() -> Value {
    json!({
        "observation": { "tools": Tool::list_with_schemas("input_schema") },
        "reward": null,
        "done": false,
    })
}

/// An OpenEnv action: `list_tools`, or a `call_tool` that becomes the gym's action.
enum OpenEnvAction {
    ListTools,
    Call(String, Value),
}

fn parse_action(data: &Value) -> Result<OpenEnvAction, HttpError> {
    let kind = data.get("type").and_then(Value::as_str);
    // `type` defaults to `call_tool`, as in OpenEnv's `CallToolAction` (a model writing to
    // that schema may leave it out).
    let kind = kind.or_else(|| data.get("tool_name").map(|_| "call_tool"));
    match kind {
        Some("list_tools") => Ok(OpenEnvAction::ListTools),
        Some("call_tool") => {
            let name = data
                .get("tool_name")
                .and_then(Value::as_str)
                .ok_or_else(|| HttpError::new(400, "field tool_name: a string is required"))?;
            let arguments = data.get("arguments").cloned().unwrap_or(json!({}));
            Ok(OpenEnvAction::Call(name.to_string(), arguments))
        }
        other => Err(HttpError::new(
            400,
            format!(
                "field type: {other:?} is not an action; send {{\"type\": \"list_tools\"}} or \
                 {{\"type\": \"call_tool\", \"tool_name\": ..., \"arguments\": {{...}}}}"
            ),
        )),
    }
}

/// Runs one OpenEnv action on episode `id`: its observation payload.
async fn act(shared: &Arc<Shared>, id: &str, action: OpenEnvAction) -> Result<Value, HttpError> {
    match action {
        OpenEnvAction::ListTools => Ok(tools_payload()),
        OpenEnvAction::Call(name, arguments) => {
            let id = id.to_string();
            let tool = name.clone();
            let answer = blocking(shared, move |s| {
                episodes::step(
                    s,
                    &id,
                    StepRequest {
                        action: Action::Call(ToolCall { name, arguments }),
                        turn: None,
                    },
                )
            })
            .await?;
            Ok(step_payload(&tool, &answer))
        }
    }
}

/// Starts the episode a reset names: its id and its payload.
async fn reset(shared: &Arc<Shared>, data: ResetData) -> Result<(String, Value), HttpError> {
    let request = start_request(shared, data)?;
    let started = blocking(shared, move |s| episodes::start(s, request)).await?;
    let (_, _, max_turns) = episodes::episode_info(shared, &started.episode_id)?;
    let payload = reset_payload(&started.episode_id, &started, max_turns);
    Ok((started.episode_id, payload))
}

/// OpenEnv's state: `episode_id` and `step_count`, and the gym's own fields.
fn state(shared: &Shared, id: Option<&str>) -> Result<Value, HttpError> {
    let Some(id) = id else {
        return Ok(json!({ "episode_id": null, "step_count": 0 }));
    };
    let (state, _, max_turns) = episodes::episode_info(shared, id)?;
    Ok(json!({
        "episode_id": state.episode_id,
        "step_count": state.turn,
        "task_id": state.task_id,
        "seed": state.seed,
        "done": state.done,
        "max_turns": max_turns,
        "reward": state.reward.as_ref().map(|r| r.score),
    }))
}

/// OpenEnv's error code for an HTTP error of the gym.
fn error_code(e: &HttpError) -> &'static str {
    match e.status {
        429 => "CAPACITY_REACHED",
        503 => "SESSION_ERROR",
        400..=499 => "VALIDATION_ERROR",
        _ => "EXECUTION_ERROR",
    }
}

fn error_frame(e: &HttpError) -> Value {
    json!({ "type": "error", "data": { "message": e.message, "code": error_code(e) } })
}

// ---- HTTP routes ----

async fn metadata(State(shared): State<Arc<Shared>>) -> Response {
    let splits: Vec<&str> = Split::ALL.iter().map(|s| s.as_str()).collect();
    axum::Json(json!({
        "name": "agentrl-bugfix",
        "description": "The agentrl BugFix gym: fix a bug in a small Python module with the \
                        tools read, test, edit, submit (and exploit, which tampers with the \
                        public tests); hidden tests and a tamper check decide the reward on \
                        submit.",
        "version": env!("CARGO_PKG_VERSION"),
        "tasks": shared.tasks.tasks().len(),
        "splits": splits,
        "tools": Tool::NAMES,
        "max_concurrent_envs": shared.options.max_episodes,
    }))
    .into_response()
}

fn schema() -> Value {
    json!({
        // Titled as OpenEnv's MCP action, so frameworks that special-case it (verifiers'
        // OpenEnvTaskset) hand a model the tool list with it.
        "action": {
            "title": "CallToolAction",
            "description": "An MCP-shaped action: list the tools, or call one.",
            "oneOf": [
                {"type": "object", "properties": {"type": {"const": "list_tools"}},
                 "required": ["type"]},
                {"type": "object", "properties": {
                    "type": {"const": "call_tool"},
                    "tool_name": {"type": "string", "enum": Tool::NAMES},
                    "arguments": {"type": "object"}},
                 "required": ["type", "tool_name"]}
            ]
        },
        "observation": {
            "title": "BugFixObservation",
            "type": "object",
            "description": "After a reset: the task (kind, task_id, prompt, files, candidates, \
                            text). After list_tools: tools. After call_tool: tool_name, \
                            result {data: the gym's observation, text}, error.",
            "properties": {
                "kind": {"type": "string"},
                "text": {"type": "string"},
                "tools": {"type": "array"},
                "tool_name": {"type": "string"},
                "result": {"type": "object"},
                "error": {}
            }
        },
        "state": {
            "title": "BugFixState",
            "type": "object",
            "properties": {
                "episode_id": {"type": ["string", "null"]},
                "step_count": {"type": "integer"},
                "task_id": {"type": "string"},
                "done": {"type": "boolean"},
                "max_turns": {"type": "integer"},
                "reward": {"type": ["number", "null"]}
            }
        },
        "tools": Tool::list_with_schemas("input_schema"),
    })
}

fn openapi() -> Value {
    let json_body = |description: &str| {
        json!({"description": description,
               "content": {"application/json": {"schema": {"type": "object"}}}})
    };
    let op = |summary: &str| json!({"summary": summary, "responses": {"200": json_body("OK")}});
    let with_body = |summary: &str| {
        json!({"summary": summary, "requestBody": json_body("JSON object"),
               "responses": {"200": json_body("OK")}})
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agentrl gym serve: OpenEnv",
            "version": "1.0.0",
            "description": "The BugFix gym in OpenEnv's HTTP/1.x profile (docs/GYM_SERVICE.md)."
        },
        "paths": {
            "/health": {"get": op("Health")},
            "/metadata": {"get": op("Name, description, tasks, tools")},
            "/schema": {"get": op("Action, observation and state schemas")},
            "/reset": {"post": with_body("Start an episode (task_id, or split and seed; max_turns)")},
            "/step": {"post": with_body("Apply an action to the episode named by episode_id")},
            "/state": {"get": op("The state of the episode named by ?episode_id=")},
            "/mcp": {"post": with_body("MCP JSON-RPC: initialize, tools/list, tools/call")},
            "/ws": {"get": op("WebSocket session: reset, step, state, close, mcp")}
        }
    })
}

async fn reset_route(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    let result = async {
        let bytes = episodes::body(&shared, request).await?;
        let data: ResetData = if bytes.iter().all(u8::is_ascii_whitespace) {
            ResetData::default()
        } else {
            episodes::parse(&bytes)?
        };
        reset(&shared, data).await
    }
    .await;
    match result {
        Ok((_, payload)) => axum::Json(payload).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct StepBody {
    action: Value,
    episode_id: Option<String>,
    /// OpenEnv's optional fields; a step's time is bounded by the task's sandbox limits.
    #[allow(dead_code)]
    timeout_s: Option<f64>,
    #[allow(dead_code)]
    request_id: Option<String>,
}

async fn step_route(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    let result = async {
        let bytes = episodes::body(&shared, request).await?;
        let body: StepBody = episodes::parse(&bytes)?;
        let id = body.episode_id.ok_or_else(|| {
            HttpError::new(
                400,
                "field episode_id: the stateless /step needs the episode_id that /reset \
                 answered in metadata (or use the WebSocket /ws, one session per episode)",
            )
        })?;
        act(&shared, &id, parse_action(&body.action)?).await
    }
    .await;
    match result {
        Ok(payload) => axum::Json(payload).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct StateQuery {
    episode_id: Option<String>,
}

async fn state_route(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<StateQuery>,
) -> Response {
    match state(&shared, query.episode_id.as_deref()) {
        Ok(state) => axum::Json(state).into_response(),
        Err(e) => e.into_response(),
    }
}

// ---- MCP (JSON-RPC 2.0) ----

fn rpc_error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// One JSON-RPC request; `session` is the WebSocket's session, if any. `tools/call` names its
/// episode by `params.session_id`: a session (its episode) or an episode id (a stateless
/// `/reset`'s).
async fn mcp(shared: &Arc<Shared>, request: &Value, session: Option<&str>) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return rpc_error(
            id,
            -32600,
            "Invalid Request: a JSON-RPC 2.0 object with a method",
        );
    };
    let params = request.get("params").cloned().unwrap_or(json!({}));
    let named = params
        .get("session_id")
        .and_then(Value::as_str)
        .or(session)
        .map(str::to_string);
    let result = match method {
        "initialize" => json!({
            "protocolVersion": "2025-03-26",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "agentrl-bugfix", "version": env!("CARGO_PKG_VERSION")}
        }),
        "tools/list" => json!({ "tools": Tool::list_with_schemas("inputSchema") }),
        "openenv/session/create" => match open_session(shared, false) {
            Ok(session_id) => json!({ "session_id": session_id }),
            Err(e) => return rpc_error(id, -32000, e.message),
        },
        "openenv/session/close" => {
            let Some(named) = named else {
                return rpc_error(id, -32602, "params.session_id: the session to close");
            };
            close_session(shared, &named).await;
            json!({ "session_id": named, "closed": true })
        }
        "tools/call" => {
            let Some(name) = params.get("name").and_then(Value::as_str) else {
                return rpc_error(id, -32602, "params.name: the tool's name is required");
            };
            let Some(named) = named else {
                return rpc_error(
                    id,
                    -32602,
                    "params.session_id: name the session (or the episode_id a /reset answered)",
                );
            };
            let episode = match session_episode(shared, &named) {
                Ok(Some(episode)) => episode,
                Ok(None) => {
                    return rpc_error(id, -32000, "the session has no episode: reset first")
                }
                // Not a session: an episode id.
                Err(_) => named,
            };
            let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
            match act(
                shared,
                &episode,
                OpenEnvAction::Call(name.into(), arguments),
            )
            .await
            {
                Ok(payload) => {
                    let result = &payload["observation"]["result"];
                    json!({
                        "content": [{"type": "text", "text": result["text"]}],
                        "structuredContent": result["data"],
                        "data": result["data"],
                        "isError": false,
                        "done": payload["done"],
                        "reward": payload["reward"],
                        "metadata": payload["metadata"],
                    })
                }
                Err(e) => return rpc_error(id, -32000, e.message),
            }
        }
        other => return rpc_error(id, -32601, format!("Method not found: {other}")),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

async fn mcp_route(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    let answer = match episodes::body(&shared, request).await {
        Err(e) => return e.into_response(),
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(request) => mcp(&shared, &request, None).await,
            Err(e) => rpc_error(Value::Null, -32700, format!("Parse error: {e}")),
        },
    };
    json_response(StatusCode::OK, answer.to_string())
}

// ---- WebSocket sessions ----

#[derive(Deserialize)]
struct WsQuery {
    session_id: Option<String>,
}

async fn ws_route(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<WsQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.max_message_size(episodes::MAX_BODY)
        .on_upgrade(move |socket| session(shared, socket, query.session_id))
}

async fn send(socket: &mut WebSocket, frame: &Value) -> bool {
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .is_ok()
}

/// Attaches to session `id` (made by `openenv/session/create`).
fn attach(shared: &Shared, id: &str) -> Result<(), HttpError> {
    let mut sessions = lock(&shared.openenv);
    match sessions.get_mut(id) {
        None => Err(HttpError::new(404, format!("Unknown session_id: {id}"))),
        Some(s) if s.attached => Err(HttpError::new(
            400,
            format!("Session {id} already has an attached WebSocket"),
        )),
        Some(s) => {
            s.attached = true;
            Ok(())
        }
    }
}

/// One WebSocket: one session, one episode at a time. A session of its own is closed with
/// the socket; an attached one is detached (its owner closes it).
async fn session(shared: Arc<Shared>, mut socket: WebSocket, attach_to: Option<String>) {
    let (id, owned) = match attach_to {
        Some(id) => match attach(&shared, &id) {
            Ok(()) => (id, false),
            Err(e) => {
                send(&mut socket, &error_frame(&e)).await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
        },
        None => match open_session(&shared, true) {
            Ok(id) => (id, true),
            Err(e) => {
                let max = shared.options.max_episodes;
                let frame = json!({"type": "error", "data": {
                    "message": e.message, "code": "CAPACITY_REACHED",
                    "active_sessions": max, "max_sessions": max}});
                send(&mut socket, &frame).await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
        },
    };
    let idle = shared.options.idle_timeout;
    loop {
        let message = match tokio::time::timeout(idle, socket.recv()).await {
            Err(_) => {
                let frame = json!({"type": "error", "data": {
                    "message": format!("no message for {} s: the session is closed",
                                       idle.as_secs_f64()),
                    "code": "SESSION_ERROR"}});
                send(&mut socket, &frame).await;
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
            Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(message))) => message,
        };
        let text = match message {
            Message::Text(text) => text.to_string(),
            Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        let frame = match serde_json::from_str::<Value>(&text) {
            Err(e) => json!({"type": "error", "data": {
                "message": format!("Invalid JSON: {e}"), "code": "INVALID_JSON"}}),
            Ok(message) => match message.get("type").and_then(Value::as_str) {
                Some("close") => break,
                Some(kind) => on_message(&shared, kind, &message, &id).await,
                None => json!({"type": "error", "data": {
                    "message": "field type: reset, step, state, close or mcp",
                    "code": "UNKNOWN_TYPE"}}),
            },
        };
        if !send(&mut socket, &frame).await {
            break;
        }
    }
    if owned {
        close_session(&shared, &id).await;
    } else if let Some(s) = lock(&shared.openenv).get_mut(&id) {
        s.attached = false;
        s.last_used = Instant::now();
    }
}

/// The answer frame to one message of session `id`.
async fn on_message(shared: &Arc<Shared>, kind: &str, message: &Value, id: &str) -> Value {
    let data = message.get("data").cloned().unwrap_or(json!({}));
    let result = match kind {
        "reset" => {
            async {
                let data: ResetData = serde_json::from_value(data)
                    .map_err(|e| HttpError::new(400, format!("reset data: {e}")))?;
                let previous = lock(&shared.openenv)
                    .get_mut(id)
                    .and_then(|s| s.episode.take());
                if let Some(previous) = previous {
                    let _ = blocking(shared, move |s| episodes::close(s, &previous)).await;
                }
                let (episode, payload) = reset(shared, data).await?;
                match lock(&shared.openenv).get_mut(id) {
                    Some(s) => s.episode = Some(episode),
                    None => {
                        let _ = episodes::close(shared, &episode);
                        return Err(HttpError::new(404, "the session was closed"));
                    }
                }
                Ok(json!({"type": "observation", "data": payload}))
            }
            .await
        }
        "step" => {
            async {
                let action = parse_action(&data)?;
                // The tool list needs no episode (verifiers asks for it before the reset).
                let payload = match (action, session_episode(shared, id)?) {
                    (OpenEnvAction::ListTools, _) => tools_payload(),
                    (action, Some(episode)) => act(shared, &episode, action).await?,
                    (_, None) => return Err(HttpError::new(400, "no episode: send a reset first")),
                };
                Ok(json!({"type": "observation", "data": payload}))
            }
            .await
        }
        "state" => session_episode(shared, id)
            .and_then(|episode| state(shared, episode.as_deref()))
            .map(|s| json!({"type": "state", "data": s})),
        "mcp" => Ok(json!({"type": "mcp", "data": mcp(shared, &data, Some(id)).await})),
        other => Ok(json!({"type": "error", "data": {
            "message": format!("Unknown message type: {other}"), "code": "UNKNOWN_TYPE"}})),
    };
    result.unwrap_or_else(|e| error_frame(&e))
}
