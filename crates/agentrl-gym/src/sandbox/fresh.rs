//! [`FreshExecutor`]: one new `python3` process per job, confined between `fork` and `exec`
//! (the baseline and the fallback of the warm pool).
//!
//! Per job, in the child (all async-signal-safe, in this order): `setsid`; join the empty
//! network namespace; `unshare(CLONE_NEWPID)` and fork once more, so the interpreter is PID 1
//! of its own namespace while the outer process only waits and relays its status (when PID 1
//! exits the kernel kills everything left in the namespace); `chdir` to the workspace;
//! rlimits; Landlock; the seccomp filter; drop to the job's uid; parent-death signal;
//! address-space limit last. The program travels on fd 4, the result channel is fd 3.

use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::host::{self, HostSetup, UID_SLOTS};
use super::{programs, scratch, seccomp};
use super::{Executor, Job, Limits, RunOutput, SandboxError, SandboxInfo, Termination};

/// Spawns a fresh, fully confined `python3` for every job.
pub struct FreshExecutor {
    host: Arc<HostSetup>,
}

impl FreshExecutor {
    /// Probes the machine (once per process) and returns an executor using every layer it allows.
    pub fn new() -> Result<Self, SandboxError> {
        Ok(Self {
            host: host::host()?,
        })
    }
}

fn io_error(what: &str) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        what: what.to_string(),
        source,
    }
}

/// A pipe whose both ends are close-on-exec and numbered 10 or above (so that `dup2` onto
/// fds 3 and 4 in the child cannot clobber one with the other).
fn pipe_high() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io_error("pipe2")(std::io::Error::last_os_error()));
    }
    let mut out = Vec::with_capacity(2);
    for fd in fds {
        // SAFETY: fd is a fresh descriptor; F_DUPFD_CLOEXEC returns another fresh one.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        let error = std::io::Error::last_os_error();
        // SAFETY: we own fd and close it exactly once.
        unsafe { libc::close(fd) };
        if high < 0 {
            return Err(io_error("fcntl(F_DUPFD_CLOEXEC)")(error));
        }
        // SAFETY: fresh descriptor.
        out.push(unsafe { OwnedFd::from_raw_fd(high) });
    }
    match (out.pop(), out.pop()) {
        (Some(write), Some(read)) => Ok((read, write)),
        _ => Err(io_error("pipe2")(std::io::Error::other(
            "a pipe did not yield two descriptors",
        ))),
    }
}

fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    set_rlimit_pair(resource, value, value)
}

