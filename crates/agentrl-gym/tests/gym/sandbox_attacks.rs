//! Containment tests for both sandbox executors: each attack is contained, and the executor
//! serves a normal job right after it. Where a layer is off on this machine, the test still
//! asserts containment by the layers that are on, and prints which ones those are.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use agentrl_gym::sandbox::{
    Executor, FreshExecutor, Job, Limits, PoolExecutor, RunOutput, SandboxInfo, Termination,
};

fn pool() -> Arc<PoolExecutor> {
    static POOL: OnceLock<Arc<PoolExecutor>> = OnceLock::new();
    POOL.get_or_init(|| Arc::new(PoolExecutor::new(2).expect("start the pool")))
        .clone()
}

fn fresh() -> FreshExecutor {
    FreshExecutor::new().expect("probe the sandbox")
}

fn executors() -> Vec<(&'static str, Box<dyn Executor>)> {
    struct Shared(Arc<PoolExecutor>);
    impl Executor for Shared {
        fn run(&self, job: &Job) -> Result<RunOutput, agentrl_gym::sandbox::SandboxError> {
            self.0.run(job)
        }
        fn info(&self) -> SandboxInfo {
            self.0.info()
        }
    }
    vec![
        ("fresh", Box::new(fresh())),
        ("pool", Box::new(Shared(pool()))),
    ]
}

fn job(workspace: &Path, program: &str, limits: Limits) -> Job {
    Job {
        workspace: workspace.to_path_buf(),
        program: program.to_string(),
        stdin: Vec::new(),
        limits,
    }
}

fn quick_limits() -> Limits {
    Limits {
        time_limit: Duration::from_secs(3),
        cpu_seconds: 2,
        ..Limits::default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The executor still runs an ordinary job correctly.
fn assert_still_serves(name: &str, executor: &dyn Executor) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mod_ok.py"),
        "def f():\n    return 41 + 1\n",
    )
    .unwrap();
    let out = executor
        .run(&job(
            dir.path(),
            "import mod_ok, os\nos.write(3, str(mod_ok.f()).encode())\n",
            quick_limits(),
        ))
        .unwrap_or_else(|e| panic!("{name}: normal job after attack failed: {e}"));
    assert_eq!(
        out.termination,
        Termination::Exited { code: 0 },
        "{name}: {}",
        text(&out.stderr)
    );
    assert_eq!(out.result, b"42", "{name}");
}

fn layers(executor: &dyn Executor) -> String {
    let info = executor.info();
    format!(
        "netns={} landlock={} rlimits={} notes={:?}",
        info.network_namespace, info.landlock, info.rlimits, info.notes
    )
}

