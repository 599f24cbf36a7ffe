//! Scratch directories with real processes: a child (this test binary re-run as a helper)
//! makes workspaces and leaks them on purpose; they are gone after a normal exit, SIGTERM and
//! SIGINT; after a SIGKILL that takes the janitor too, the next run reclaims them. And a
//! `TMPDIR` inside a 0700 directory does not stop jobs from running.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentrl_gym::sandbox::{scratch_dir, Executor, Job, Limits, PoolExecutor};

const HELPER_ENV: &str = "AGENTRL_SCRATCH_HELPER";
/// The helper's name as libtest knows it in the `gym` test target (module path, crate name
/// dropped), for `--exact`.
const HELPER_TEST: &str = "scratch_dirs::helper_process";

/// Not a test of its own: the body of the child processes the tests below start.
#[test]
fn helper_process() {
    let Ok(mode) = std::env::var(HELPER_ENV) else {
        return;
    };
    let dirs: Vec<_> = ["agentrl-ws-", "agentrl-ws-", "agentrl-verify-"]
        .iter()
        .map(|prefix| scratch_dir(prefix).expect("scratch dir"))
        .collect();
    let run_dir = dirs[0].path().parent().unwrap().to_path_buf();
    let mut extra = String::new();
    if mode == "job" {
        let pool = PoolExecutor::new(1).expect("pool");
        let out = pool
            .run(&Job {
                workspace: dirs[0].path().to_path_buf(),
                program: "import os\nos.write(3, b'ran')\n".into(),
                stdin: Vec::new(),
                limits: Limits::default(),
            })
            .expect("job");
        extra = format!(
            " {:?} {}",
            out.termination,
            String::from_utf8_lossy(&out.result)
        );
    }
    // Leaked on purpose: only the process-level cleanup may remove them.
    for dir in dirs {
        let _ = dir.keep();
    }
    println!("READY {}{extra}", run_dir.display());
    if mode == "wait" {
        std::thread::sleep(Duration::from_secs(60));
    }
    if mode == "exit" {
        // Exit normally once the test has counted the workspaces (its stdin closes):
        // exiting at once would race the count with the exit-time cleanup.
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

/// Starts the helper with `TMPDIR=tmpdir`; returns it and the first line it printed after
/// `READY `.
fn start_helper(mode: &str, tmpdir: &Path) -> (Child, String) {
    start_helper_with(mode, Some(tmpdir))
}

/// [`start_helper`], with `TMPDIR` removed from its environment when `tmpdir` is `None`.
fn start_helper_with(mode: &str, tmpdir: Option<&Path>) -> (Child, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    match tmpdir {
        Some(dir) => command.env("TMPDIR", dir),
        None => command.env_remove("TMPDIR"),
    };
    let mut child = command
        .args(["--exact", HELPER_TEST, "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        // libtest may print its "test scratch_dirs::helper_process ... " first, on our line.
        .find_map(|l| l.split_once("READY ").map(|(_, rest)| rest.to_string()))
        .expect("the helper printed READY");
    // Keep reading, so that the helper's last lines do not meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, line)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
}

/// A TMPDIR of the test's own, so that the runs of one test see only each other.
fn test_tmpdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("agentrl-scratch-test-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn workspaces_in(run_dir: &Path) -> usize {
    std::fs::read_dir(run_dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn workspaces_are_removed_on_normal_exit_sigterm_and_sigint() {
    let tmpdir = test_tmpdir();
    for how in ["exit", "SIGTERM", "SIGINT"] {
        let mode = if how == "exit" { "exit" } else { "wait" };
        let (mut child, line) = start_helper(mode, tmpdir.path());
        let run_dir = PathBuf::from(line.trim());
        assert!(run_dir.starts_with(tmpdir.path()), "{how}: {line}");
        assert_eq!(workspaces_in(&run_dir), 3, "{how}: {line}");
        match how {
            "SIGTERM" => signal(child.id(), libc::SIGTERM),
            "SIGINT" => signal(child.id(), libc::SIGINT),
            // Closing its stdin lets the helper return from main.
            _ => drop(child.stdin.take()),
        }
        let status = child.wait().unwrap();
        println!("{how}: helper ended with {status}");
        if how == "exit" {
            assert!(status.success(), "{how}: {status}");
        }
        wait_until(&format!("{how}: {} removed", run_dir.display()), || {
            !run_dir.exists()
        });
    }
}

/// The janitor of a process, found by its command line (`sh -c ... agentrl-janitor RUN_DIR`).
fn janitor_of(run_dir: &Path) -> Option<u32> {
    let needle = format!("agentrl-janitor\0{}\0", run_dir.display());
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&needle)
                .then_some(pid)
        })
}

#[test]
fn workspaces_of_a_sigkilled_process_are_reclaimed_by_the_next_run() {
    let tmpdir = test_tmpdir();
    let (mut child, line) = start_helper("wait", tmpdir.path());
    let stale = PathBuf::from(line.trim());
    let janitor = janitor_of(&stale).expect("the helper has a janitor");
    // Kill both, the janitor first: nothing is left to clean up.
    signal(janitor, libc::SIGKILL);
    signal(child.id(), libc::SIGKILL);
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        workspaces_in(&stale),
        3,
        "{} should have been left",
        stale.display()
    );

    let (mut next, line) = start_helper("exit", tmpdir.path());
    next.wait().unwrap();
    assert_ne!(PathBuf::from(line.trim()), stale);
    assert!(
        !stale.exists(),
        "{} was not reclaimed by the next run",
        stale.display()
    );
}

/// `TMPDIR` inside a 0700 directory: jobs still run (their workspaces go where the job uid can
/// reach them), and a workspace the job uid cannot reach is an error naming the directory.
#[test]
fn a_tmpdir_inside_a_0700_directory_does_not_break_jobs() {
    let private = tempfile::Builder::new()
        .prefix("agentrl-private-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let tmpdir = private.path().join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let (mut child, line) = start_helper("job", &tmpdir);
    let status = child.wait().unwrap();
    assert!(status.success(), "{line}");
    assert!(line.ends_with("Exited { code: 0 } ran"), "{line}");

    let pool = PoolExecutor::new(1).unwrap();
    if !pool.info().privilege_drop {
        println!("no uid drop here: jobs run as us and reach every workspace");
        return;
    }
    let run_dir = PathBuf::from(line.split(' ').next().unwrap());
    assert!(
        !run_dir.starts_with(private.path()),
        "workspaces were put under the 0700 directory: {line}"
    );
    let unreachable = tmpdir.join("ws");
    std::fs::create_dir(&unreachable).unwrap();
    let error = pool
        .run(&Job {
            workspace: unreachable,
            program: "pass\n".into(),
            stdin: Vec::new(),
            limits: Limits::default(),
        })
        .expect_err("a workspace under a 0700 directory");
    let private_name = private.path().canonicalize().unwrap();
    assert!(
        error
            .to_string()
            .contains(&private_name.display().to_string()),
        "the error does not name the 0700 directory: {error}"
    );
}

/// Without `TMPDIR`, workspaces go to `/dev/shm` when it is a tmpfs with at least 1 GiB free
/// (no disk inode churn per episode), else to the system temporary directory; jobs run there.
#[test]
fn without_tmpdir_workspaces_go_to_memory_when_it_has_room() {
    let (mut child, line) = start_helper_with("job", None);
    let status = child.wait().unwrap();
    assert!(status.success(), "{line}");
    assert!(line.ends_with("Exited { code: 0 } ran"), "{line}");
    let run_dir = PathBuf::from(line.split(' ').next().unwrap());
    // SAFETY: statfs fills the zeroed struct we pass.
    let shm_has_room = unsafe {
        let mut stats: libc::statfs = std::mem::zeroed();
        libc::statfs(c"/dev/shm".as_ptr(), &mut stats) == 0
            && stats.f_type as i64 == 0x0102_1994
            && (stats.f_bavail as u64).saturating_mul(stats.f_bsize as u64) >= 1 << 30
    };
    // The system temporary directory, as `std::env::temp_dir` reads it without `TMPDIR`.
    let expected = PathBuf::from(if shm_has_room { "/dev/shm" } else { "/tmp" });
    assert_eq!(run_dir.parent(), Some(expected.as_path()), "{line}");
}
