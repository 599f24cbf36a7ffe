//! The sandbox: model-written Python runs only here, in a child process, confined by every
//! layer the machine allows (network namespace, rlimits, wall-clock timeout with process-group
//! kill, Landlock filesystem confinement, a seccomp filter at least as strict as Docker's default
//! profile, scrubbed environment, output caps).
//!
//! Two executors implement [`Executor`]: a fresh `python3` per job (the baseline) and a pool of
//! warm fork-server workers (the default). The env and the verifier only see this trait.
//!
//! The bottom of the gym crate: the sandbox names nothing above it. The Python programs it
//! starts live with it ([`programs`]: the worker, the trusted checker, the verdict tree, and
//! the fork helper the worker and the verdict tree share); `harness`, `trusted` and `verify`
//! take them from here. Inside, `host.rs` (the probed machine setup) is below `scratch.rs` (the
//! jobs' directories), and both are below the two executors.
//!
//! Contract for a [`Job`]:
//! - `program` is Python source executed as `__main__` with the workspace as working directory
//!   and as `sys.path[0]`.
//! - The program may write a structured result to file descriptor 3; the executor returns those
//!   bytes in [`RunOutput::result`], capped like stdout. Tests and harnesses use fd 3 so that
//!   prints of the code under test cannot be mistaken for results.
//! - `stdin` is fed to the program's standard input.
//!
//! Nothing a job does reaches the next one. A pool worker's jobs share its uid and fork from
//! the same server, so every kind of state the kernel keeps per uid or that outlives a
//! process is closed (`tests/gym/state_crossing.rs` plants each in one episode and looks for
//! it in the next, on the same worker and the same `gym serve`):
//! - keyrings (per uid, outliving every process): `add_key`, `request_key` and `keyctl` are
//!   denied by the seccomp filter (`seccomp.rs`), as in Docker's default profile;
//! - System V IPC and POSIX message queues (per IPC namespace, which jobs share with the host):
//!   denied by the seccomp filter;
//! - abstract Unix sockets: `socket(AF_UNIX)` is denied by the seccomp filter (and, from
//!   Landlock ABI 6 on, scoped to the job's domain);
//! - processes and what only lives in them (inotify watches, timers, file locks, pending
//!   signals): after each job the worker, PID 1 of its own PID namespace, kills and reaps
//!   everything left in it (without root, no PID namespace: the job's process group only);
//! - `/dev/shm`, `/tmp` and every other name in the file system: Landlock lets a job write
//!   inside its workspace only, and each episode and verdict gets a fresh workspace (a tmpfs of
//!   its own with a byte and file quota, `scratch.rs`, where we are root);
//! - the environment and the interpreter's own state (modules, builtins): each job forks from
//!   the server's pristine image, and the server never runs job code.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Resource limits applied to one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock time limit: a hidden case's `time_limit_s` or a task's `limits.time_s`
    /// (`task.rs`), else 5 s. Serialised under its former name, so configs and the service's
    /// wire stay as they were.
    #[serde(rename = "wall_timeout")]
    pub time_limit: Duration,
    pub cpu_seconds: u64,
    pub address_space_bytes: u64,
    pub max_processes: u64,
    pub max_file_bytes: u64,
    pub max_open_files: u64,
    /// Cap on each of stdout, stderr and the fd-3 result channel.
    pub output_cap_bytes: usize,
    /// Bytes the workspace may hold in all (its own tmpfs, see `scratch.rs`).
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
    /// Files, directories and links the workspace may hold in all.
    #[serde(default = "default_max_files")]
    pub max_files: u64,
}

fn default_disk_bytes() -> u64 {
    64 << 20
}

fn default_max_files() -> u64 {
    10_000
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            time_limit: Duration::from_secs(5),
            cpu_seconds: 4,
            address_space_bytes: 512 << 20,
            max_processes: 32,
            max_file_bytes: 8 << 20,
            max_open_files: 64,
            output_cap_bytes: 64 << 10,
            disk_bytes: default_disk_bytes(),
            max_files: default_max_files(),
        }
    }
}

/// One Python run in one workspace directory.
#[derive(Debug, Clone)]
pub struct Job {
    pub workspace: PathBuf,
    pub program: String,
    pub stdin: Vec<u8>,
    pub limits: Limits,
}

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    Exited { code: i32 },
    Signaled { signal: i32 },
    TimedOut,
}