#[test]
fn normal_job_contract_holds() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("helper.py"), "VALUE = 'ok'\n").unwrap();
        let program = "import sys, os, helper\n\
            print('out', sys.argv, sys.path[0] == '', os.getcwd() == os.environ['HOME'])\n\
            print('err', file=sys.stderr)\n\
            os.write(3, (helper.VALUE + ':' + sys.stdin.read()).encode())\n\
            print(sorted(os.environ))\n\
            raise SystemExit(7)\n";
        let mut j = job(dir.path(), program, quick_limits());
        j.stdin = b"hello".to_vec();
        let out = executor.run(&j).unwrap();
        assert_eq!(
            out.termination,
            Termination::Exited { code: 7 },
            "{name}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("out ['-c'] True True\n"),
            "{name}: {stdout}"
        );
        assert!(
            stdout.contains("['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE', 'PYTHONHASHSEED', 'PYTHONIOENCODING']"),
            "{name}: environment not scrubbed: {stdout}"
        );
        assert_eq!(text(&out.stderr), "err\n", "{name}");
        assert_eq!(out.result, b"ok:hello", "{name}");
        assert!(!out.truncated);
        assert!(
            !dir.path().join("__pycache__").exists(),
            "{name}: bytecode written"
        );

        // An uncaught exception: exit 1 and a traceback naming the program.
        let out = executor
            .run(&job(
                dir.path(),
                "def boom():\n    1/0\nboom()\n",
                quick_limits(),
            ))
            .unwrap();
        assert_eq!(out.termination, Termination::Exited { code: 1 }, "{name}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("ZeroDivisionError") && stderr.contains("<agentrl>"),
            "{name}: {stderr}"
        );
        assert!(
            !stderr.contains("worker.py") && !stderr.contains("run_program"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn infinite_loop_times_out() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            time_limit: Duration::from_millis(700),
            cpu_seconds: 30,
            ..Limits::default()
        };
        let start = Instant::now();
        let out = executor
            .run(&job(dir.path(), "while True:\n    pass\n", limits))
            .unwrap();
        assert_eq!(out.termination, Termination::TimedOut, "{name}");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{name}: timeout not enforced"
        );
        // The CPU rlimit alone also stops a busy loop (SIGXCPU / SIGKILL).
        let limits = Limits {
            time_limit: Duration::from_secs(20),
            cpu_seconds: 1,
            ..Limits::default()
        };
        let out = executor
            .run(&job(dir.path(), "while True:\n    pass\n", limits))
            .unwrap();
        assert!(
            matches!(out.termination, Termination::Signaled { .. }),
            "{name}: {:?}",
            out.termination
        );
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn fork_bomb_is_contained() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let program = "import os\n\
            count = 0\n\
            failed = 0\n\
            for _ in range(200):\n\
            \x20   try:\n\
            \x20       pid = os.fork()\n\
            \x20   except OSError:\n\
            \x20       failed += 1\n\
            \x20       continue\n\
            \x20   if pid == 0:\n\
            \x20       import time\n\
            \x20       time.sleep(30)\n\
            \x20       os._exit(0)\n\
            \x20   count += 1\n\
            os.write(3, f'{count} {failed}'.encode())\n";
        let limits = Limits {
            max_processes: 16,
            ..quick_limits()
        };
        let out = executor.run(&job(dir.path(), program, limits)).unwrap();
        let result = text(&out.result);
        let parts: Vec<usize> = result
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(parts.len(), 2, "{name}: {result} {}", text(&out.stderr));
        println!(
            "{name}: fork bomb forked {} children, {} forks refused ({})",
            parts[0],
            parts[1],
            layers(executor.as_ref())
        );
        let info = executor.info();
        if info.privilege_drop {
            assert!(
                parts[0] < 16,
                "{name}: RLIMIT_NPROC not enforced: {} children",
                parts[0]
            );
            assert!(parts[1] > 0, "{name}");
        } else {
            // Root without a uid drop: RLIMIT_NPROC does not bind, so the bomb is contained
            // only by its end: the background-process test checks nothing survives a job.
            println!("{name}: no uid drop here; RLIMIT_NPROC cannot hold for root");
            assert!(
                info.pid_namespace || info.process_group_kill,
                "{name}: no layer kills leftovers"
            );
        }
        let out = executor
            .run(&job(
                dir.path(),
                "import os\nos.write(3, str(os.getuid()).encode())\n",
                quick_limits(),
            ))
            .unwrap();
        if info.privilege_drop {
            assert_ne!(text(&out.result), "0", "{name}: job ran as root");
        }
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn memory_hog_is_stopped() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let program = "try:\n    blob = bytearray(2 << 30)\n    print('allocated')\nexcept MemoryError:\n    print('refused')\n";
        let out = executor
            .run(&job(dir.path(), program, quick_limits()))
            .unwrap();
        assert_eq!(
            text(&out.stdout),
            "refused\n",
            "{name}: {:?} {}",
            out.termination,
            text(&out.stderr)
        );
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn network_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    for (name, executor) in executors() {
        let info = executor.info();
        println!("{name}: {}", layers(executor.as_ref()));
        assert!(
            info.network_namespace || info.landlock,
            "{name}: neither a network namespace nor Landlock network rules are active"
        );
        let dir = tempfile::tempdir().unwrap();
        let program = format!(
            "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    print('connected')\n\
             except OSError as e:\n    print('blocked', type(e).__name__)\n"
        );
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("blocked"),
            "{name}: {stdout} {}",
            text(&out.stderr)
        );
        assert!(
            listener.accept().is_err(),
            "{name}: the listener saw a connection"
        );
        assert_still_serves(name, executor.as_ref());
    }
}

