//! A minimal [`Executor`]: one fresh `python3` per job, with the fd-3 result channel, a scrubbed
//! environment, a wall-clock timeout that kills the whole process group, and output caps.
//!
//! It carries no other containment layer. The env and verifier code against the
//! [`Executor`] trait; the sandboxed executors in [`crate::sandbox`] are what the CLI uses when
//! available, and this one keeps the gym usable (and testable) with any `python3`.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sandbox::{Executor, Job, RunOutput, SandboxError, SandboxInfo, Termination};

/// Fresh `python3 -B -c PROGRAM` per job.
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    pub python: String,
}

impl Default for LocalExecutor {
    fn default() -> Self {
        Self {
            python: "python3".to_string(),
        }
    }
}

fn read_capped(mut reader: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut truncated = false;
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

impl Executor for LocalExecutor {
    fn run(&self, job: &Job) -> Result<RunOutput, SandboxError> {
        let io_err = |what: &str| {
            let what = what.to_string();
            move |source| SandboxError::Io { what, source }
        };
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io_err("fd-3 pipe")(std::io::Error::last_os_error()));
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        let mut command = Command::new(&self.python);
        command
            .arg("-B")
            .arg("-c")
            .arg(&job.program)
            .current_dir(&job.workspace)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls (dup2, fcntl, setpgid) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if write_fd == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(write_fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = command.spawn();
        // SAFETY: we own write_fd; the child has its copy on fd 3.
        unsafe { libc::close(write_fd) };
        // SAFETY: read_fd is ours and closed exactly once, by this File.
        let result_pipe = unsafe { std::fs::File::from_raw_fd(read_fd) };
        let mut child = spawned.map_err(|source| SandboxError::Spawn {
            path: self.python.clone(),
            source,
        })?;
        let started = Instant::now();
        let cap = job.limits.output_cap_bytes;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_thread = std::thread::spawn(move || stdout.map(|s| read_capped(s, cap)).unwrap_or_default());
        let err_thread = std::thread::spawn(move || stderr.map(|s| read_capped(s, cap)).unwrap_or_default());
        let res_thread = std::thread::spawn(move || read_capped(result_pipe, cap));
        if let Some(mut stdin) = child.stdin.take() {
            // A program that exits without reading stdin closes the pipe: not an error.
            let _ = stdin.write_all(&job.stdin);
        }
        let pid = child.id() as i32;
        let termination = loop {
            if let Some(status) = child.try_wait().map_err(io_err("waiting for python3"))? {
                use std::os::unix::process::ExitStatusExt;
                break match (status.code(), status.signal()) {
                    (Some(code), _) => Termination::Exited { code },
                    (None, Some(signal)) => Termination::Signaled { signal },
                    (None, None) => Termination::Exited { code: -1 },
                };
            }
            if started.elapsed() >= job.limits.wall_timeout {
                // SAFETY: signalling the child's own process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = child.wait();
                break Termination::TimedOut;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // Leftover background processes of the group would hold the pipes open.
        // SAFETY: signalling the child's own process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let (stdout, t1) = out_thread.join().unwrap_or_default();
        let (stderr, t2) = err_thread.join().unwrap_or_default();
        let (result, t3) = res_thread.join().unwrap_or_default();
        Ok(RunOutput {
            termination,
            stdout,
            stderr,
            result,
            truncated: t1 || t2 || t3,
            elapsed: started.elapsed(),
        })
    }

    fn info(&self) -> SandboxInfo {
        SandboxInfo {
            network_namespace: false,
            rlimits: false,
            process_group_kill: true,
            landlock: false,
            scrubbed_env: true,
            output_caps: true,
            notes: vec!["local executor: fresh python3 per job, no sandbox layers beyond timeout, env scrub and output caps".into()],
        }
    }
}
