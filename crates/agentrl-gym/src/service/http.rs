//! The HTTP stack under `agentrl gym serve` (and `agentrl serve`): axum routes served by hyper
//! on a tokio runtime, with the bounds a server facing clients nobody here wrote needs.
//!
//! Where it sits: [`Running::start`] binds, builds the runtime and runs the accept loop of
//! [`serve`]; a server module ([`super::server`]) hands it an [`axum::Router`] and a
//! background task of its own (the gym's idle reaper), and calls [`Running::shutdown`] or
//! [`Running::wait_for_signal`].
//!
//! What it guarantees, and why this stack: `tiny_http`, the stack before, read request heads
//! and bodies with no time-out (a body declared and never sent held its connection and its
//! thread forever) and panicked in a worker thread when `accept` failed for want of file
//! descriptors, after which the process stayed up and answered nothing. hyper has a head
//! read time-out of its own, leaves bodies to the handler (read here under a time-out, 408
//! past it), hands upgrades (OpenEnv's WebSocket) and streaming bodies (ORS's Server-Sent
//! Events) to the handler, and with tokio one connection costs a task, not a thread, so a
//! burst of idle connections takes memory and descriptors only. axum is the routing layer the
//! tokio/hyper ecosystem keeps (path parameters, extractors, WebSockets). The accept loop is
//! ours, a few lines, for the properties no crate gives together:
//! - **Read time-out** ([`HttpLimits::read_timeout`]): a request head must arrive within it
//!   (hyper closes the connection), a body too (408, then closed); an idle keep-alive
//!   connection is closed after it as well (hyper waits for the next head under the same
//!   timer).
//! - **Bounded connections** ([`HttpLimits::max_connections`]): past the bound a connection is
//!   answered `503` with `Retry-After` at once and closed; never queued without end, never left
//!   hanging. The bound is kept below the process's descriptor limit (raised to its hard limit
//!   at start), with room for the sandbox's pipes and workspaces.
//! - **No panic on descriptor exhaustion**: an `accept` error (`EMFILE`, `ENFILE`, …) is
//!   logged and retried after a short pause; the loop never ends on it.
//! - **Graceful SIGTERM** ([`Running::wait_for_signal`]): stop accepting, let live requests
//!   finish for at most [`HttpLimits::shutdown_grace`], then return so the caller closes every
//!   episode (and its workspace).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// The HTTP stack's bounds.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// A request's head, and then its body, must arrive within this; an idle keep-alive
    /// connection is closed after it.
    pub read_timeout: Duration,
    /// Open connections at most; past it a new connection is answered 503 and closed.
    pub max_connections: usize,
    /// On shutdown, how long live requests may run before they are abandoned.
    pub shutdown_grace: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            read_timeout: Duration::from_secs(30),
            max_connections: 4096,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Descriptors kept free of connections: the sandbox's pipes, workspaces and task files.
const FD_RESERVE: u64 = 512;

/// A server running on its own runtime.
pub struct Running {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    done: Option<tokio::task::JoinHandle<()>>,
    grace: Duration,
}