/// A host process listening on a Unix socket: a pathname one in a directory everybody may
/// enter, with a socket file everybody may write (so file permissions do not stop a job), and
/// an abstract one. Neither may see a connection from a job, by `socket()` + `connect`, nor by
/// a datagram socketpair re-pointed with `connect` or `sendto`.
#[test]
fn host_unix_sockets_are_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};

    let host_dir = tempfile::Builder::new()
        .prefix("agentrl-test-sock-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(host_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let stream_path = host_dir.path().join("host.sock");
    let dgram_path = host_dir.path().join("host-dgram.sock");
    let stream = UnixListener::bind(&stream_path).unwrap();
    stream.set_nonblocking(true).unwrap();
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_nonblocking(true).unwrap();
    for path in [&stream_path, &dgram_path] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let abstract_name = format!("agentrl-test-{}", std::process::id());
    let abstract_listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap())
            .unwrap();
    abstract_listener.set_nonblocking(true).unwrap();

    let program = format!(
        r#"import os, socket
results = []
def attempt(label, action):
    try:
        action()
        results.append(label + ':reached')
    except OSError as e:
        results.append(label + ':' + type(e).__name__)
def connect(address, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    s.settimeout(1)
    s.connect(address)
    s.send(b'x')
def pair_connect(address):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.connect(address)
    a.send(b'x')
def pair_sendto(address):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.sendto(b'x', address)
attempt('pathname', lambda: connect({stream:?}))
attempt('pathname-dgram', lambda: connect({dgram:?}, socket.SOCK_DGRAM))
attempt('abstract', lambda: connect('\0' + {name:?}))
attempt('pair-connect', lambda: pair_connect({dgram:?}))
attempt('pair-sendto', lambda: pair_sendto({dgram:?}))
os.write(3, ' '.join(results).encode())
"#,
        stream = stream_path.display().to_string(),
        dgram = dgram_path.display().to_string(),
        name = abstract_name,
    );
    for (name, executor) in executors() {
        println!("{name}: {}", layers(executor.as_ref()));
        let info = executor.info();
        assert!(
            info.socket_filter,
            "{name}: the socket filter is off: {:?}",
            info.notes
        );
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        let result = text(&out.result);
        assert_eq!(
            out.termination,
            Termination::Exited { code: 0 },
            "{name}: {result} {}",
            text(&out.stderr)
        );
        for attempt in [
            "pathname",
            "pathname-dgram",
            "abstract",
            "pair-connect",
            "pair-sendto",
        ] {
            assert!(
                result.contains(&format!("{attempt}:"))
                    && !result.contains(&format!("{attempt}:reached")),
                "{name}: {attempt} was not blocked: {result}"
            );
        }
        assert!(
            stream.accept().is_err(),
            "{name}: the pathname listener saw a connection"
        );
        assert!(
            abstract_listener.accept().is_err(),
            "{name}: the abstract listener saw a connection"
        );
        let mut buf = [0u8; 8];
        assert!(
            dgram.recv(&mut buf).is_err(),
            "{name}: the datagram socket got a message"
        );
        assert_still_serves(name, executor.as_ref());
    }
}

