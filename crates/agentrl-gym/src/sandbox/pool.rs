//! [`PoolExecutor`]: warm `python3` fork servers (the default executor).
//!
//! Each worker is a long-lived Python process (worker.py, `serve`) spawned inside the empty
//! network namespace as PID 1 of its own PID namespace, under the seccomp filter, with
//! the stdlib modules tests use already imported. For every job it forks a job process, which
//! inherits the filter, applies rlimits, Landlock, the worker's uid and the scrubbed
//! environment, runs the program and dies; then the server kills and reaps everything else in its namespace. So jobs skip
//! interpreter start-up but
//! share nothing: each starts from the server's pristine memory image, and the server never
//! imports workspace code.
//!
//! Requests and replies travel over the worker's stdin/stdout as frames: u32 big-endian header
//! length, header JSON, then raw blobs whose lengths the header lists.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::host::{self, HostSetup, UidLease, UID_SLOTS};
use super::{programs, scratch, seccomp};
use super::{Executor, Job, Limits, RunOutput, SandboxError, SandboxInfo, Termination};

/// A worker gets this long beyond a job's wall timeout to answer before it is declared hung.
const REPLY_SLACK: Duration = Duration::from_secs(10);

/// Server-wide settings, sent once on the worker's command line.
#[derive(Serialize)]
struct WorkerConfig<'a> {
    /// The uid the process drops to itself (the trusted checker's); fork servers send theirs
    /// per job instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<u32>,
    /// RLIMIT_AS the process sets on itself (the trusted checker's); jobs get theirs per job.
    #[serde(skip_serializing_if = "Option::is_none")]
    address_space_bytes: Option<u64>,
    landlock_abi: i32,
    read_only_paths: Vec<String>,
    read_write_files: Vec<String>,
    env: std::collections::BTreeMap<&'a str, &'a str>,
    pid_namespace: bool,
    /// The seccomp filter as hex `struct sock_filter`s, or `None` when it is off.
    socket_filter: Option<String>,
    /// The verdict tree's source, which a fork server loads once (worker.py `_VERDICT_TREE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict_tree: Option<&'static str>,
}

#[derive(Serialize)]
struct WireLimits {
    time_limit_s: f64,
    cpu_seconds: u64,
    address_space_bytes: u64,
    max_processes: u64,
    max_file_bytes: u64,
    max_open_files: u64,
    output_cap_bytes: usize,
}

impl From<&Limits> for WireLimits {
    fn from(l: &Limits) -> Self {
        Self {
            time_limit_s: l.time_limit.as_secs_f64(),
            cpu_seconds: l.cpu_seconds,
            address_space_bytes: l.address_space_bytes,
            max_processes: l.max_processes,
            max_file_bytes: l.max_file_bytes,
            max_open_files: l.max_open_files,
            output_cap_bytes: l.output_cap_bytes,
        }
    }
}

#[derive(Serialize)]
struct WireJob<'a> {
    workspace: &'a str,
    uid: Option<u32>,
    limits: WireLimits,
    blobs: [usize; 2],
}

#[derive(Deserialize)]
struct WireReply {
    termination: Option<Termination>,
    setup_error: Option<String>,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    elapsed_s: f64,
    blobs: Vec<usize>,
}

/// What a confined Python process started by [`Worker::spawn_entry`] runs: the fork server,
/// or the trusted checker (`crate::trusted`).
pub(crate) enum Entry {
    ForkServer,
    TrustedChecker { address_space_bytes: u64 },
}

/// One warm fork server (or the trusted checker: the same process shape and framing).
pub(crate) struct Worker {
    child: Child,
    /// `None` only while shutting down.
    requests: Option<ChildStdin>,
    replies: ChildStdout,
    /// The uid its jobs run as (held for the worker's lifetime).
    lease: Option<UidLease>,
    /// Its pipes broke (end of file or EPIPE): the process is gone or going.
    gone: bool,
}

impl Worker {
    fn spawn(host: &HostSetup) -> Result<Worker, SandboxError> {
        Self::spawn_entry(host, &Entry::ForkServer)
    }

