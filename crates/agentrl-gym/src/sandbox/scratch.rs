//! Scratch directories for sandboxed jobs (episode workspaces `agentrl-ws-*`, the verifier's
//! `agentrl-verify-*`, the bench's): where they live, and how none of them outlives its process.
//!
//! Layout: every directory of one process sits in that process's *run directory*,
//! `BASE/agentrl-run-PIDNS-PID-START`, mode 0711 (the job uids may pass through it, but not
//! list it). PIDNS is the inode of our PID namespace, PID our process id and START its start
//! time in clock ticks (field 22 of `/proc/PID/stat`), so the name says who owns it even after
//! the pid is reused.
//!
//! Cleanup, for every way a process ends:
//! - while it runs, each [`tempfile::TempDir`] removes itself when dropped;
//! - when it ends, however it ends (normal exit, SIGTERM, Ctrl-C, a panic that aborts, and
//!   SIGKILL too), a *janitor* removes the run directory: a `/bin/sh` started with the run
//!   directory, in a session of its own and ignoring terminal signals, that waits for end of
//!   file on a pipe only we hold and then runs `rm -rf`. No signal handler is installed, so
//!   the program's own handling of SIGINT and SIGTERM stays as it was;
//! - whatever a janitor could not remove (it was killed too, or the machine went down) is
//!   reclaimed by the next process that makes scratch directories under the same base: a run
//!   directory of our PID namespace whose owner is gone (no such pid, or one with another start
//!   time) is removed.
//!
//! Quotas: a workspace made by [`bounded_scratch_dir`] gets a tmpfs of its own, mounted by this
//! (trusted) process with `size=` and `nr_inodes=` from the job's [`Limits`], so a candidate that
//! writes without end gets `ENOSPC` at its quota and takes no more of the host's memory or inodes
//! than that. Mounting needs root (`CAP_SYS_ADMIN`); elsewhere the workspace is a plain
//! directory, [`workspace_quota`] says why, only `RLIMIT_FSIZE` bounds each file while a job
//! runs, and a check by the trusted side after each test run ([`ScratchDir::limit_hit`]) is all
//! that reports a workspace past its quota: it does not stop the writes. The mount is undone
//! when the directory is dropped; after a crash, by the janitor or the next process's reclaim, which
//! detach every mount below a run directory before removing it. The mounts live in the host's
//! mount namespace (the trusted side writes the task's files into them, and a multi-threaded
//! process cannot take a mount namespace of its own), so they show in its mount table while
//! they last: one per live episode and one per verdict in progress. A mount and its unmount
//! cost about 0.1 ms, against some 14 ms of a verdict; a host daemon that follows the mount
//! table (systemd does) sees each of them.
//!
//! Base: `TMPDIR` when it is set; otherwise `/dev/shm` when it is a tmpfs with at least
//! [`MEMORY_BASE_MIN_FREE`] free, else `/tmp`. A workspace is made and removed for every
//! episode and verdict, and on a disk file system that inode churn is not free: on ext4 it
//! was 7% of a TinyAgent run's samples (`perf`: `find_inode_bit`, `recently_deleted`), and 25
//! steps of 4 x 8 episodes took 10.3-11.9 s with workspaces under `/tmp` against 8.9 s under
//! `/dev/shm` (2 cores). The free-space floor keeps a container's small default `/dev/shm`
//! out. Any base is used only when the job uids can reach it. With the uid drop on, every
//! directory above a workspace must be searchable by others; a `TMPDIR` inside a 0700
//! directory (as Python's `mkdtemp` makes) is not, and jobs there would fail to start. Then
//! `/tmp` is used instead, with a warning naming both; when neither is reachable, making a
//! scratch directory fails with an error naming the directory that blocks.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use super::host::HostSetup;
use super::{LimitHit, Limits, SandboxError};

/// Run directories start with this.
const RUN_DIR_PREFIX: &str = "agentrl-run-";

/// Waits for end of file on stdin, then removes the run directory (`$1`). Terminal signals are
/// ignored: Ctrl-C reaches the whole foreground process group, and the janitor must outlive us.
/// Workspace tmpfs mounts below the run directory are detached first (`rm` cannot remove a
/// mount point).
const JANITOR_SCRIPT: &str = "trap '' HUP INT TERM QUIT PIPE; read -r _; \
    for m in $(awk -v d=\"$1/\" 'index($2, d) == 1 { print $2 }' /proc/self/mounts); do \
    umount -l \"$m\" 2>/dev/null; done; exec rm -rf -- \"$1\"";