/// The stdlib features built on socketpair still work under the socket filter: a stream pair,
/// an asyncio event loop (its self-pipe is a socketpair) with a thread waking it, and a duplex
/// `multiprocessing.Pipe` between two processes.
#[test]
fn socketpair_features_still_work() {
    let program = r#"import asyncio, multiprocessing, os, socket, threading
a, b = socket.socketpair()
a.sendall(b'ping')
assert b.recv(4) == b'ping'

async def main():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    threading.Thread(target=lambda: loop.call_soon_threadsafe(done.set_result, 'woken')).start()
    reader, writer = await asyncio.open_connection(sock=a)
    writer.write(b'over asyncio')
    await writer.drain()
    return await done, b.recv(12)
woken, data = asyncio.run(main())
assert (woken, data) == ('woken', b'over asyncio'), (woken, data)

parent, child = multiprocessing.Pipe()
def echo(conn):
    conn.send(conn.recv() * 2)
    conn.close()
p = multiprocessing.Process(target=echo, args=(child,))
p.start()
parent.send(21)
assert parent.recv() == 42
p.join(5)
os.write(3, b'ok')
"#;
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&job(dir.path(), program, quick_limits()))
            .unwrap();
        assert_eq!(
            (out.termination.clone(), text(&out.result)),
            (Termination::Exited { code: 0 }, "ok".to_string()),
            "{name}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn writes_outside_the_workspace_fail() {
    for (name, executor) in executors() {
        println!("{name}: {}", layers(executor.as_ref()));
        let outside = tempfile::tempdir().unwrap();
        // World-writable, like /tmp: only Landlock (or nothing) stands in the way.
        std::fs::set_permissions(
            outside.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .unwrap();
        let target = outside.path().join("agentrl-escape");
        let dir = tempfile::tempdir().unwrap();
        let program = format!(
            "import os\nfor path in [{target:?}, '/tmp/agentrl-escape-{pid}', '../agentrl-escape-{pid}']:\n\
             \x20   try:\n        open(path, 'w').write('x')\n        print('wrote', path)\n\
             \x20   except OSError as e:\n        print('denied', type(e).__name__)\n\
             open('inside.txt', 'w').write('fine')\n",
            target = target.display().to_string(),
            pid = std::process::id()
        );
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        let stdout = text(&out.stdout);
        if executor.info().landlock {
            assert!(!stdout.contains("wrote"), "{name}: {stdout}");
            assert!(
                !target.exists(),
                "{name}: escaped into {}",
                target.display()
            );
        } else {
            // Without Landlock only permissions guard: the uid drop keeps root-owned dirs safe.
            println!("{name}: Landlock off; checking the uid drop protects root-owned directories");
            assert!(
                !stdout.contains(&format!("wrote ../agentrl-escape-{}", std::process::id())),
                "{name}: {stdout}"
            );
        }
        assert!(
            !Path::new(&format!("/tmp/agentrl-escape-{}", std::process::id())).exists()
                || !executor.info().landlock
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
            "fine",
            "{name}"
        );
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn host_files_outside_the_workspace_are_unreadable() {
    for (name, executor) in executors() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            outside.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "TOP-SECRET").unwrap();
        // Readable by everyone: only Landlock (when on) stops the read.
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let program = format!(
            "try:\n    print(open({path:?}).read())\nexcept OSError as e:\n    print('denied', type(e).__name__)\n",
            path = secret.display().to_string()
        );
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        let stdout = text(&out.stdout);
        if executor.info().landlock {
            assert!(
                stdout.starts_with("denied"),
                "{name}: {stdout} {}",
                text(&out.stderr)
            );
        } else {
            println!("{name}: Landlock off: world-readable host files stay readable ({stdout})");
            // Root-only files are still protected by the uid drop.
            let out = executor.run(&job(dir.path(), "try:\n    open('/etc/shadow').read()\n    print('read')\nexcept OSError:\n    print('denied')\n", quick_limits())).unwrap();
            assert_eq!(text(&out.stdout), "denied\n", "{name}");
        }
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn background_processes_do_not_outlive_the_job() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!("agentrl-daemon-{}-{name}", std::process::id());
        // A double-forked daemon in its own session, which would escape a process-group kill.
        let program = format!(
            "import os, time, sys\n\
             pid = os.fork()\n\
             if pid == 0:\n\
             \x20   os.setsid()\n\
             \x20   if os.fork() == 0:\n\
             \x20       for fd in range(0, 4):\n\
             \x20           try: os.close(fd)\n\
             \x20           except OSError: pass\n\
             \x20       os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker:?}])\n\
             \x20   os._exit(0)\n\
             os.waitpid(pid, 0)\n\
             time.sleep(0.3)\n\
             print('parent done')\n"
        );
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        assert_eq!(
            text(&out.stdout),
            "parent done\n",
            "{name}: {}",
            text(&out.stderr)
        );
        assert!(
            out.elapsed < Duration::from_secs(3),
            "{name}: job waited for the daemon"
        );
        // The daemon must be gone (allow the kernel a moment to finish the kill).
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let alive = live_processes_with_arg(&marker);
            if alive.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: daemon survived the job: {alive:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_still_serves(name, executor.as_ref());
    }
}

/// Pids of live (non-zombie) processes whose command line contains `needle`.
fn live_processes_with_arg(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut cmdline = Vec::new();
        if std::fs::File::open(entry.path().join("cmdline"))
            .and_then(|mut f| f.read_to_end(&mut cmdline))
            .is_err()
        {
            continue;
        }
        if !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        if status
            .lines()
            .any(|l| l.starts_with("State:") && !l.contains("Z"))
        {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn output_flood_is_capped_and_fast() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        // Up to 4 GiB on stdout, with stderr and fd 3 flooding too.
        let program = "import os, sys\nchunk = 'x' * (1 << 20)\n\
            os.write(3, b'r' * (1 << 20))\n\
            sys.stderr.write('e' * (1 << 20))\n\
            for _ in range(4096):\n    sys.stdout.write(chunk)\n";
        let start = Instant::now();
        let out = executor
            .run(&job(dir.path(), program, quick_limits()))
            .unwrap();
        let cap = quick_limits().output_cap_bytes;
        assert!(out.truncated, "{name}");
        assert_eq!(out.stdout.len(), cap, "{name}");
        assert_eq!(out.stderr.len(), cap, "{name}");
        assert_eq!(out.result.len(), cap, "{name}");
        assert_ne!(
            out.termination,
            Termination::TimedOut,
            "{name}: flood ran into the timeout"
        );
        println!(
            "{name}: flood stopped after {:?} with {:?}",
            start.elapsed(),
            out.termination
        );
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn non_utf8_output_is_returned_intact() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let program =
            "import sys, os\nsys.stdout.buffer.write(b'\\xff\\xfe ok \\x00')\nsys.stdout.flush()\n\
            os.write(2, b'\\xc3\\x28')\nos.write(3, b'\\x80')\nprint('\\udcff', file=sys.stderr)\n";
        let out = executor
            .run(&job(dir.path(), program, quick_limits()))
            .unwrap();
        assert_eq!(
            out.termination,
            Termination::Exited { code: 0 },
            "{name}: {}",
            text(&out.stderr)
        );
        assert_eq!(out.stdout, b"\xff\xfe ok \x00", "{name}");
        assert!(out.stderr.starts_with(b"\xc3\x28"), "{name}");
        assert_eq!(out.result, b"\x80", "{name}");
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    for (name, executor) in executors() {
        let missing = job(
            Path::new("/nonexistent/agentrl-workspace"),
            "print(1)",
            quick_limits(),
        );
        let error = executor.run(&missing).expect_err(name);
        assert!(
            error.to_string().contains("/nonexistent/agentrl-workspace"),
            "{name}: {error}"
        );
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&job(dir.path(), "def broken(:\n", quick_limits()))
            .unwrap();
        assert_eq!(out.termination, Termination::Exited { code: 1 }, "{name}");
        assert!(text(&out.stderr).contains("SyntaxError"), "{name}");
        assert_still_serves(name, executor.as_ref());
    }
}

#[test]
fn pool_runs_jobs_from_many_threads_and_replaces_dead_workers() {
    // Its own pool: the workers get killed below.
    let pool = Arc::new(PoolExecutor::new(2).unwrap());
    std::thread::scope(|scope| {
        for t in 0..4 {
            let pool = pool.clone();
            scope.spawn(move || {
                for i in 0..5 {
                    let dir = tempfile::tempdir().unwrap();
                    let out = pool
                        .run(&job(
                            dir.path(),
                            &format!("import os\nos.write(3, b'{t}-{i}')\n"),
                            quick_limits(),
                        ))
                        .unwrap();
                    assert_eq!(text(&out.result), format!("{t}-{i}"));
                }
            });
        }
    });
    // Killing the fork servers from outside: the pool respawns them and keeps serving.
    let workers = pool.worker_pids();
    assert_eq!(workers.len(), 2);
    for pid in workers {
        // SAFETY: plain kill of a pid we just found; at worst it no longer exists.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    for _ in 0..3 {
        assert_still_serves("pool", pool.as_ref());
    }
}

/// A fork server's outer process (the PID-namespace relay) is a program of its own, not a fork
/// of the process that started the pool left waiting: such a fork keeps that process's whole
/// memory copy-on-write for the worker's lifetime, so every page a trainer writes afterwards
/// is copied.
#[test]
fn pool_workers_hold_no_copy_of_the_process_that_started_them() {
    let pool = PoolExecutor::new(2).unwrap();
    let this = std::fs::read_link("/proc/self/exe").unwrap();
    let workers = pool.worker_pids();
    assert_eq!(workers.len(), 2);
    for pid in workers {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert_ne!(
            exe, this,
            "worker {pid}'s outer process is a fork of this test binary"
        );
        let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert!(rss_kib < 200_000, "worker {pid} holds {rss_kib} KiB");
    }
}

#[test]
fn sandbox_info_report_names_every_layer() {
    let report = agentrl_gym::sandbox::sandbox_info_report();
    println!("{report}");
    for layer in [
        "network namespace",
        "rlimits",
        "landlock",
        "scrubbed environment",
        "output caps",
        "seccomp filter",
    ] {
        assert!(report.contains(layer), "{report}");
    }
}

/// Files the host writes into the workspace between jobs (nested directories included) are
/// writable by the job even under a uid drop, while a hard link to a file outside the
/// workspace is not handed to the job uid.
#[test]
fn host_written_workspace_files_are_the_jobs_but_hard_links_are_not() {
    use std::os::unix::fs::MetadataExt;
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("pkg").join("deep");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join("data.txt"), "host").unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "secret").unwrap();
        let owner_before = std::fs::metadata(&secret).unwrap().uid();
        let linked = std::fs::hard_link(&secret, dir.path().join("linked.txt")).is_ok();
        let program = "import os\nwith open('pkg/deep/data.txt', 'a') as f:\n    f.write('+job')\nos.makedirs('pkg/deep/new', exist_ok=True)\nos.write(3, b'ok')\n";
        let out = executor
            .run(&job(dir.path(), program, quick_limits()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (out.termination.clone(), text(&out.result)),
            (Termination::Exited { code: 0 }, "ok".to_string()),
            "{name}: stderr {}",
            text(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(nested.join("data.txt")).unwrap(),
            "host+job",
            "{name}"
        );
        if linked {
            assert_eq!(
                std::fs::metadata(&secret).unwrap().uid(),
                owner_before,
                "{name}: a hard link to an outside file was given to the job uid"
            );
        }
        assert_still_serves(name, executor.as_ref());
    }
}

/// The pool compiles workspace modules ahead of each job; a job must still import exactly the
/// bytes on disk: an edit between jobs (same size, so only the content tells), a syntax error
/// reported as the interpreter would, a module in a package.
#[test]
fn workspace_modules_import_as_written_between_jobs() {
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join("pkg/__init__.py"), "").unwrap();
        let program = "import os, pkg.calc, calc\nos.write(3, ('%s %s' % (calc.VALUE, pkg.calc.VALUE)).encode())\n";
        for (value, expected) in [("1", "1 -1"), ("2", "2 -2"), ("(", "")] {
            std::fs::write(dir.path().join("calc.py"), format!("VALUE = {value}\n")).unwrap();
            std::fs::write(
                dir.path().join("pkg/calc.py"),
                format!("VALUE = -{value}\n"),
            )
            .unwrap();
            let out = executor
                .run(&job(dir.path(), program, quick_limits()))
                .unwrap();
            if expected.is_empty() {
                assert_eq!(out.termination, Termination::Exited { code: 1 }, "{name}");
                assert!(
                    text(&out.stderr).contains("SyntaxError"),
                    "{name}: {}",
                    text(&out.stderr)
                );
            } else {
                assert_eq!(text(&out.result), expected, "{name}: {}", text(&out.stderr));
            }
        }
    }
}

