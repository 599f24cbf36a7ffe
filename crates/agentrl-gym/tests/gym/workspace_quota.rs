//! Workspace quotas: an episode whose code writes 2 GiB, or a million files, gets ENOSPC at its
//! workspace's quota (a tmpfs of its own, `limits.disk_mib` / `limits.files`), the test tool's
//! observation names the limit, the host's memory and its scratch file system move by no more
//! than the quota, and the next episode runs normally; the same through `gym serve` with
//! several episodes at once, whose total quota the server bounds. A task's own `[limits]` keys
//! set the quota, and bad values are refused naming the key.
//!
//! The writer runs when `mean` is called (by the public tests and the hidden cases), not at
//! import, so nothing here depends on how the tests import the module.

use std::path::Path;
use std::sync::{Arc, Mutex};

use agentrl_gym::sandbox::{scratch_root, Executor, Limits};
use agentrl_gym::service::{GymServeOptions, GymServer};
use agentrl_gym::task::TaskLimits;
use agentrl_gym::{
    Action, BugFixEnv, Env, EnvConfig, Observation, OutcomeCache, Reward, TaskSet, ToolCall,
};
use serde_json::{json, Value};

use crate::{post_json as post, shared};

const TASK: &str = "intdiv-000";
const MODULE: &str = "averages.py";

/// One quota test at a time: each measures the host's memory while it writes.
static SERIAL: Mutex<()> = Mutex::new(());

fn call(name: &str, arguments: Value) -> Action {
    Action::Call(ToolCall {
        name: name.into(),
        arguments,
    })
}

/// The reference fix whose `mean` first runs `writer` (once per process) and fails loudly
/// unless the writer ended on ENOSPC.
fn writing_module(tasks: &TaskSet, writer: &str) -> String {
    let fix = &tasks.get(TASK).unwrap().reference[MODULE];
    let body: String = writer.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "{fix}\n\ndef _agentrl_write():\n{body}\n\n_agentrl_mean = mean\n_agentrl_state = []\n\n\n\
         def mean(values):\n    \
             if not _agentrl_state:\n        \
                 import errno\n        \
                 try:\n            \
                     _agentrl_write()\n            \
                     _agentrl_state.append('no error')\n        \
                 except OSError as e:\n            \
                     _agentrl_state.append(errno.errorcode.get(e.errno, e.errno))\n    \
             if _agentrl_state != ['ENOSPC']:\n        \
                 raise RuntimeError('the writer ended with %s, not ENOSPC' % _agentrl_state)\n    \
             return _agentrl_mean(values)\n"
    )
}

/// 2 GiB in 1 MiB files (each file within RLIMIT_FSIZE).
const TWO_GIB: &str = "chunk = b'x' * (1 << 20)\n\
    for i in range(2048):\n    \
        with open('junk%d' % i, 'wb') as f:\n        \
            f.write(chunk)\n";

/// A million empty files.
const MILLION_FILES: &str = "for i in range(1000000):\n    open('f%d' % i, 'w').close()\n";

/// `(free bytes, free inodes)` of the file system holding `path`.
fn free(path: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs fills the zeroed struct.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0, "{}", path.display());
        (s.f_bavail as u64 * s.f_frsize as u64, s.f_favail as u64)
    }
}