/// A resource limit that stopped a run, named the way reports name it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LimitHit {
    /// The wall-clock or CPU limit, in seconds (serialised as `seconds`, as recorded runs
    /// have it).
    Time {
        #[serde(rename = "seconds")]
        time_limit_s: f64,
    },
    /// The address-space limit, in MB.
    Memory { megabytes: u64 },
    /// The workspace's size quota, in MB: writes failed with ENOSPC.
    Disk { megabytes: u64 },
    /// The workspace's file-count quota: creating files failed with ENOSPC.
    Files { count: u64 },
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Time { time_limit_s } => write!(f, "time limit of {time_limit_s} s exceeded"),
            LimitHit::Memory { megabytes } => write!(f, "memory limit of {megabytes} MB exceeded"),
            LimitHit::Disk { megabytes } => {
                write!(
                    f,
                    "workspace limit of {megabytes} MB reached (no space left)"
                )
            }
            LimitHit::Files { count } => {
                write!(
                    f,
                    "workspace limit of {count} files reached (no space left)"
                )
            }
        }
    }
}

impl Limits {
    /// The memory limit as reports name it (a `MemoryError` under this limit is this limit).
    pub fn memory_hit(&self) -> LimitHit {
        LimitHit::Memory {
            megabytes: self.address_space_bytes >> 20,
        }
    }
}

/// Everything a job produced. Output bytes may be non-UTF-8; callers decode lossily.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    pub termination: Termination,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes written to file descriptor 3.
    pub result: Vec<u8>,
    /// Some stream hit `output_cap_bytes` and was cut.
    pub truncated: bool,
    pub elapsed: Duration,
}

impl RunOutput {
    /// The time limit that stopped this run, if one did: the wall-clock timeout, or the CPU
    /// limit. RLIMIT_CPU is set with soft < hard, so the kernel's SIGXCPU at the soft limit names
    /// it; a program that ignores SIGXCPU is SIGKILLed at the hard limit one second later, which
    /// is recognised by the wall time the run took (never less than its CPU time).
    pub fn time_limit_hit(&self, limits: &Limits) -> Option<LimitHit> {
        let cpu = LimitHit::Time {
            time_limit_s: limits.cpu_seconds as f64,
        };
        match self.termination {
            Termination::TimedOut => Some(LimitHit::Time {
                time_limit_s: limits.time_limit.as_secs_f64(),
            }),
            Termination::Signaled { signal } if signal == libc::SIGXCPU => Some(cpu),
            Termination::Signaled { signal }
                if signal == libc::SIGKILL
                    && self.elapsed.as_secs_f64() >= (limits.cpu_seconds + 1) as f64 =>
            {
                Some(cpu)
            }
            _ => None,
        }
    }
}

/// Which containment layers are active on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub network_namespace: bool,
    pub rlimits: bool,
    pub process_group_kill: bool,
    pub landlock: bool,
    pub scrubbed_env: bool,
    pub output_caps: bool,
    /// Jobs run as an unprivileged uid of their own (needs root here), so RLIMIT_NPROC holds.
    #[serde(default)]
    pub privilege_drop: bool,
    /// PID namespaces guarantee that nothing a job starts outlives it (needs root here).
    #[serde(default)]
    pub pid_namespace: bool,
    /// A seccomp filter (seccomp.rs) denies what Docker's default profile denies (keyrings,
    /// namespaces, mounts, ptrace, perf, bpf, io_uring, modules, ...) and the sockets that
    /// could reach host processes through the filesystem namespace (pathname and abstract Unix
    /// sockets), which Landlock does not cover, and System V IPC and POSIX message queues,
    /// which no other layer covers. (The name predates the rest of the filter.)
    #[serde(default)]
    pub socket_filter: bool,
    /// Each workspace is a tmpfs of its own, mounted with the job's byte and file quota (needs
    /// root here), so writes past it get ENOSPC.
    #[serde(default)]
    pub workspace_quota: bool,
    /// Human-readable notes, e.g. why a layer is off.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot start python3 ({path}): {source}")]
    Spawn {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox I/O on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox worker protocol: {0}")]
    Protocol(String),
}

/// Runs jobs. Implementations are shareable across threads.
pub trait Executor: Send + Sync {
    fn run(&self, job: &Job) -> Result<RunOutput, SandboxError>;
    fn info(&self) -> SandboxInfo;
}