    /// Starts `entry` in the empty network namespace, as PID 1 of its own PID namespace where
    /// the machine allows, with a uid of its own held for its lifetime.
    pub(crate) fn spawn_entry(host: &HostSetup, entry: &Entry) -> Result<Worker, SandboxError> {
        let lease = if host.drop_uid {
            Some(UID_SLOTS.acquire()?)
        } else {
            None
        };
        let (uid, address_space_bytes, boot) = match entry {
            Entry::ForkServer => (
                None,
                None,
                format!("{}\nserve(sys.argv[1])\n", programs::WORKER_PY),
            ),
            Entry::TrustedChecker {
                address_space_bytes,
            } => (
                lease.as_ref().map(|l| l.uid),
                Some(*address_space_bytes),
                format!(
                    "{}\n{}\ncheck_serve(sys.argv[1])\n",
                    programs::WORKER_PY,
                    programs::CHECKER_PY
                ),
            ),
        };
        let config = WorkerConfig {
            uid,
            address_space_bytes,
            landlock_abi: host.landlock_abi,
            read_only_paths: host
                .read_only_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            read_write_files: host
                .read_write_files
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            env: host::scrubbed_env().into_iter().collect(),
            pid_namespace: host.pid_namespace,
            socket_filter: host.socket_filter.as_ref().map(seccomp::to_hex),
            verdict_tree: matches!(entry, Entry::ForkServer)
                .then_some(programs::VERDICT_TREE_PROGRAM),
        };
        let config = serde_json::to_string(&config)
            .map_err(|e| SandboxError::Protocol(format!("encode worker config: {e}")))?;
        let join_network = host.network_pre_exec();
        let pid_namespace = host.pid_namespace;
        let relay = host::ExecRelay::new(&host.python)?;
        let mut command = Command::new(&host.python);
        command
            .args(host::PYTHON_FLAGS)
            .args(["-c", &boot, &config])
            .env_clear()
            .envs(host::scrubbed_env())
            .env("HOME", "/")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: setsid/setns/unshare/fork are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                // Its own session: signals to our process group do not reach it.
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                join_network()?;
                if pid_namespace {
                    host::become_pid_namespace_init(Some(&relay))?;
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| SandboxError::Spawn {
            path: host.python.display().to_string(),
            source,
        })?;
        let requests = child
            .stdin
            .take()
            .ok_or_else(|| SandboxError::Protocol("worker stdin missing".into()))?;
        let replies = child
            .stdout
            .take()
            .ok_or_else(|| SandboxError::Protocol("worker stdout missing".into()))?;
        Ok(Worker {
            child,
            requests: Some(requests),
            replies,
            lease,
            gone: false,
        })
    }

    /// Sends one job and reads its reply. An `Err` leaves the worker unusable; an `Ok(Err)` is
    /// a job that could not be set up, reported by a healthy worker.
    fn run(
        &mut self,
        job: &Job,
        workspace: &str,
    ) -> Result<Result<RunOutput, SandboxError>, SandboxError> {
        let header = WireJob {
            workspace,
            uid: self.lease.as_ref().map(|l| l.uid),
            limits: WireLimits::from(&job.limits),
            blobs: [job.program.len(), job.stdin.len()],
        };
        let header = serde_json::to_vec(&header)
            .map_err(|e| SandboxError::Protocol(format!("encode job: {e}")))?;
        let header_len = u32::try_from(header.len())
            .map_err(|_| SandboxError::Protocol("job header over 4 GiB".into()))?;
        let mut frame = Vec::with_capacity(4 + header.len() + job.program.len() + job.stdin.len());
        frame.extend_from_slice(&header_len.to_be_bytes());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(job.program.as_bytes());
        frame.extend_from_slice(&job.stdin);
        let io = |what: &str| {
            let what = what.to_string();
            move |source| SandboxError::Io { what, source }
        };
        let sent = match self.requests.as_mut() {
            Some(requests) => requests.write_all(&frame).and_then(|()| requests.flush()),
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        };
        if let Err(error) = sent {
            self.gone = error.kind() == std::io::ErrorKind::BrokenPipe;
            return Err(io("send job to worker")(error));
        }

        let deadline = Instant::now() + job.limits.time_limit + REPLY_SLACK;
        let mut head = [0u8; 4];
        self.read_exact_by(&mut head, deadline)?;
        let mut reply = vec![0u8; u32::from_be_bytes(head) as usize];
        self.read_exact_by(&mut reply, deadline)?;
        let reply: WireReply = serde_json::from_slice(&reply)
            .map_err(|e| SandboxError::Protocol(format!("bad reply header from worker: {e}")))?;
        if reply.blobs.len() != 3 {
            return Err(SandboxError::Protocol(format!(
                "worker replied with {} blobs, expected 3",
                reply.blobs.len()
            )));
        }
        let mut blobs = Vec::with_capacity(3);
        for &len in &reply.blobs {
            let mut blob = vec![0u8; len];
            self.read_exact_by(&mut blob, deadline)?;
            blobs.push(blob);
        }
        let result = blobs.pop().unwrap_or_default();
        let stderr = blobs.pop().unwrap_or_default();
        let stdout = blobs.pop().unwrap_or_default();
        let Some(termination) = reply.termination else {
            let error = reply
                .setup_error
                .unwrap_or_else(|| "no termination and no error".into());
            return Ok(Err(SandboxError::Protocol(format!(
                "job setup failed in the sandbox: {error}"
            ))));
        };
        Ok(Ok(RunOutput {
            termination,
            stdout,
            stderr,
            result,
            truncated: reply.truncated,
            elapsed: Duration::from_secs_f64(reply.elapsed_s.max(0.0)),
        }))
    }