/// Soft and hard limit apart: used for RLIMIT_CPU, whose soft limit sends SIGXCPU (so a CPU
/// limit is told apart from any other kill) and whose hard limit, a second later, kills.
fn set_rlimit_pair(
    resource: libc::__rlimit_resource_t,
    soft: u64,
    hard: u64,
) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: limit is a valid rlimit.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Executor for FreshExecutor {
    fn run(&self, job: &Job) -> Result<RunOutput, SandboxError> {
        let host = &self.host;
        let workspace = scratch::canonical_workspace(host, &job.workspace)?;
        let lease = if host.drop_uid {
            Some(UID_SLOTS.acquire()?)
        } else {
            None
        };
        let uid = lease.as_ref().map(|l| l.uid);
        if let Some(uid) = uid {
            host::chown_workspace(&workspace, uid)?;
        }
        let ruleset = if host.landlock_abi > 0 {
            Some(host::build_ruleset(host, &workspace)?)
        } else {
            None
        };
        let ruleset_fd = ruleset.as_ref().map(|fd| fd.as_raw_fd());
        let workspace_c = host::path_cstring(&workspace)?;
        let (stdout_r, stdout_w) = pipe_high()?;
        let (stderr_r, stderr_w) = pipe_high()?;
        let (stdin_r, stdin_w) = pipe_high()?;
        let (result_r, result_w) = pipe_high()?;
        let (program_r, program_w) = pipe_high()?;
        let result_w_fd = result_w.as_raw_fd();
        let program_r_fd = program_r.as_raw_fd();
        let limits = job.limits.clone();
        let pid_namespace = host.pid_namespace;
        let join_network = host.network_pre_exec();
        let socket_filter = host.socket_filter.clone();

        let boot = format!("{}\nfresh_main()\n", programs::WORKER_PY);
        let mut command = Command::new(&host.python);
        command
            .args(host::PYTHON_FLAGS)
            .args(["-c", &boot])
            .env_clear()
            .envs(host::scrubbed_env())
            .env("HOME", &workspace)
            .stdin(Stdio::from(stdin_r))
            .stdout(Stdio::from(stdout_w))
            .stderr(Stdio::from(stderr_w));
        let pre_exec = move || -> std::io::Result<()> {
            // SAFETY (whole closure): runs between fork and exec; only async-signal-safe
            // syscalls on values prepared before the fork, no allocation.
            unsafe {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                join_network()?;
                set_rlimit(libc::RLIMIT_CORE, 0)?;
                if pid_namespace {
                    // A job's relay lives only as long as the job: it waits in place.
                    host::become_pid_namespace_init(None)?;
                }
                if libc::chdir(workspace_c.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                set_rlimit_pair(libc::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1)?;
                set_rlimit(libc::RLIMIT_FSIZE, limits.max_file_bytes)?;
                set_rlimit(libc::RLIMIT_NOFILE, limits.max_open_files)?;
                set_rlimit(libc::RLIMIT_NPROC, limits.max_processes)?;
                if let Some(fd) = ruleset_fd {
                    host::restrict_self(fd)?;
                }
                if let Some(program) = &socket_filter {
                    seccomp::apply(program)?;
                }
                if let Some(uid) = uid {
                    host::drop_privileges(uid)?;
                }
                // After the uid change, which clears it.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::dup2(result_w_fd, 3) < 0 || libc::dup2(program_r_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                set_rlimit(libc::RLIMIT_AS, limits.address_space_bytes)?;
            }
            Ok(())
        };
        // SAFETY: the closure only makes async-signal-safe calls (see above).
        unsafe {
            command.pre_exec(pre_exec);
        }
        let start = Instant::now();
        let mut child = command.spawn().map_err(|source| SandboxError::Spawn {
            path: host.python.display().to_string(),
            source,
        })?;
        drop(command);
        drop(result_w);
        drop(program_r);
        drop(ruleset);
        let pgid = child.id() as libc::pid_t;

        let child_exit = pidfd_open(pgid)?;
        let pumped = pump(
            [
                (std::fs::File::from(program_w), job.program.as_bytes()),
                (std::fs::File::from(stdin_w), &job.stdin),
            ],
            [stdout_r, stderr_r, result_r],
            child_exit,
            &limits,
            start,
            pgid,
        );
        // Whatever happened, nothing of this job may survive it.
        // SAFETY: kill takes plain integers; pgid is our child's (not yet reaped) process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let status = child.wait().map_err(io_error("wait for python3"))?;
        let Pumped {
            streams: [stdout, stderr, result],
            truncated,
            timed_out,
        } = pumped?;
        let termination = if timed_out {
            Termination::TimedOut
        } else if let Some(code) = status.code() {
            Termination::Exited { code }
        } else {
            Termination::Signaled {
                signal: status.signal().unwrap_or(0),
            }
        };
        drop(lease);
        Ok(RunOutput {
            termination,
            stdout,
            stderr,
            result,
            truncated,
            elapsed: start.elapsed(),
        })
    }

    fn info(&self) -> SandboxInfo {
        super::host_info(&self.host)
    }
}

/// Opens a pidfd: readable once the process has ended.
fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, SandboxError> {
    // SAFETY: plain syscall; the fd is owned right after.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(io_error("pidfd_open")(std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What [`pump`] collected.
struct Pumped {
    streams: [Vec<u8>; 3],
    truncated: bool,
    timed_out: bool,
}

/// Feeds the program (fd 4) and stdin, collects stdout, stderr and fd 3 under their caps,
/// until the child has exited and every stream is closed, or the wall-clock deadline passes
/// (then the process group is killed). Output left open by an escaped process after the child
/// exited gets a short grace period, then is abandoned.
fn pump(
    writers: [(std::fs::File, &[u8]); 2],
    outputs: [OwnedFd; 3],
    child_exit: OwnedFd,
    limits: &Limits,
    start: Instant,
    pgid: libc::pid_t,
) -> Result<Pumped, SandboxError> {
    const GRACE_AFTER_EXIT: Duration = Duration::from_millis(200);
    let mut deadline = start + limits.time_limit;
    let cap = limits.output_cap_bytes;
    // Past this many bytes a stream is closed: the writer gets EPIPE instead of us draining a
    // flood until the deadline.
    let drain_limit = cap.saturating_mul(16).max(1 << 20);
    let mut captured: [Vec<u8>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut seen = [0usize; 3];
    let mut open: [Option<OwnedFd>; 3] = outputs.map(Some);
    let mut writers: [(Option<std::fs::File>, &[u8]); 2] =
        writers.map(|(file, data)| (if data.is_empty() { None } else { Some(file) }, data));
    for file in writers.iter().flat_map(|(f, _)| f.as_ref()) {
        // SAFETY: setting O_NONBLOCK on a descriptor we own.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    }
    let mut child_exit = Some(child_exit);
    let mut timed_out = false;
    let mut buf = vec![0u8; 1 << 16];
    let mut pollfds: Vec<libc::pollfd> = Vec::with_capacity(6);
    // What each poll entry is: 0..3 an output, 3..5 a writer, 5 the child's exit.
    let mut kinds: Vec<usize> = Vec::with_capacity(6);
    loop {
        pollfds.clear();
        kinds.clear();
        for (i, fd) in open.iter().enumerate() {
            if let Some(fd) = fd {
                pollfds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                kinds.push(i);
            }
        }
        if pollfds.is_empty() && child_exit.is_none() {
            break;
        }
        for (i, (file, _)) in writers.iter().enumerate() {
            if let Some(f) = file {
                pollfds.push(libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
                kinds.push(3 + i);
            }
        }
        if let Some(fd) = &child_exit {
            pollfds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            kinds.push(5);
        }
        let now = Instant::now();
        if now >= deadline {
            if child_exit.is_some() {
                timed_out = true;
            }
            break;
        }
        let wait_ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: pollfds is a valid array of its length.
        let ready =
            unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, wait_ms) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_error("poll")(error));
        }
        for (pfd, &kind) in pollfds.iter().zip(kinds.iter()) {
            if pfd.revents == 0 {
                continue;
            }
            match kind {
                5 => {
                    // The child ended: kill what it left in its process group, and give the
                    // streams a short grace period to drain.
                    child_exit = None;
                    // SAFETY: kill takes plain integers; the child is not reaped yet.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                    deadline = deadline.min(Instant::now() + GRACE_AFTER_EXIT);
                }
                3 | 4 => {
                    let (file, data) = &mut writers[kind - 3];
                    let Some(f) = file.as_mut() else { continue };
                    match f.write(data) {
                        Ok(n) => *data = &data[n..],
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        // The program closed its end: stop feeding it.
                        Err(_) => *data = &[],
                    }
                    if data.is_empty() {
                        *file = None;
                    }
                }
                index => {
                    let Some(fd) = open[index].as_ref() else {
                        continue;
                    };
                    // SAFETY: buf is valid for buf.len() bytes.
                    let n =
                        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    if n < 0 {
                        let error = std::io::Error::last_os_error();
                        if !matches!(
                            error.kind(),
                            std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                        ) {
                            open[index] = None;
                        }
                        continue;
                    }
                    let n = n as usize;
                    if n == 0 {
                        open[index] = None;
                        continue;
                    }
                    seen[index] += n;
                    let room = cap.saturating_sub(captured[index].len());
                    captured[index].extend_from_slice(&buf[..n.min(room)]);
                    if seen[index] > drain_limit {
                        open[index] = None;
                    }
                }
            }
        }
    }
    if timed_out {
        // SAFETY: kill takes plain integers.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    Ok(Pumped {
        streams: captured,
        truncated: seen.iter().any(|&s| s > cap),
        timed_out,
    })
}