/// System V shared memory and POSIX message queues of the host: reachable by key or name,
/// through no file a job opens, so only the socket filter stops them.
#[test]
fn host_ipc_objects_are_unreachable() {
    const KEY: libc::key_t = 0x6167_7274; // "agrt"
                                          // SAFETY: plain System V calls on integers; the segment is removed below.
    let shm = unsafe { libc::shmget(KEY, 4096, libc::IPC_CREAT | 0o666) };
    assert!(shm >= 0, "shmget: {}", std::io::Error::last_os_error());
    let queue_name = format!("/agentrl-test-{}", std::process::id());
    let c_name = std::ffi::CString::new(queue_name.clone()).unwrap();
    // SAFETY: a valid name; the queue is unlinked below.
    let queue = unsafe {
        libc::mq_open(
            c_name.as_ptr(),
            libc::O_CREAT | libc::O_RDWR,
            0o666 as libc::mode_t,
            std::ptr::null::<libc::mq_attr>(),
        )
    };
    let program = format!(
        r#"import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
results = []
for label, call in [('shmget', lambda: libc.shmget({KEY}, 0, 0)),
                    ('shmat', lambda: libc.shmat({shm}, None, 0)),
                    ('mq_open', lambda: libc.mq_open({queue_name:?}.encode(), os.O_WRONLY))]:
    rc = call()
    results.append('%s:%s' % (label, 'reached' if rc not in (-1, None) and rc != ctypes.c_void_p(-1).value else os.strerror(ctypes.get_errno())))
os.write(3, ' '.join(results).encode())
"#
    );
    for (name, executor) in executors() {
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&job(dir.path(), &program, quick_limits()))
            .unwrap();
        let result = text(&out.result);
        assert!(
            result.contains("shmget:") && !result.contains("reached"),
            "{name}: {result} {}",
            text(&out.stderr)
        );
        assert_still_serves(name, executor.as_ref());
    }
    // SAFETY: removing what we created.
    unsafe {
        libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut());
        if queue >= 0 {
            libc::mq_close(queue);
            libc::mq_unlink(c_name.as_ptr());
        }
    }
}