/// This process's run directory, made on first use.
struct RunDir {
    path: PathBuf,
    /// The write end of the janitor's stdin: never written, closed by the kernel when we end.
    /// `None` when the janitor could not be started (the next process reclaims the directory).
    _janitor: Option<Mutex<ChildStdin>>,
}

static RUN_DIR: OnceLock<Result<RunDir, String>> = OnceLock::new();

fn io_error(message: String) -> std::io::Error {
    std::io::Error::other(message)
}

/// A new scratch directory `PREFIX*` (mode 0700) in this process's run directory; removed when
/// the returned [`tempfile::TempDir`] is dropped, and in any case when the process ends.
pub fn scratch_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let run_dir = RUN_DIR
        .get_or_init(|| RunDir::create().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io_error(format!("scratch directory for sandboxed jobs: {e}")))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&run_dir.path)
        .map_err(|e| {
            io_error(format!(
                "create a scratch directory in {}: {e}",
                run_dir.path.display()
            ))
        })
}

/// What one workspace may hold: bytes and inodes (files, directories and links, the
/// workspace itself included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub bytes: u64,
    pub files: u64,
}

impl Quota {
    /// The quota of a job run under `limits`.
    pub fn of(limits: &Limits) -> Quota {
        Quota {
            bytes: limits.disk_bytes,
            files: limits.max_files,
        }
    }
}

/// A scratch directory from [`bounded_scratch_dir`]: a tmpfs of its own is mounted on it when
/// the machine allows ([`workspace_quota`]). Unmounted when dropped, then removed.
#[derive(Debug)]
pub struct ScratchDir {
    quota: Quota,
    /// A tmpfs of `quota` is mounted on `dir` (unmounted in `drop`, before `dir` is removed).
    mounted: bool,
    dir: tempfile::TempDir,
}

impl ScratchDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The quota the kernel enforces on this directory, if one does.
    pub fn quota(&self) -> Option<Quota> {
        self.mounted.then_some(self.quota)
    }

    /// The quota limit this directory has reached, if any. On its own tmpfs: no room left for
    /// another write (under 64 KiB free, so a writer's last short write counts) or for another
    /// file. Without one (no root), the trusted side's after-the-fact check: what the directory
    /// holds, counted up to the quota, is past it (the job was not stopped at it).
    pub fn limit_hit(&self) -> Option<LimitHit> {
        let quota = self.quota;
        if !self.mounted {
            return over_quota(self.path(), quota);
        }
        let stats = statvfs(self.path()).ok()?;
        let free_bytes = (stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64);
        if free_bytes < 64 << 10 {
            Some(LimitHit::Disk {
                megabytes: quota.bytes >> 20,
            })
        } else if stats.f_favail == 0 {
            Some(LimitHit::Files { count: quota.files })
        } else {
            None
        }
    }
}

/// Walks `dir` (links not followed) until what it holds passes `quota`; the limit passed.
fn over_quota(dir: &Path, quota: Quota) -> Option<LimitHit> {
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).ok()?.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            files += 1;
            bytes += meta.len();
            if meta.is_dir() {
                pending.push(entry.path());
            }
            if bytes > quota.bytes {
                return Some(LimitHit::Disk {
                    megabytes: quota.bytes >> 20,
                });
            }
            if files >= quota.files {
                return Some(LimitHit::Files { count: quota.files });
            }
        }
    }
    None
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = unmount(self.path()) {
                tracing::warn!("unmount workspace {}: {e}", self.path().display());
            }
        }
    }
}

fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    let path = c_path(path)?;
    // SAFETY: statvfs fills the zeroed struct we pass.
    unsafe {
        let mut stats: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stats) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stats)
    }
}

fn c_path(path: &Path) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io_error(format!("path contains a NUL byte: {}", path.display())))
}