/// `Shmem` of `/proc/meminfo` in bytes: what tmpfs files hold of the host's memory.
fn shmem() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo.lines().find(|l| l.starts_with("Shmem:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Whether the quota layer is on here; prints why not otherwise.
fn quota_on(executor: &dyn Executor) -> bool {
    let info = executor.info();
    if !info.workspace_quota {
        eprintln!("workspace quota off here (needs root): {:?}", info.notes);
    }
    info.workspace_quota
}

/// The test tool's report after `writer` ran in `env`'s episode, and the reward of submitting.
fn write_and_submit(env: &mut BugFixEnv, writer: &str) -> (Observation, Reward) {
    let text = writing_module(env.tasks(), writer);
    env.reset(TASK).unwrap();
    env.step(&call("edit", json!({"path": MODULE, "text": text})))
        .unwrap();
    let tests = env.step(&call("test", json!({}))).unwrap().observation;
    let workspace = env.workspace().unwrap().to_path_buf();
    let used: u64 = walk_sizes(&workspace).0;
    let files = walk_sizes(&workspace).1;
    let limits = Limits::default();
    assert!(
        used <= limits.disk_bytes && files <= limits.max_files,
        "the workspace holds {used} bytes in {files} files, past its quota"
    );
    let reward = env
        .step(&call("submit", json!({})))
        .unwrap()
        .reward
        .unwrap();
    (tests, reward)
}

/// `(bytes, entries)` below `dir`.
fn walk_sizes(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total.1 += 1;
        if meta.is_dir() {
            let (b, n) = walk_sizes(&entry.path());
            total.0 += b;
            total.1 += n;
        } else {
            total.0 += meta.len();
        }
    }
    total
}

/// A normal episode: the reference fix, tests clean, solved.
fn assert_next_episode_runs(env: &mut BugFixEnv) {
    let fix = env.tasks().get(TASK).unwrap().reference[MODULE].clone();
    env.reset(TASK).unwrap();
    env.step(&call("edit", json!({"path": MODULE, "text": fix})))
        .unwrap();
    let tests = env.step(&call("test", json!({}))).unwrap().observation;
    let Observation::Tests(report) = &tests else {
        panic!("{tests:?}")
    };
    assert!(
        report.crashed.is_none() && report.failed.is_empty(),
        "{report:?}"
    );
    let reward = env
        .step(&call("submit", json!({})))
        .unwrap()
        .reward
        .unwrap();
    assert!(reward.solved(), "{reward:?}");
}

/// Writes with `writer` in an episode and checks ENOSPC at the quota, the observation, the
/// host's memory and scratch file system, and the next episode.
fn assert_quota_holds(writer: &str, expected: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tasks, executor) = shared();
    if !quota_on(executor.as_ref()) {
        return;
    }
    let mut env = BugFixEnv::new(tasks, executor, OutcomeCache::new(), EnvConfig::default());
    env.reset(TASK).unwrap();
    let base = scratch_root().expect("a run directory once an episode started");
    let (bytes_before, inodes_before) = free(&base);
    let shmem_before = shmem();
    let (tests, reward) = write_and_submit(&mut env, writer);
    let Observation::Tests(report) = &tests else {
        panic!("{tests:?}")
    };
    // The candidate saw ENOSPC (else `mean` raises and the tests fail) and the observation
    // names the limit.
    assert!(
        report.failed.is_empty() && !report.passed.is_empty(),
        "the writer did not end on ENOSPC: {report:?}"
    );
    let crashed = report.crashed.as_deref().unwrap_or_default();
    assert!(
        crashed.contains(expected) && crashed.contains("ENOSPC"),
        "the observation does not name the limit: {report:?}"
    );
    // The files it left are the tamper check's to judge (they are not the task's); the
    // submit itself ends normally.
    assert!(reward.tampered, "{reward:?}");
    // The verifier's workspaces have the quota too: its public run and hidden cases see
    // ENOSPC (else `mean` raises and they fail).
    let task = env.tasks().get(TASK).unwrap();
    let modules = std::collections::BTreeMap::from([(
        MODULE.to_string(),
        writing_module(env.tasks(), writer),
    )]);
    let verdict = env.verify_modules(&task, &modules).unwrap();
    assert_eq!(
        verdict.hidden_passed() as usize,
        task.hidden.len(),
        "{verdict:?}"
    );
    let public = verdict.public.expect("the pristine public run");
    assert!(public.failed.is_empty(), "{public:?}");
    let limits = Limits::default();
    let (bytes_after, inodes_after) = free(&base);
    assert!(
        bytes_before.saturating_sub(bytes_after) <= limits.disk_bytes
            && inodes_before.saturating_sub(inodes_after) <= limits.max_files,
        "the scratch file system lost {} bytes and {} inodes",
        bytes_before.saturating_sub(bytes_after),
        inodes_before.saturating_sub(inodes_after)
    );
    // Other tests' workspaces come and go meanwhile: a margin, far below the 2 GiB asked for.
    let grown = shmem().saturating_sub(shmem_before);
    assert!(
        grown <= limits.disk_bytes + (64 << 20),
        "the host's tmpfs memory grew by {grown} bytes"
    );
    assert_next_episode_runs(&mut env);
}