    /// Sends one header-only frame and reads a header-only reply (the trusted checker's
    /// protocol), giving up at `deadline`. An `Err` leaves the process unusable.
    pub(crate) fn request(
        &mut self,
        header: &serde_json::Value,
        deadline: Instant,
    ) -> Result<serde_json::Value, SandboxError> {
        let header = serde_json::to_vec(header)
            .map_err(|e| SandboxError::Protocol(format!("encode request: {e}")))?;
        let header_len = u32::try_from(header.len())
            .map_err(|_| SandboxError::Protocol("request over 4 GiB".into()))?;
        let mut frame = Vec::with_capacity(4 + header.len());
        frame.extend_from_slice(&header_len.to_be_bytes());
        frame.extend_from_slice(&header);
        let sent = match self.requests.as_mut() {
            Some(requests) => requests.write_all(&frame).and_then(|()| requests.flush()),
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        };
        if let Err(source) = sent {
            self.gone = true;
            return Err(SandboxError::Io {
                what: "send request to the trusted checker".into(),
                source,
            });
        }
        let mut head = [0u8; 4];
        self.read_exact_by(&mut head, deadline)?;
        let mut reply = vec![0u8; u32::from_be_bytes(head) as usize];
        self.read_exact_by(&mut reply, deadline)?;
        let reply: serde_json::Value = serde_json::from_slice(&reply)
            .map_err(|e| SandboxError::Protocol(format!("bad reply: {e}")))?;
        // The frame's (empty) blob list is part of the reply header: drop it.
        Ok(match reply {
            serde_json::Value::Object(mut map) => {
                map.remove("blobs");
                serde_json::Value::Object(map)
            }
            other => other,
        })
    }

    pub(crate) fn is_alive(&mut self) -> bool {
        !self.gone && matches!(self.child.try_wait(), Ok(None))
    }