/// Mounts a tmpfs of `quota` on `dir`, with the mode the directory had, no device files and
/// no set-uid programs.
fn mount_tmpfs(dir: &Path, quota: Quota) -> std::io::Result<()> {
    let target = c_path(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    // The workspace directory itself takes one inode.
    let options = std::ffi::CString::new(format!(
        "size={},nr_inodes={},mode={mode:o}",
        quota.bytes.max(4096),
        quota.files.saturating_add(1)
    ))
    .map_err(|e| io_error(e.to_string()))?;
    // SAFETY: valid C strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"agentrl-workspace".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches the mount on `dir` (lazily: a job process still inside it cannot block it).
fn unmount(dir: &Path) -> std::io::Result<()> {
    let target = c_path(dir)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches every mount strictly below `dir` (workspace tmpfs left by a process that died).
fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter(|point| Path::new(point).starts_with(dir) && Path::new(point) != dir)
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        if let Err(e) = unmount(Path::new(point)) {
            tracing::debug!("could not unmount {point}: {e}");
        }
    }
}

/// Whether workspaces get a tmpfs of their own here: `Ok`, or why not. Probed once, by
/// mounting one on a scratch directory.
pub fn workspace_quota() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let dir = scratch_dir("agentrl-quota-probe-").map_err(|e| e.to_string())?;
            let quota = Quota {
                bytes: 1 << 20,
                files: 16,
            };
            mount_tmpfs(dir.path(), quota)
                .map_err(|e| format!("mount a tmpfs on {}: {e}", dir.path().display()))?;
            unmount(dir.path()).map_err(|e| format!("unmount {}: {e}", dir.path().display()))
        })
        .clone()
}

/// A new scratch directory like [`scratch_dir`], with a tmpfs of `quota` of its own where
/// [`workspace_quota`] allows (else a plain directory).
pub fn bounded_scratch_dir(prefix: &str, quota: Quota) -> std::io::Result<ScratchDir> {
    let dir = scratch_dir(prefix)?;
    if workspace_quota().is_err() {
        return Ok(ScratchDir {
            quota,
            mounted: false,
            dir,
        });
    }
    mount_tmpfs(dir.path(), quota).map_err(|e| {
        io_error(format!(
            "mount the workspace tmpfs on {}: {e}",
            dir.path().display()
        ))
    })?;
    Ok(ScratchDir {
        quota,
        mounted: true,
        dir,
    })
}

/// Where scratch directories go in this process (the run directory), if one was made.
pub fn scratch_root() -> Option<PathBuf> {
    RUN_DIR.get()?.as_ref().ok().map(|d| d.path.clone())
}

/// Identity of a process: (PID namespace inode, pid, start time in clock ticks).
type Owner = (u64, u32, u64);