#[test]
fn writing_two_gib_stops_at_the_byte_quota() {
    assert_quota_holds(TWO_GIB, "workspace limit of 64 MB reached");
}

#[test]
fn writing_a_million_files_stops_at_the_file_quota() {
    assert_quota_holds(MILLION_FILES, "workspace limit of 10000 files reached");
}

/// Several `gym serve` episodes write at once: each gets ENOSPC at its own quota, its
/// observation says so; the server refuses a start past `max_workspace_mib` and takes one
/// again once an episode ends.
#[test]
fn gym_serve_bounds_each_episode_and_their_total() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tasks, executor) = shared();
    if !quota_on(executor.as_ref()) {
        return;
    }
    let server = GymServer::start(
        tasks.clone(),
        executor,
        GymServeOptions {
            max_workspace_mib: 3 * 64,
            http_threads: 4,
            ..GymServeOptions::default()
        },
        "127.0.0.1:0",
    )
    .expect("the server starts");
    let url = server.url();
    let shmem_before = shmem();
    let ids: Vec<String> = (0..3)
        .map(|_| {
            let (status, started) = post(&format!("{url}/v1/episodes"), json!({ "task_id": TASK }));
            assert_eq!(status, 201, "{started}");
            started["episode_id"].as_str().unwrap().to_string()
        })
        .collect();
    let (status, full) = post(&format!("{url}/v1/episodes"), json!({ "task_id": TASK }));
    assert_eq!(status, 429, "{full}");
    assert!(full.to_string().contains("--max-workspace-mib"), "{full}");
    let text = writing_module(&tasks, TWO_GIB);
    let reports: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                let (url, text) = (&url, &text);
                scope.spawn(move || {
                    let step = |action: Value| {
                        post(
                            &format!("{url}/v1/episodes/{id}/step"),
                            json!({ "action": action }),
                        )
                        .1
                    };
                    step(json!({"kind": "call", "name": "edit", "arguments": {"path": MODULE, "text": text}}));
                    step(json!({"kind": "call", "name": "test", "arguments": {}}))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for report in &reports {
        let text = report.to_string();
        assert!(
            text.contains("workspace limit of 64 MB reached"),
            "an episode's observation does not name the limit: {text}"
        );
    }
    let grown = shmem().saturating_sub(shmem_before);
    assert!(
        grown <= (3 * 64 + 64) << 20,
        "three episodes grew the host's tmpfs memory by {grown} bytes"
    );
    let (_, load) = ureq_get(&format!("{url}/v1/load"));
    assert_eq!(load["workspace_mib"], 3 * 64, "{load}");
    // One ends: a start fits again.
    let (status, _) = post(
        &format!("{url}/v1/episodes/{}/step", ids[0]),
        json!({ "action": {"kind": "call", "name": "submit", "arguments": {}} }),
    );
    assert_eq!(status, 200);
    let (status, started) = post(&format!("{url}/v1/episodes"), json!({ "task_id": TASK }));
    assert_eq!(status, 201, "{started}");
}

fn ureq_get(url: &str) -> (u16, Value) {
    let response = ureq::get(url).call().unwrap();
    (
        response.status(),
        serde_json::from_str(&response.into_string().unwrap()).unwrap(),
    )
}

/// `[limits] disk_mib` and `files` set the quota of a task's workspaces; values out of range
/// are refused naming the key.
#[test]
fn task_limits_set_the_quota() {
    let base = Limits::default();
    let limits = TaskLimits {
        disk_mib: Some(2),
        files: Some(500),
        ..TaskLimits::default()
    }
    .apply(&base);
    assert_eq!((limits.disk_bytes, limits.max_files), (2 << 20, 500));
    assert_eq!(
        (base.disk_bytes, base.max_files),
        (64 << 20, 10_000),
        "the defaults"
    );

    let root = tempfile::tempdir().unwrap();
    let from = TaskSet::builtin_dir().unwrap().join(TASK);
    for (id, extra) in [
        ("quota-ok-000", "disk_mib = 2\nfiles = 500\n"),
        ("quota-bad-000", "disk_mib = 0\n"),
        ("quota-bad-001", "files = 5\n"),
        // In range, but too small for the task's own 2 MiB support file.
        ("quota-bad-002", "disk_mib = 1\n"),
    ] {
        let dir = root.path().join(id);
        std::fs::create_dir_all(dir.join("reference")).unwrap();
        for name in [MODULE, "test_public.py", "hidden.json"] {
            std::fs::copy(from.join(name), dir.join(name)).unwrap();
        }
        std::fs::copy(
            from.join("reference").join(MODULE),
            dir.join("reference").join(MODULE),
        )
        .unwrap();
        let mut toml = std::fs::read_to_string(from.join("task.toml"))
            .unwrap()
            .replace(TASK, id);
        if id == "quota-bad-002" {
            std::fs::write(dir.join("big.txt"), "x".repeat(2 << 20)).unwrap();
            toml = toml.replace(
                "modules = [\"averages.py\"]",
                "modules = [\"averages.py\"]\nsupport = [\"big.txt\"]",
            );
        }
        std::fs::write(dir.join("task.toml"), format!("{toml}\n[limits]\n{extra}")).unwrap();
    }
    let err = TaskSet::load_dir(root.path()).unwrap_err().to_string();
    assert!(
        err.contains("`limits.disk_mib` = 0")
            && err.contains("`limits.files` = 5")
            && err.contains("`limits.disk_mib` = 1 cannot hold the task's own files"),
        "{err}"
    );
    for bad in ["quota-bad-000", "quota-bad-001", "quota-bad-002"] {
        std::fs::remove_dir_all(root.path().join(bad)).unwrap();
    }
    let tasks = Arc::new(TaskSet::load_dir(root.path()).unwrap());
    let task = tasks.get("quota-ok-000").unwrap();
    assert_eq!(task.limits.disk_mib, Some(2));
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let executor = shared().1;
    if !quota_on(executor.as_ref()) {
        return;
    }
    let mut env = BugFixEnv::new(tasks, executor, OutcomeCache::new(), EnvConfig::default());
    let fix = task.reference[MODULE].clone();
    env.reset("quota-ok-000").unwrap();
    let body = TWO_GIB.replace('\n', "\n    ");
    let text = format!(
        "{fix}\n\ndef _fill():\n    {body}\n\ntry:\n    _fill()\nexcept OSError:\n    pass\n"
    );
    env.step(&call("edit", json!({"path": MODULE, "text": text})))
        .unwrap();
    let tests = env.step(&call("test", json!({}))).unwrap().observation;
    let Observation::Tests(report) = &tests else {
        panic!("{tests:?}")
    };
    assert!(
        report
            .crashed
            .as_deref()
            .is_some_and(|c| c.contains("workspace limit of 2 MB reached")),
        "{report:?}"
    );
    let used = walk_sizes(env.workspace().unwrap()).0;
    assert!(used <= 2 << 20, "{used} bytes in a 2 MiB workspace");
}