    /// `read_exact` that gives up at `deadline` (a hung worker must not hang the caller).
    fn read_exact_by(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), SandboxError> {
        let mut filled = 0;
        while filled < buf.len() {
            let now = Instant::now();
            if now >= deadline {
                return Err(SandboxError::Protocol(
                    "worker did not answer in time".into(),
                ));
            }
            let wait_ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: self.replies.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
            if ready < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(SandboxError::Io {
                    what: "poll worker reply".into(),
                    source: error,
                });
            }
            if ready == 0 {
                continue;
            }
            match self.replies.read(&mut buf[filled..]) {
                Ok(0) => {
                    self.gone = true;
                    let status = self.child.try_wait().ok().flatten();
                    return Err(SandboxError::Protocol(format!(
                        "worker exited mid-reply{}",
                        status.map(|s| format!(" ({s})")).unwrap_or_default()
                    )));
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(SandboxError::Io {
                        what: "read worker reply".into(),
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing its stdin ends `serve`: a clean exit (its CPU time is then accounted to us).
        // A worker that does not exit promptly is killed.
        drop(self.requests.take());
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                _ => return,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pool of warm fork servers; jobs from several threads run in parallel on different workers.
pub struct PoolExecutor {
    host: Arc<HostSetup>,
    /// `None` slots are (re)spawned on demand.
    idle: Mutex<Vec<Option<Worker>>>,
    returned: Condvar,
    size: usize,
}

impl PoolExecutor {
    /// Starts `size` workers (at least 1) using every layer the machine allows.
    pub fn new(size: usize) -> Result<Self, SandboxError> {
        let host = host::host()?;
        let size = size.max(1);
        let mut workers = Vec::with_capacity(size);
        for _ in 0..size {
            workers.push(Some(Worker::spawn(&host)?));
        }
        Ok(Self {
            host,
            idle: Mutex::new(workers),
            returned: Condvar::new(),
            size,
        })
    }

    /// Number of workers.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Process ids of the idle workers (for diagnostics and tests).
    pub fn worker_pids(&self) -> Vec<u32> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.iter().flatten().map(|w| w.child.id()).collect()
    }

    fn checkout(&self) -> Option<Worker> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(slot) = idle.pop() {
                return slot;
            }
            idle = self.returned.wait(idle).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn checkin(&self, worker: Option<Worker>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push(worker);
        self.returned.notify_one();
    }
}

enum RunFailure {
    WorkerDied(SandboxError),
    Other(SandboxError),
}

impl PoolExecutor {
    /// Runs `job` on `worker` (spawning one if it is missing or dead) and checks it back in.
    fn run_on(
        &self,
        worker: Option<Worker>,
        job: &Job,
        workspace: &str,
    ) -> Result<RunOutput, RunFailure> {
        let mut worker = worker;
        if !worker.as_mut().is_some_and(Worker::is_alive) {
            drop(worker.take());
            match Worker::spawn(&self.host) {
                Ok(fresh) => worker = Some(fresh),
                Err(e) => {
                    self.checkin(None);
                    return Err(RunFailure::Other(e));
                }
            }
        }
        let Some(mut worker) = worker else {
            self.checkin(None);
            return Err(RunFailure::Other(SandboxError::Protocol(
                "no worker available".into(),
            )));
        };
        match worker.run(job, workspace) {
            Ok(outcome) => {
                self.checkin(Some(worker));
                outcome.map_err(RunFailure::Other)
            }
            Err(error) => {
                let died = !worker.is_alive();
                // The worker is in an unknown state: replace it on next use.
                drop(worker);
                self.checkin(None);
                Err(if died {
                    RunFailure::WorkerDied(error)
                } else {
                    RunFailure::Other(error)
                })
            }
        }
    }
}

impl Executor for PoolExecutor {
    fn run(&self, job: &Job) -> Result<RunOutput, SandboxError> {
        let workspace = scratch::canonical_workspace(&self.host, &job.workspace)?;
        let workspace = workspace
            .to_str()
            .ok_or_else(|| {
                SandboxError::Protocol(format!(
                    "workspace path is not UTF-8: {}",
                    workspace.display()
                ))
            })?
            .to_string();
        let worker = self.checkout();
        match self.run_on(worker, job, &workspace) {
            // The worker died under the job (killed from outside, out of memory): one retry on
            // another (or a respawned) worker. A job that timed out or failed inside the sandbox is never retried.
            Err(RunFailure::WorkerDied(first)) => {
                match self.run_on(self.checkout(), job, &workspace) {
                    Ok(output) => Ok(output),
                    Err(RunFailure::WorkerDied(second) | RunFailure::Other(second)) => {
                        Err(SandboxError::Protocol(format!(
                            "{first}; retried on a fresh worker: {second}"
                        )))
                    }
                }
            }
            Err(RunFailure::Other(error)) => Err(error),
            Ok(output) => Ok(output),
        }
    }

    fn info(&self) -> SandboxInfo {
        let mut info = super::host_info(&self.host);
        info.notes
            .push(format!("warm pool of {} fork-server workers", self.size));
        info
    }
}