fn pid_namespace_inode() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/self/ns/pid")?.ino())
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`), or `None` when there is no such
/// process.
// Public for the integration tests (tests/gym/scratch_owners.rs).
#[doc(hidden)]
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: count from the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

// Public for the integration tests (tests/gym/scratch_owners.rs).
#[doc(hidden)]
pub fn run_dir_name((pidns, pid, start): Owner) -> String {
    format!("{RUN_DIR_PREFIX}{pidns}-{pid}-{start}")
}

// Public for the integration tests (tests/gym/scratch_owners.rs).
#[doc(hidden)]
pub fn parse_run_dir_name(name: &str) -> Option<Owner> {
    let mut fields = name.strip_prefix(RUN_DIR_PREFIX)?.split('-');
    let owner = (
        fields.next()?.parse().ok()?,
        fields.next()?.parse().ok()?,
        fields.next()?.parse().ok()?,
    );
    fields.next().is_none().then_some(owner)
}

/// Removes the run directories under `base` whose owner, a process of our PID namespace, is
/// gone. Directories of other PID namespaces are left alone: we cannot see their processes.
/// Returns the directories removed.
pub(crate) fn reclaim(base: &Path) -> Vec<PathBuf> {
    let Ok(pidns) = pid_namespace_inode() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((ns, pid, start)) = name.to_str().and_then(parse_run_dir_name) else {
            continue;
        };
        if ns != pidns || start_time(pid) == Some(start) {
            continue;
        }
        let path = entry.path();
        unmount_below(&path);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) => tracing::debug!("could not reclaim {}: {e}", path.display()),
        }
    }
    removed
}

/// Checks that a process of another uid can reach `dir`: every directory from `/` down to it
/// must be searchable by others. Names the first one that is not.
// Public for the integration tests (tests/gym/scratch_owners.rs).
#[doc(hidden)]
pub fn reachable_by_others(dir: &Path) -> Result<(), String> {
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    for ancestor in dir.ancestors() {
        let meta =
            std::fs::metadata(ancestor).map_err(|e| format!("{}: {e}", ancestor.display()))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} has mode {:04o}: the sandbox's job uids cannot pass through it \
                 (others need search permission, o+x)",
                ancestor.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// Free space `/dev/shm` needs to hold workspaces (see the module doc).
pub const MEMORY_BASE_MIN_FREE: u64 = 1 << 30;

/// `TMPDIR` when set, else `/dev/shm` when it is memory-backed with room, else the system
/// temporary directory.
fn preferred_base() -> PathBuf {
    if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
        return std::env::temp_dir();
    }
    let shm = Path::new("/dev/shm");
    if memory_backed_with_room(shm) {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Whether `dir` is a tmpfs directory we may write, with [`MEMORY_BASE_MIN_FREE`] free.
fn memory_backed_with_room(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct we pass; access only reads the path.
    unsafe {
        let mut stats: libc::statfs = std::mem::zeroed();
        if libc::statfs(path.as_ptr(), &mut stats) != 0 {
            return false;
        }
        let free = (stats.f_bavail as u64).saturating_mul(stats.f_bsize as u64);
        stats.f_type as i64 == TMPFS_MAGIC
            && free >= MEMORY_BASE_MIN_FREE
            && libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) == 0
    }
}

/// The base directory ([`preferred_base`]), or `/tmp` when the job uids cannot reach it.
fn choose_base(jobs_run_as_other_uid: bool) -> Result<PathBuf, String> {
    let preferred = preferred_base();
    if !jobs_run_as_other_uid {
        return Ok(preferred);
    }
    let why = match reachable_by_others(&preferred) {
        Ok(()) => return Ok(preferred),
        Err(why) => why,
    };
    let fallback = PathBuf::from("/tmp");
    match reachable_by_others(&fallback) {
        Ok(()) => {
            tracing::warn!(
                "{} is unreachable for sandboxed jobs ({why}); their workspaces go under {}",
                preferred.display(),
                fallback.display()
            );
            Ok(fallback)
        }
        Err(fallback_why) => Err(format!(
            "no directory for sandbox workspaces: {}: {why}; {}: {fallback_why}. \
             Set TMPDIR to a directory every user can search",
            preferred.display(),
            fallback.display()
        )),
    }
}

impl RunDir {
    fn create() -> Result<RunDir, String> {
        let drop_uid = super::host::host().map(|h| h.drop_uid).unwrap_or(false);
        let base = choose_base(drop_uid)?;
        for path in reclaim(&base) {
            tracing::info!("removed {} (its process is gone)", path.display());
        }
        let pid = std::process::id();
        let owner = (
            pid_namespace_inode().map_err(|e| format!("/proc/self/ns/pid: {e}"))?,
            pid,
            start_time(pid).ok_or("cannot read our own /proc/PID/stat")?,
        );
        let path = base.join(run_dir_name(owner));
        std::fs::create_dir(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        let janitor = match start_janitor(&path) {
            Ok(stdin) => Some(Mutex::new(stdin)),
            Err(e) => {
                tracing::warn!(
                    "no janitor for {} ({e}): if this process is killed, the next run removes it",
                    path.display()
                );
                None
            }
        };
        Ok(RunDir {
            path,
            _janitor: janitor,
        })
    }
}

fn start_janitor(run_dir: &Path) -> std::io::Result<ChildStdin> {
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", JANITOR_SCRIPT, "agentrl-janitor"])
        .arg(run_dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            // Its own session: no terminal signal or process-group kill aimed at us reaches it.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| io_error("janitor stdin missing".into()))?;
    // Nothing is ever written; a flush checks the pipe is open.
    stdin.flush()?;
    // The janitor outlives us by design; it is never waited for (init reaps it). Dropping the
    // handle neither kills nor waits.
    drop(child);
    Ok(stdin)
}

/// The canonical absolute workspace path, checked to be a directory that the job can reach:
/// under the uid drop, a workspace below a 0700 directory would fail every job (see the
/// module doc), so that is an error naming the directory.
pub(crate) fn canonical_workspace(
    host: &HostSetup,
    workspace: &Path,
) -> Result<PathBuf, SandboxError> {
    let path = workspace
        .canonicalize()
        .map_err(|source| SandboxError::Io {
            what: format!("workspace {}", workspace.display()),
            source,
        })?;
    if !path.is_dir() {
        return Err(SandboxError::Io {
            what: format!("workspace {}", workspace.display()),
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    if host.drop_uid {
        reachable_by_others(&path).map_err(|why| SandboxError::Io {
            what: format!("workspace {}", workspace.display()),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
        })?;
    }
    Ok(path)
}
