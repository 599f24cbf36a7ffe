//! What this machine allows the sandbox to do, probed once per process: which Python to run,
//! whether the job can drop to an unprivileged uid, get its own network and PID namespaces,
//! and be confined by Landlock. Both executors build their layers from one `HostSetup`, so
//! [`super::SandboxInfo`] reports exactly what they apply.
//!
//! Also holds the low-level pieces the Rust side applies itself: the uid slot allocator, the
//! Landlock ruleset (raw syscalls, because the confinement is applied between `fork` and
//! `exec`, where only async-signal-safe calls are allowed), and the scrubbed environment.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use super::SandboxError;

/// `PATH` inside the sandbox.
pub(crate) const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The environment every job sees, apart from `HOME` (its workspace).
pub(crate) fn scrubbed_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("PATH", SANDBOX_PATH),
        ("LANG", "C.UTF-8"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONHASHSEED", "0"),
        ("PYTHONIOENCODING", "utf-8"),
    ]
}

/// Python flags for every sandboxed interpreter. Not `-I`/`-E`: those would ignore
/// `PYTHONHASHSEED`; the environment is scrubbed instead. `-s`: no user site-packages.
pub(crate) const PYTHON_FLAGS: [&str; 1] = ["-s"];

/// How the job gets a network namespace without interfaces (so no network at all).
#[derive(Debug)]
pub(crate) enum NetworkIsolation {
    /// One empty namespace, created once and joined with `setns` by every sandboxed process.
    Shared(OwnedFd),
    /// Not root: each process unshares a user + network namespace.
    UnshareWithUserNamespace,
    Off,
}

#[derive(Debug)]
pub(crate) struct HostSetup {
    pub python: PathBuf,
    /// Root here, and the chosen Python runs as an unprivileged uid: each job gets its own uid.
    pub drop_uid: bool,
    pub network: NetworkIsolation,
    /// Root here: PID namespaces bound what a job can leave behind (see `info`).
    pub pid_namespace: bool,
    /// Landlock ABI version; 0 when Landlock is unavailable.
    pub landlock_abi: i32,
    /// Read + execute only: the Python installation and the system directories it needs.
    pub read_only_paths: Vec<PathBuf>,
    /// Device files that stay readable and writable.
    pub read_write_files: Vec<PathBuf>,
    /// The seccomp filter (see `seccomp.rs`); `None` when the kernel refuses it.
    pub socket_filter: Option<seccompiler::BpfProgram>,
    pub notes: Vec<String>,
}

static HOST: OnceLock<Result<Arc<HostSetup>, String>> = OnceLock::new();

/// The probed setup, shared by every executor of this process.
pub(crate) fn host() -> Result<Arc<HostSetup>, SandboxError> {
    HOST.get_or_init(|| HostSetup::probe().map(Arc::new).map_err(|e| e.to_string()))
        .clone()
        .map_err(SandboxError::Protocol)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        SandboxError::Protocol(format!("path contains a NUL byte: {}", path.display()))
    })
}

/// What the probe script reports about an interpreter.
#[derive(serde::Deserialize)]
struct PythonFacts {
    executable: String,
    prefix: String,
    base_prefix: String,
    exec_prefix: String,
    path: Vec<String>,
}

const PROBE_SCRIPT: &str = "import sys, json; print(json.dumps({'executable': sys.executable, \
    'prefix': sys.prefix, 'base_prefix': sys.base_prefix, 'exec_prefix': sys.exec_prefix, \
    'path': [p for p in sys.path if p]}))";