impl Running {
    /// Binds `addr`, then serves `app` on a runtime of its own (its blocking pool
    /// `blocking_threads` wide, for the handlers' blocking work) beside `background`, which
    /// gets the stop signal too. `what` names the server in messages.
    pub fn start<F>(
        what: &str,
        addr: &str,
        app: Router,
        mut limits: HttpLimits,
        blocking_threads: usize,
        background: impl FnOnce(watch::Receiver<bool>) -> F,
    ) -> anyhow::Result<Self>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(8)))
            .max_blocking_threads(blocking_threads.max(1))
            .thread_name(format!("{}-http", what.replace(' ', "-")))
            .enable_all()
            .build()
            .context("starting the HTTP runtime")?;
        let std_listener =
            std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
        std_listener
            .set_nonblocking(true)
            .context("a non-blocking listener")?;
        let bound = std_listener.local_addr().context("the bound address")?;
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(std_listener).context("the listener")?
        };
        let fd_room = raise_fd_limit().saturating_sub(FD_RESERVE).max(64);
        if limits.max_connections as u64 > fd_room {
            tracing::warn!(
                "{what}: at most {fd_room} connections (the descriptor limit, less {FD_RESERVE} \
                 kept for the sandbox), not {}",
                limits.max_connections
            );
            limits.max_connections = fd_room as usize;
        }
        let (stop, stop_rx) = watch::channel(false);
        let grace = limits.shutdown_grace;
        runtime.spawn(background(stop_rx.clone()));
        let done = runtime.spawn(serve(listener, app, limits, stop_rx));
        Ok(Self {
            addr: bound,
            runtime: Some(runtime),
            stop,
            done: Some(done),
            grace,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until SIGTERM or SIGINT arrives (then returns; call [`Running::shutdown`]).
    pub fn wait_for_signal(&self) -> anyhow::Result<()> {
        let Some(runtime) = &self.runtime else {
            return Ok(());
        };
        runtime.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
            let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            }
            Ok(())
        })
    }

    /// Stops accepting, lets live requests finish for at most the grace time, and stops the
    /// runtime (blocking work still running after the grace time is abandoned).
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let _ = self.stop.send(true);
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if let Some(done) = self.done.take() {
            let grace = self.grace + Duration::from_millis(500);
            let _ = runtime.block_on(async { tokio::time::timeout(grace, done).await });
        }
        runtime.shutdown_timeout(self.grace);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The accept loop (see the module doc). Ends when `stop` turns true, after every connection
/// has finished or the grace time has passed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    let mut accept_errors = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut stop) => break,
        };
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (app, limits, stop) = (app.clone(), limits.clone(), stop.clone());
                        connections.spawn(async move {
                            connection(stream, app, &limits, stop).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        connections.spawn(refuse(stream, limits.max_connections));
                    }
                }
            }
            Err(e) => {
                // EMFILE/ENFILE (descriptors), ENOBUFS/ENOMEM, ECONNABORTED: all pass. Log the
                // first and then every thousandth, and pause so a full table is not spun on.
                if accept_errors.is_multiple_of(1000) {
                    tracing::warn!("accept failed ({e}); retrying");
                }
                accept_errors += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(listener);
    let grace = limits.shutdown_grace;
    let _ = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// Resolves once `stop` is true (or its sender is gone), holding no borrow of it.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// One connection: HTTP/1.1 with the head time-out, upgrades allowed (WebSocket), shut down
/// gracefully when `stop` turns true.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: &HttpLimits,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.shutdown_grace, conn).await;
        }
    }
}

/// The answer past the connection bound: 503, `Retry-After`, closed. Written without reading
/// the request; a client that is not reading gets a second to take it.
async fn refuse(mut stream: TcpStream, bound: usize) {
    let body = format!(
        "{{\"error\":{{\"message\":\"the server holds its most connections ({bound}): retry \
         later\",\"code\":503}}}}"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: \
         1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// A request body, whole: `(408, why)` when it does not arrive within `timeout`, `(413, why)`
/// past `limit` bytes, `(400, why)` when the connection breaks.
pub async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, (u16, String)> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err((
            408,
            format!(
                "the request body did not arrive within the read time-out ({} s)",
                timeout.as_secs_f64()
            ),
        )),
        Ok(Ok(bytes)) => Ok(bytes),
        // axum wraps http-body-util's `LengthLimitError` ("length limit exceeded") without
        // re-exporting its type.
        Ok(Err(e)) if error_chain(&e).contains("length limit") => {
            Err((413, format!("the request body is over {limit} bytes")))
        }
        Ok(Err(e)) => Err((400, format!("reading the request body: {e}"))),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Raises the soft descriptor limit to the hard one; the soft limit after.
fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
    }
    limit.rlim_cur
}