mod fresh;
// Public for the integration tests (tests/gym/landlock_rules.rs).
#[doc(hidden)]
pub mod host;
pub(crate) mod pool;
pub mod programs;
// Public for the integration tests (tests/gym/scratch_owners.rs).
#[doc(hidden)]
pub mod scratch;
// Public for the integration tests (tests/gym/seccomp_filter.rs).
#[doc(hidden)]
pub mod seccomp;

pub use fresh::FreshExecutor;
pub use pool::PoolExecutor;
pub use scratch::{bounded_scratch_dir, scratch_dir, scratch_root, Quota, ScratchDir};

/// The default executor: a warm pool with one worker per available core (at least 2).
pub fn default_executor() -> Result<std::sync::Arc<dyn Executor>, SandboxError> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2);
    Ok(std::sync::Arc::new(PoolExecutor::new(workers)?))
}

/// What the host setup provides, layer by layer, with a note per layer. Here rather than in
/// `host.rs` because the workspace quota is the scratch directories' fact (`scratch.rs`),
/// which sits above the host setup.
pub(crate) fn host_info(setup: &host::HostSetup) -> SandboxInfo {
    let mut notes = setup.notes.clone();
    if setup.drop_uid {
        notes.push(format!(
            "each job runs as its own unprivileged uid ({}..{}), so RLIMIT_NPROC holds",
            host::UID_SLOTS.base,
            host::UID_SLOTS.base + host::UID_SLOTS.count
        ));
    }
    if setup.pid_namespace {
        notes.push(
            "PID namespaces: a fresh job is PID 1 of its own; a pool worker is PID 1 of its own \
             and kills everything else in it after each job, so nothing a job starts outlives it"
                .into(),
        );
    }
    if setup.landlock_abi > 0 {
        notes.push(format!(
            "Landlock ABI {}: read-write only in the workspace, read-only {}",
            setup.landlock_abi,
            setup
                .read_only_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if setup.socket_filter.is_some() {
        notes.push(
            "seccomp filter (Docker's default profile's denials and more, see seccomp.rs): no \
             socket() but AF_INET/AF_INET6 inside the empty network namespace (none without \
             it), socketpair only AF_UNIX stream/seqpacket, no io_uring, System V IPC, POSIX \
             message queues, keyrings, namespaces, mounts, chroot, ptrace, perf, bpf, \
             userfaultfd, modules or kexec"
                .into(),
        );
    }
    let workspace_quota = scratch::workspace_quota();
    match &workspace_quota {
        Ok(()) => notes.push(
            "workspace quota: each workspace is a tmpfs of its own (size= and nr_inodes= from \
             the job's limits), so writes past it get ENOSPC"
                .into(),
        ),
        Err(e) => notes.push(format!(
            "workspace quota off ({e}): only RLIMIT_FSIZE bounds each file; a job can fill \
             the workspace's file system"
        )),
    }
    SandboxInfo {
        workspace_quota: workspace_quota.is_ok(),
        network_namespace: !matches!(setup.network, host::NetworkIsolation::Off),
        rlimits: true,
        process_group_kill: true,
        landlock: setup.landlock_abi > 0,
        scrubbed_env: true,
        output_caps: true,
        privilege_drop: setup.drop_uid,
        pid_namespace: setup.pid_namespace,
        socket_filter: setup.socket_filter.is_some(),
        notes,
    }
}

/// Probes the machine and describes the active layers (for `agentrl gym sandbox-info`).
pub fn sandbox_info() -> Result<SandboxInfo, SandboxError> {
    let setup = host::host()?;
    Ok(host_info(&setup))
}

/// A human-readable report of [`sandbox_info`]: one line per layer, then the notes.
pub fn sandbox_info_report() -> String {
    let info = match sandbox_info() {
        Ok(info) => info,
        Err(e) => return format!("sandbox unavailable: {e}\n"),
    };
    let on_off = |on: bool| if on { "on" } else { "OFF" };
    let mut report = String::new();
    for (name, on) in [
        ("network namespace", info.network_namespace),
        ("rlimits", info.rlimits),
        ("process-group kill", info.process_group_kill),
        ("landlock", info.landlock),
        ("scrubbed environment", info.scrubbed_env),
        ("output caps", info.output_caps),
        ("unprivileged uid", info.privilege_drop),
        ("pid namespace", info.pid_namespace),
        ("seccomp filter", info.socket_filter),
        ("workspace quota", info.workspace_quota),
    ] {
        report.push_str(&format!("{name:<22}{}\n", on_off(on)));
    }
    for note in &info.notes {
        report.push_str(&format!("- {note}\n"));
    }
    report
}