/// Runs the probe script with `candidate`, as `uid` when given.
fn probe_python(candidate: &Path, uid: Option<u32>) -> Result<PythonFacts, String> {
    let mut command = Command::new(candidate);
    command
        .args(PYTHON_FLAGS)
        .args(["-c", PROBE_SCRIPT])
        .env_clear()
        .envs(scrubbed_env())
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(uid) = uid {
        // SAFETY: only async-signal-safe calls (setgroups, setgid, setuid) between fork and exec.
        unsafe {
            command.pre_exec(move || drop_privileges(uid));
        }
    }
    let output = command
        .output()
        .map_err(|e| format!("{}: {e}", candidate.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} exited with {}: {}",
            candidate.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{}: bad probe output: {e}", candidate.display()))
}

/// setgroups/setgid/setuid to `uid`; async-signal-safe.
pub(crate) fn drop_privileges(uid: u32) -> std::io::Result<()> {
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(uid) != 0
            || libc::setuid(uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Landlock ABI version, or 0 when the kernel lacks it or it is disabled.
fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes a null attribute pointer and size 0.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 0 {
        0
    } else {
        abi as i32
    }
}

/// Creates an empty network namespace held by the returned fd: a short-lived helper process
/// unshares it, we open `/proc/PID/ns/net`, and the helper exits.
fn shared_network_namespace(python: &Path) -> Result<OwnedFd, String> {
    let mut command = Command::new(python);
    command
        .args(["-c", "import sys; sys.stdin.read()"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: unshare is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut helper = command
        .spawn()
        .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
    let path = CString::new(format!("/proc/{}/ns/net", helper.id())).map_err(|e| e.to_string())?;
    // SAFETY: path is a valid C string; the returned fd is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let open_error = std::io::Error::last_os_error();
    drop(helper.stdin.take());
    let _ = helper.wait();
    if fd < 0 {
        return Err(format!("open /proc/PID/ns/net: {open_error}"));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether a non-root process may unshare a user + network namespace here.
fn user_network_namespace_works() -> bool {
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", "exit 0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: unshare is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.status().map(|s| s.success()).unwrap_or(false)
}

/// The Landlock read-only rules for `paths`: each resolved (a rule applies to what a path
/// names, so `/lib -> usr/lib` is a rule on `/usr/lib`), missing ones dropped, and those beneath
/// another one dropped, since a path-beneath rule already covers them. Every rule costs every
/// job a `landlock_add_rule` call; on a merged-/usr system a dozen paths come down to three.
// Public for the integration tests (tests/gym/landlock_rules.rs).
#[doc(hidden)]
pub fn beneath_rules(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut resolved: Vec<PathBuf> = paths.iter().filter_map(|p| p.canonicalize().ok()).collect();
    // Sorted, an ancestor comes right before the paths beneath it.
    resolved.sort();
    resolved.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for path in resolved {
        if !kept.iter().any(|k| path.starts_with(k)) {
            kept.push(path);
        }
    }
    kept
}

/// Compiles the seccomp filter and checks, in a throwaway interpreter, that the kernel installs
/// it and that it denies an `AF_UNIX` socket while a stream socketpair still works.
fn probe_socket_filter(python: &Path, allow_inet: bool) -> Result<seccompiler::BpfProgram, String> {
    const CHECK: &str = "import socket\n\
        a, b = socket.socketpair()\n\
        try:\n    socket.socket(socket.AF_UNIX)\nexcept PermissionError:\n    raise SystemExit(0)\n\
        raise SystemExit(3)\n";
    let program = super::seccomp::sandbox_filter(allow_inet)?;
    let in_child = program.clone();
    let mut command = Command::new(python);
    command
        .args(PYTHON_FLAGS)
        .args(["-c", CHECK])
        .env_clear()
        .envs(scrubbed_env())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: `apply` makes two system calls and does not allocate.
    unsafe {
        command.pre_exec(move || super::seccomp::apply(&in_child));
    }
    let output = command.output().map_err(|e| format!("install it: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "check under it exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(program)
}

impl HostSetup {
    fn probe() -> Result<HostSetup, SandboxError> {
        let mut notes = Vec::new();
        let root = is_root();
        let probe_uid = UID_SLOTS.base;

        // Candidates: an explicit choice, the `python3` on PATH (resolved past shims), the system one.
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(explicit) = std::env::var_os("AGENTRL_PYTHON") {
            candidates.push(PathBuf::from(explicit));
        }
        match probe_python(Path::new("python3"), None) {
            Ok(facts) => candidates.push(PathBuf::from(facts.executable)),
            Err(e) => notes.push(format!("python3 on PATH: {e}")),
        }
        candidates.push(PathBuf::from("/usr/bin/python3"));
        candidates.dedup();

        let mut chosen: Option<(PathBuf, PythonFacts, bool)> = None;
        let mut failures = Vec::new();
        if root {
            for candidate in &candidates {
                match probe_python(candidate, Some(probe_uid)) {
                    Ok(facts) => {
                        chosen = Some((candidate.clone(), facts, true));
                        break;
                    }
                    Err(e) => failures.push(format!("as uid {probe_uid}: {e}")),
                }
            }
        }
        if chosen.is_none() {
            for candidate in &candidates {
                match probe_python(candidate, None) {
                    Ok(facts) => {
                        chosen = Some((candidate.clone(), facts, false));
                        break;
                    }
                    Err(e) => failures.push(e),
                }
            }
        }
        let Some((python, facts, drop_uid)) = chosen else {
            return Err(SandboxError::Protocol(format!(
                "no usable python3 (tried {}): {}",
                candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                failures.join("; ")
            )));
        };
        if root && !drop_uid {
            notes.push(format!(
                "uid drop off: no python3 runs as an unprivileged uid ({}); RLIMIT_NPROC is not enforced for root",
                failures.join("; ")
            ));
        } else if !root {
            notes.push("uid drop off: not running as root (jobs run as the current user)".into());
        }

        let network = if root {
            match shared_network_namespace(&python) {
                Ok(fd) => NetworkIsolation::Shared(fd),
                Err(e) => {
                    notes.push(format!("network namespace off: {e}"));
                    NetworkIsolation::Off
                }
            }
        } else if user_network_namespace_works() {
            NetworkIsolation::UnshareWithUserNamespace
        } else {
            notes.push("network namespace off: unshare(CLONE_NEWUSER|CLONE_NEWNET) failed".into());
            NetworkIsolation::Off
        };
        let pid_namespace = root;
        if !pid_namespace {
            notes.push(
                "PID namespace off (needs root): leftover processes are killed by process group only".into(),
            );
        }

        let socket_filter = match probe_socket_filter(
            &python,
            !matches!(network, NetworkIsolation::Off),
        ) {
            Ok(program) => Some(program),
            Err(e) => {
                notes.push(format!(
                    "seccomp filter off ({e}): a job can reach host processes on pathname Unix sockets, System V IPC and POSIX message queues, keep keys in its uid's keyring and call what Docker's default profile denies"
                ));
                None
            }
        };

        let landlock_abi = landlock_abi();
        if landlock_abi == 0 {
            notes.push("Landlock off: the kernel does not offer it; the uid drop and file permissions guard the filesystem".into());
        }
        let mut read_only_paths: Vec<PathBuf> = [
            "/usr",
            "/lib",
            "/lib64",
            "/lib32",
            "/bin",
            "/sbin",
            "/etc/ld.so.cache",
            "/etc/localtime",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        for dir in [&facts.prefix, &facts.base_prefix, &facts.exec_prefix]
            .into_iter()
            .chain(facts.path.iter())
        {
            read_only_paths.push(PathBuf::from(dir));
        }
        if let Some(parent) = Path::new(&facts.executable).parent() {
            read_only_paths.push(parent.to_path_buf());
        }
        let read_only_paths = beneath_rules(read_only_paths);
        let read_write_files = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();

        notes.insert(
            0,
            format!("python: {} (sys.prefix {})", python.display(), facts.prefix),
        );
        Ok(HostSetup {
            python,
            drop_uid,
            network,
            pid_namespace,
            landlock_abi,
            read_only_paths,
            read_write_files,
            socket_filter,
            notes,
        })
    }

    /// The per-process network step, async-signal-safe: join the shared empty namespace or
    /// unshare a private one.
    pub(crate) fn network_pre_exec(
        &self,
    ) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
        let mode: (i32, RawFd) = match &self.network {
            NetworkIsolation::Shared(fd) => (1, fd.as_raw_fd()),
            NetworkIsolation::UnshareWithUserNamespace => (2, -1),
            NetworkIsolation::Off => (0, -1),
        };
        move || {
            // SAFETY: setns/unshare are async-signal-safe; the fd lives as long as the
            // process-wide HostSetup.
            let rc = unsafe {
                match mode.0 {
                    1 => libc::setns(mode.1, libc::CLONE_NEWNET),
                    2 => libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET),
                    _ => 0,
                }
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        }
    }
}

/// Unprivileged uids handed to jobs (fresh executor) and workers (pool), one at a time each,
/// so RLIMIT_NPROC counts one job's processes only. The range depends on our pid so that two
/// agentrl processes on one machine rarely share uids.
pub(crate) struct UidSlots {
    pub(crate) base: u32,
    pub(crate) count: u32,
    in_use: Mutex<Vec<bool>>,
}

pub(crate) static UID_SLOTS: std::sync::LazyLock<UidSlots> = std::sync::LazyLock::new(|| {
    const COUNT: u32 = 256;
    UidSlots {
        base: 200_000 + (std::process::id() % 10_000) * COUNT,
        count: COUNT,
        in_use: Mutex::new(vec![false; COUNT as usize]),
    }
});

/// A uid held until dropped.
pub(crate) struct UidLease {
    pub uid: u32,
}

impl UidSlots {
    pub(crate) fn acquire(&'static self) -> Result<UidLease, SandboxError> {
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        let index = in_use.iter().position(|used| !used).ok_or_else(|| {
            SandboxError::Protocol(format!("all {} sandbox uids are busy", self.count))
        })?;
        in_use[index] = true;
        Ok(UidLease {
            uid: self.base + index as u32,
        })
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        let slots = &*UID_SLOTS;
        let mut in_use = slots.in_use.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = in_use.get_mut((self.uid - slots.base) as usize) {
            *slot = false;
        }
    }
}

/// Gives the workspace (recursively, without following links) to `uid`.
pub(crate) fn chown_workspace(workspace: &Path, uid: u32) -> Result<(), SandboxError> {
    let io = |what: &Path, source| SandboxError::Io {
        what: format!("chown {}", what.display()),
        source,
    };
    std::os::unix::fs::lchown(workspace, Some(uid), Some(uid)).map_err(|e| io(workspace, e))?;
    let entries = std::fs::read_dir(workspace).map_err(|e| io(workspace, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io(workspace, e))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| io(&path, e))?;
        if meta.is_dir() {
            chown_workspace(&path, uid)?;
        } else if std::os::unix::fs::MetadataExt::nlink(&meta) == 1 {
            // A hard link could point at a file outside the workspace: leave it alone.
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(|e| io(&path, e))?;
        }
    }
    Ok(())
}

// ---- Landlock (Rust side, for the fresh executor) --------------------------------------------

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

fn fs_rights_for_abi(abi: i32) -> u64 {
    let mut rights = (1u64 << 13) - 1; // ABI 1: EXECUTE ..= MAKE_SYM
    if abi >= 2 {
        rights |= 1 << 13; // REFER
    }
    if abi >= 3 {
        rights |= FS_TRUNCATE;
    }
    if abi >= 5 {
        rights |= FS_IOCTL_DEV;
    }
    rights
}

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// A Landlock ruleset for one job, built in the parent; the child only calls
/// `landlock_restrict_self` on it. Mirrors `apply_landlock` in worker.py.
pub(crate) fn build_ruleset(host: &HostSetup, workspace: &Path) -> Result<OwnedFd, SandboxError> {
    let abi = host.landlock_abi;
    let handled_fs = fs_rights_for_abi(abi);
    let attr = RulesetAttr {
        handled_access_fs: handled_fs,
        handled_access_net: if abi >= 4 { 3 } else { 0 },
        scoped: if abi >= 6 { 3 } else { 0 },
    };
    let attr_size = match abi {
        6.. => 24usize,
        4 | 5 => 16,
        _ => 8,
    };
    // SAFETY: attr outlives the call and attr_size never exceeds its size.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            attr_size,
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(SandboxError::Io {
            what: "landlock_create_ruleset".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: a fresh fd returned by the kernel.
    let ruleset = unsafe { OwnedFd::from_raw_fd(ruleset as RawFd) };
    let file_rights =
        handled_fs & (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV);
    let read_exec = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
    let mut rules: Vec<(&Path, u64, bool)> = vec![(workspace, handled_fs, true)];
    rules.extend(
        host.read_only_paths
            .iter()
            .map(|p| (p.as_path(), read_exec, false)),
    );
    rules.extend(host.read_write_files.iter().map(|p| {
        (
            p.as_path(),
            FS_READ_FILE | FS_WRITE_FILE | (handled_fs & FS_TRUNCATE),
            false,
        )
    }));
    for (path, mut rights, required) in rules {
        let c_path = cstring(path)?;
        // SAFETY: valid C string; the fd is owned right after.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            if required {
                return Err(SandboxError::Io {
                    what: format!("open {} for Landlock", path.display()),
                    source: std::io::Error::last_os_error(),
                });
            }
            continue;
        }
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if !path.is_dir() {
            rights &= file_rights;
        }
        let rule = PathBeneathAttr {
            allowed_access: rights,
            parent_fd: fd.as_raw_fd(),
        };
        // SAFETY: rule is a valid landlock_path_beneath_attr for the call's duration.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            )
        };
        if rc != 0 {
            return Err(SandboxError::Io {
                what: format!("landlock_add_rule {}", path.display()),
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(ruleset)
}

/// In the child: no new privileges, then enter the ruleset's domain. Async-signal-safe.
pub(crate) fn restrict_self(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: prctl and the landlock syscall take plain integers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Expose a path's C string for pre_exec use.
pub(crate) fn path_cstring(path: &Path) -> Result<CString, SandboxError> {
    cstring(path)
}

/// The outer process of the PID-namespace split: wait for PID 1 and end the same way.
fn relay_child_status(child: libc::pid_t) -> ! {
    // SAFETY: only async-signal-safe calls; this process never returns to Rust code.
    unsafe {
        // Close everything, including std's exec-error pipe, so the parent sees the exec.
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut status = 0;
        loop {
            let rc = libc::waitpid(child, &mut status, 0);
            if rc == child {
                break;
            }
            if rc < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(125);
            }
        }
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status));
    }
}

/// The outer process of the PID-namespace split of a long-lived worker, as a small `python3`
/// it execs: an outer process that only waited in place would keep, copy-on-write, the whole
/// address space of the process that forked it for as long as the worker lives, so every
/// page the trainer then wrote was copied (`do_wp_page`, 7% of a Qwen3 SFT test's samples in
/// `perf`) and pinned twice in memory. Built before the fork; [`Self::exec`] only makes
/// async-signal-safe calls.
pub(crate) struct ExecRelay {
    python: CString,
    code: CString,
}

/// What the exec'd relay runs: wait for PID 1 and end the same way ([`relay_child_status`]).
const RELAY_PY: &str = concat!(
    "import os, signal, sys\n",
    "_, status = os.waitpid(int(sys.argv[1]), 0)\n",
    "if os.WIFSIGNALED(status):\n",
    "    try:\n",
    "        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)\n",
    "    except (OSError, ValueError):\n",
    "        pass\n",
    "    os.kill(os.getpid(), os.WTERMSIG(status))\n",
    "    os._exit(128 + os.WTERMSIG(status))\n",
    "os._exit(os.WEXITSTATUS(status))\n",
);

impl ExecRelay {
    pub(crate) fn new(python: &Path) -> Result<Self, SandboxError> {
        Ok(Self {
            python: cstring(python)?,
            code: CString::new(RELAY_PY)
                .map_err(|e| SandboxError::Protocol(format!("the relay program: {e}")))?,
        })
    }

    /// Execs the relay for `child`, with no descriptor left open; returns only if the exec
    /// failed (the caller then relays in place, closing them).
    ///
    /// # Safety
    /// Only between fork and exec: async-signal-safe calls, no allocation.
    unsafe fn exec(&self, child: libc::pid_t) {
        // The pid in decimal, NUL-terminated, on the stack.
        let mut digits = [0u8; 24];
        let mut at = digits.len() - 1;
        let mut rest = child.unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let argv: [*const libc::c_char; 7] = [
            self.python.as_ptr(),
            c"-I".as_ptr(),
            c"-S".as_ptr(),
            c"-c".as_ptr(),
            self.code.as_ptr(),
            digits[at..].as_ptr().cast(),
            std::ptr::null(),
        ];
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];
        // SAFETY: plain syscalls on values built before the fork or on this stack.
        unsafe {
            // Every descriptor closes at the exec, std's exec-error pipe included, so the
            // parent's spawn returns once the relay runs (CLOSE_RANGE_CLOEXEC, Linux 5.11;
            // before that, close them now).
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
            }
            libc::execve(self.python.as_ptr(), argv.as_ptr(), envp.as_ptr());
        }
    }
}

/// Between fork and exec: unshare a PID namespace and fork again. The outer process stays
/// behind to wait and relay the exit status (it never returns): in place, or, given `relay`,
/// as the small program it execs (for a long-lived worker, see [`ExecRelay`]); the inner
/// one, PID 1 of the new namespace, returns `Ok` and goes on to exec. When PID 1 exits, the
/// kernel kills every process left in its namespace; when the outer process is killed, PID 1
/// gets SIGKILL.
///
/// # Safety
/// Only for `pre_exec`: async-signal-safe calls only.
pub(crate) unsafe fn become_pid_namespace_init(relay: Option<&ExecRelay>) -> std::io::Result<()> {
    // SAFETY: plain syscalls; see the function's contract.
    unsafe {
        if libc::unshare(libc::CLONE_NEWPID) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let pid = libc::fork();
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid > 0 {
            if let Some(relay) = relay {
                relay.exec(pid);
            }
            relay_child_status(pid);
        }
        // Root still (no credential change follows before exec in the pool's case; the fresh
        // executor sets it again after its uid change): die with the relay.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
