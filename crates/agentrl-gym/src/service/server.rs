//! `agentrl gym serve`'s server: the gym (tasks, tools, sandbox, verifier, tamper check) over
//! HTTP/JSON, so episodes run on machines other than the trainer's, in three protocols on one
//! port: the native one (`/v1/…`, [`super::wire`]), OpenEnv (`/openenv/…`, [`super::openenv`])
//! and the Open Reward Standard (ORS, at the root, [`super::ors`]).
//!
//! Where it sits: at the top of the service. A [`GymServer`] holds one task set, one sandbox
//! executor and one outcome cache, like a trainer's in-process gym, and the episode table of
//! [`super::episodes`], which every protocol starts, steps and closes episodes through (its
//! bounds and reaper are there). This module wires the routes onto one port, checks the key,
//! and runs the reaper. Routes and bodies are in `docs/GYM_SERVICE.md`; the HTTP stack
//! (time-outs, connection bound, SIGTERM) is [`super::http`]. Nothing a request sends can
//! panic a thread: bodies are parsed into the protocol's types and every lookup is checked.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use super::episodes::{
    self, blocking, body, close, close_all, episode_state, json_response, parse, start, step,
    GymServeOptions, HttpError, Shared,
};
use super::http;
use super::wire::{Health, Load, StartRequest, StepRequest, TaskInfo, TaskList, PROTOCOL_VERSION};
use crate::sandbox::Executor;
use crate::task::{Split, TaskSet};

/// A running gym server; [`GymServer::shutdown`] (or drop) stops it.
pub struct GymServer {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    server: Option<http::Running>,
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
        let shared = Arc::new(Shared::new(tasks, executor, options));
        let app = router(shared.clone());
        let reaper_shared = shared.clone();
        let server = http::Running::start(
            "gym serve",
            addr,
            app,
            shared.options.http.clone(),
            shared.options.http_threads.max(1),
            move |stop| reaper(reaper_shared, stop),
        )
        .context("gym serve")?;
        Ok(Self {
            addr: server.addr(),
            shared,
            server: Some(server),
        })
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The figures of `GET /v1/load`.
    pub fn load(&self) -> Load {
        episodes::load(&self.shared)
    }

    /// Blocks until SIGTERM or SIGINT, then shuts down gracefully (see
    /// [`GymServer::shutdown`]).
    pub fn wait_for_signal(mut self) -> anyhow::Result<()> {
        if let Some(server) = &self.server {
            server.wait_for_signal()?;
        }
        self.stop();
        Ok(())
    }

    /// Stops taking connections, lets live requests finish (for at most the stack's grace
    /// time), then closes every episode: their workspaces are removed.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        close_all(&self.shared);
    }
}

impl Drop for GymServer {
    fn drop(&mut self) {
        self.stop();
    }
}

type Answer = Result<(u16, String), HttpError>;

fn answer(answer: Answer) -> Response {
    match answer {
        Ok((status, body)) => {
            json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
        }
        Err(e) => e.into_response(),
    }
}

fn ok(value: &impl Serialize) -> Answer {
    with_status(200, value)
}

fn with_status(status: u16, value: &impl Serialize) -> Answer {
    serde_json::to_string(value)
        .map(|body| (status, body))
        .map_err(|e| HttpError::new(500, format!("writing the answer: {e}")))
}

/// The token rule, before any route: `Authorization: Bearer KEY`, or ORS's `X-API-Key: KEY`;
/// under OpenEnv's capability prefix `/openenv/k/KEY/…` the key in the path (for OpenEnv tools
/// that send no header, such as `openenv validate --url`).
async fn check_key(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let rule = &shared.options.access;
    if rule.requires_key() {
        let allowed = match request.uri().path().strip_prefix(OPENENV_KEYED) {
            Some(rest) => {
                let key = rest.split('/').next().unwrap_or("");
                rule.allows(Some(&format!("Bearer {key}")))
            }
            None => super::access::allows_headers(rule, request.headers()),
        };
        if !allowed {
            return HttpError::new(
                401,
                "missing or wrong API key: send `Authorization: Bearer KEY` (or `X-API-Key: \
                 KEY`) with the server's key, or for OpenEnv use the prefix /openenv/k/KEY",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// OpenEnv's routes with the key in the path: `/openenv/k/KEY/health`, `…/ws`.
const OPENENV_KEYED: &str = "/openenv/k/";

/// Every route of the three protocols.
fn router(shared: Arc<Shared>) -> Router {
    use axum::routing::post;
    let native = Router::new()
        .route("/health", get(health))
        .route(
            "/v1/load",
            get(|State(s): State<Arc<Shared>>| async move { answer(ok(&episodes::load(&s))) }),
        )
        .route("/v1/tasks", get(tasks_route))
        .route("/v1/episodes", post(start_route))
        .route("/v1/episodes/{id}", get(state_route).delete(close_route))
        .route("/v1/episodes/{id}/step", post(step_route));
    native
        .nest("/openenv", super::openenv::router())
        .nest("/openenv/k/{key}", super::openenv::router())
        .merge(super::ors::router())
        .fallback(|request: Request| async move {
            HttpError::new(
                404,
                format!("no route {} {}", request.method(), request.uri().path()),
            )
        })
        .method_not_allowed_fallback(|request: Request| async move {
            HttpError::new(
                405,
                format!(
                    "{} is not a method of {}",
                    request.method(),
                    request.uri().path()
                ),
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            check_key,
        ))
        .with_state(shared)
}

async fn health() -> Response {
    answer(ok(&Health {
        status: "ok".into(),
        protocol: PROTOCOL_VERSION,
        server: format!("agentrl-gym {}", env!("CARGO_PKG_VERSION")),
    }))
}

async fn tasks_route(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    answer(list_tasks(&shared, query.as_deref().unwrap_or("")))
}

async fn start_route(State(shared): State<Arc<Shared>>, request: Body) -> Response {
    let result = async {
        let bytes = body(&shared, request).await?;
        let request: StartRequest = parse(&bytes)?;
        blocking(&shared, move |s| start(s, request)).await
    }
    .await;
    answer(result.and_then(|r| with_status(201, &r)))
}

async fn step_route(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    request: Body,
) -> Response {
    let result = async {
        let bytes = body(&shared, request).await?;
        let request: StepRequest = parse(&bytes)?;
        blocking(&shared, move |s| step(s, &id, request)).await
    }
    .await;
    answer(result.and_then(|r| ok(&r)))
}

async fn state_route(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    answer(episode_state(&shared, &id).and_then(|s| ok(&s)))
}

async fn close_route(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    answer(close(&shared, &id).and_then(|turn| {
        ok(&serde_json::json!({ "episode_id": id, "closed": true, "turn": turn }))
    }))
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

/// The reaper: every quarter of the idle time-out (within 20 ms..5 s), [`episodes::reap`].
async fn reaper(shared: Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let tick =
        (shared.options.idle_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = http::stopped(&mut stop) => return,
        }
        let shared = shared.clone();
        let _ = tokio::task::spawn_blocking(move || episodes::reap(&shared)).await;
    }
}
