//! No kernel-held state crosses from one job to the next: model-written code plants state of
//! one class in an episode (at import of its module, so in the public-test job and in every
//! verdict job), and the next episode's code, run by the same fork server (a pool of one
//! worker) or the same `gym serve`, looks for it and answers wrong if it sees it, so its
//! reward says whether anything crossed. Classes: keyrings, System V IPC, POSIX message
//! queues, abstract Unix sockets, inotify, timers and leftover processes, `/dev/shm` and `/tmp`
//! names, the environment, and the interpreter's own state (builtins, `sys.modules`).
//!
//! Each class runs twice: with the plant and the probe at import of the module, and with both
//! inside `mean`, run by every public test and hidden case that calls it, so the attack path
//! does not depend on import-time hooks (the built-in tests' `from module import *`). The probe's
//! verdict is the value `mean` returns.

use std::sync::{Arc, OnceLock};

use agentrl_gym::sandbox::{Executor, PoolExecutor};
use agentrl_gym::service::{GymServeOptions, GymServer};
use agentrl_gym::{Action, BugFixEnv, Env, EnvConfig, OutcomeCache, TaskSet, ToolCall};
use serde_json::{json, Value};

use crate::post_json;

const TASK: &str = "intdiv-000";
const MODULE: &str = "averages.py";

/// One fork server for every episode here: the next job surely lands on the worker (and uid)
/// that ran the plant.
fn one_worker() -> (Arc<TaskSet>, Arc<dyn Executor>) {
    static SHARED: OnceLock<(Arc<TaskSet>, Arc<dyn Executor>)> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            (
                Arc::new(TaskSet::builtin().expect("built-in tasks")),
                Arc::new(PoolExecutor::new(1).expect("a pool of one")),
            )
        })
        .clone()
}

/// Runs the tests of the episode's module through the env, one class at a time (the pool has
/// one worker: two classes at once would interleave, which is fine, but slower).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn call(name: &str, arguments: Value) -> Action {
    Action::Call(ToolCall {
        name: name.into(),
        arguments,
    })
}

/// The reference fix of `averages.py` with `code` appended.
fn fixed_with(tasks: &TaskSet, code: &str) -> String {
    let fix = &tasks.get(TASK).unwrap().reference[MODULE];
    format!("{fix}\n\n{code}\n")
}

/// Where model-written code runs its plant or probe: at import of its module, or each time
/// the tests and hidden cases call `mean` (no import-time hook at all).
#[derive(Clone, Copy, Debug)]
enum When {
    AtImport,
    AtCall,
}

/// The planting module: `plant` runs at import or in every call of `mean`, its failures
/// swallowed (a denied call is the expected answer).
fn planting(tasks: &TaskSet, plant: &str, when: When) -> String {
    let body: String = plant.lines().map(|l| format!("    {l}\n")).collect();
    let run = match when {
        When::AtImport => "try:\n    _agentrl_plant()\nexcept Exception:\n    pass\n",
        When::AtCall => "_agentrl_mean = mean\n\n\ndef mean(values):\n    try:\n        _agentrl_plant()\n    except Exception:\n        pass\n    return _agentrl_mean(values)\n",
    };
    fixed_with(tasks, &format!("def _agentrl_plant():\n{body}\n\n{run}"))
}

/// The probing module: `probe` is the body of a function that returns true when it sees the
/// planted state (run at import or in every call of `mean`); then `mean` answers wrong, so the
/// public tests and hidden cases fail.
fn probing(tasks: &TaskSet, probe: &str, when: When) -> String {
    let body: String = probe.lines().map(|l| format!("    {l}\n")).collect();
    let run = match when {
        When::AtImport => "try:\n    _AGENTRL_SEEN = bool(_agentrl_probe())\nexcept Exception:\n    _AGENTRL_SEEN = False\nif _AGENTRL_SEEN:\n    def mean(values):\n        return -1.0\n",
        When::AtCall => "_agentrl_mean = mean\n\n\ndef mean(values):\n    try:\n        seen = bool(_agentrl_probe())\n    except Exception:\n        seen = False\n    return -1.0 if seen else _agentrl_mean(values)\n",
    };
    fixed_with(tasks, &format!("def _agentrl_probe():\n{body}\n\n{run}"))
}

/// The layer that closes a class (see `src/sandbox/mod.rs`); where it is off on this machine
/// (no root, an old kernel), the class is reported, not checked.
#[derive(Clone, Copy, Debug)]
enum Layer {
    Seccomp,
    PidNamespace,
    Landlock,
    /// Each job forks from the server's pristine image: always on.
    Fork,
}

/// One episode in `env`: `averages.py` becomes `text`, then `test` and `submit`.
fn episode(env: &mut BugFixEnv, text: &str) -> agentrl_gym::Reward {
    env.reset(TASK).unwrap();
    env.step(&call("edit", json!({"path": MODULE, "text": text})))
        .unwrap();
    env.step(&call("test", json!({}))).unwrap();
    let step = env.step(&call("submit", json!({}))).unwrap();
    step.reward.expect("submit ends the episode with a reward")
}

/// Plants in one episode (its tests and its verdict), then probes in the next, in the env and
/// through `gym serve`; fails if the probing episode is not solved.
fn assert_nothing_crosses(class: &str, layer: Layer, plant: &str, probe: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let info = one_worker().1.info();
    let on = match layer {
        Layer::Seccomp => info.socket_filter,
        Layer::PidNamespace => info.pid_namespace,
        Layer::Landlock => info.landlock,
        Layer::Fork => true,
    };
    if !on {
        eprintln!(
            "{class}: the {layer:?} layer that closes it is off here, not checked: {:?}",
            info.notes
        );
        return;
    }
    for when in [When::AtImport, When::AtCall] {
        crosses_nowhere(class, when, plant, probe);
    }
}

fn crosses_nowhere(class: &str, when: When, plant: &str, probe: &str) {
    let (tasks, executor) = one_worker();
    let plant_text = planting(&tasks, plant, when);
    let probe_text = probing(&tasks, probe, when);

    // The same worker, in process.
    let mut env = BugFixEnv::new(
        tasks.clone(),
        executor.clone(),
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    episode(&mut env, &plant_text);
    let reward = episode(&mut env, &probe_text);
    assert!(
        reward.solved(),
        "{class} ({when:?}): the next episode on the same worker saw the state: {reward:?}"
    );

    // The same `gym serve`: one client plants, another probes.
    let server = GymServer::start(
        tasks.clone(),
        executor.clone(),
        GymServeOptions {
            http_threads: 2,
            ..GymServeOptions::default()
        },
        "127.0.0.1:0",
    )
    .expect("the server starts");
    let url = server.url();
    let episode = |text: &str| -> Value {
        let started = post_json(&format!("{url}/v1/episodes"), json!({ "task_id": TASK })).1;
        let id = started["episode_id"].as_str().unwrap().to_string();
        let step = |action: Value| {
            post_json(
                &format!("{url}/v1/episodes/{id}/step"),
                json!({ "action": action }),
            )
            .1
        };
        step(json!({"kind": "call", "name": "edit", "arguments": {"path": MODULE, "text": text}}));
        step(json!({"kind": "call", "name": "test", "arguments": {}}));
        step(json!({"kind": "call", "name": "submit", "arguments": {}}))
    };
    episode(&plant_text);
    let answer = episode(&probe_text);
    let reward = &answer["step"]["reward"];
    assert!(
        reward["hidden_total"].as_u64() > Some(0)
            && reward["hidden_passed"] == reward["hidden_total"],
        "{class} ({when:?}): the next episode of the same gym serve saw the state: {answer}"
    );
}

/// Python that forks a process which outlives the job unless the sandbox ends it: it renames
/// itself `name` (its `/proc/PID/comm`), closes every descriptor (so no run waits on a pipe it
/// holds), runs `setup`, then sleeps.
fn daemon(name: &str, setup: &str) -> String {
    let setup: String = setup
        .lines()
        .map(|l| format!("            {l}\n"))
        .collect();
    format!(
        "import ctypes, os, time\n\
         if os.fork() == 0:\n    \
             try:\n        \
                 os.setsid()\n        \
                 os.closerange(0, 1 << 16)\n        \
                 if os.fork() == 0:\n            \
                     ctypes.CDLL(None).prctl(15, {name:?}.encode(), 0, 0, 0)\n\
         {setup}            \
                     time.sleep(60)\n    \
             finally:\n        \
                 os._exit(0)\n"
    )
}

/// Python that looks for any process but itself, its parent (a hidden case's is the verdict
/// tree's process) and the fork server (PID 1) in its PID
/// namespace: a leftover of an earlier job has a lower pid, one it started itself a higher one.
/// `kill(pid, 0)` answers ESRCH for none; `/proc` is out of Landlock's reach.
const OTHER_PROCESS: &str = "import os\n\
    me = os.getpid()\n\
    for pid in range(2, me + 64):\n    \
        if pid in (me, os.getppid()):\n        \
            continue\n    \
        try:\n        \
            os.kill(pid, 0)\n    \
        except ProcessLookupError:\n        \
            continue\n    \
        except PermissionError:\n        \
            pass\n    \
        return True\n\
    return False\n";

const LIBC: &str = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n";

#[test]
fn keyrings_do_not_cross_jobs() {
    // add_key("user", "agentrl-plant", ...) into the user, session and process keyrings (-4,
    // -3, -2); the probe asks request_key and keyctl(KEYCTL_SEARCH) of the user keyring.
    let plant = format!(
        "{LIBC}for ring in (-4, -3, -2):\n    \
             libc.syscall({add}, b'user', b'agentrl-plant', b'leak', 4, ring)\n",
        add = libc::SYS_add_key
    );
    let probe = format!(
        "{LIBC}found = libc.syscall({request}, b'user', b'agentrl-plant', None, 0)\n\
         search = libc.syscall({keyctl}, 10, -4, b'user', b'agentrl-plant', 0)\n\
         return found >= 0 or search >= 0\n",
        request = libc::SYS_request_key,
        keyctl = libc::SYS_keyctl
    );
    assert_nothing_crosses("keyring", Layer::Seccomp, &plant, &probe);
}

#[test]
fn system_v_ipc_does_not_cross_jobs() {
    let plant = format!(
        "{LIBC}libc.shmget(0x61677270, 4096, 0o1666)\n\
         libc.msgget(0x61677270, 0o1666)\n\
         libc.semget(0x61677270, 1, 0o1666)\n"
    );
    let probe = format!(
        "{LIBC}return libc.shmget(0x61677270, 0, 0) >= 0 or libc.msgget(0x61677270, 0) >= 0 \
         or libc.semget(0x61677270, 0, 0) >= 0\n"
    );
    assert_nothing_crosses("System V IPC", Layer::Seccomp, &plant, &probe);
}

#[test]
fn posix_message_queues_do_not_cross_jobs() {
    let plant =
        format!("{LIBC}libc.mq_open(b'/agentrl-plant', os.O_CREAT | os.O_RDWR, 0o666, None)\n");
    let probe = format!("{LIBC}return libc.mq_open(b'/agentrl-plant', os.O_RDONLY) >= 0\n");
    assert_nothing_crosses("POSIX message queue", Layer::Seccomp, &plant, &probe);
}

#[test]
fn abstract_unix_sockets_do_not_cross_jobs() {
    let plant = daemon(
        "agentrl-socket",
        "import socket\nserver = socket.socket(socket.AF_UNIX)\nserver.bind(b'\\0agentrl-plant')\nserver.listen(1)",
    );
    let probe = "import socket\n\
        client = socket.socket(socket.AF_UNIX)\n\
        client.connect(b'\\0agentrl-plant')\n\
        return True\n";
    assert_nothing_crosses("abstract Unix socket", Layer::Seccomp, &plant, probe);
}

#[test]
fn inotify_watches_do_not_cross_jobs() {
    // A watcher left behind on the workspace's parent would see the next episode's files.
    let plant = daemon(
        "agentrl-inotify",
        "libc = ctypes.CDLL(None)\nfd = libc.inotify_init()\nlibc.inotify_add_watch(fd, b'.', 0xfff)\nlibc.inotify_add_watch(fd, b'..', 0xfff)",
    );
    assert_nothing_crosses("inotify", Layer::PidNamespace, &plant, OTHER_PROCESS);
}

#[test]
fn timers_and_leftover_processes_do_not_cross_jobs() {
    // An interval timer in a process left behind, and one in the job itself (gone with it).
    let plant = daemon(
        "agentrl-timer",
        "import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\nsignal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)",
    ) + "import signal\nsignal.setitimer(signal.ITIMER_REAL, 30, 30)\n";
    let probe = OTHER_PROCESS.replace("return False\n", "return signal_pending()\n");
    let probe = format!(
        "def signal_pending():\n    import signal\n    return signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)\n{probe}"
    );
    assert_nothing_crosses("timers", Layer::PidNamespace, &plant, &probe);
}

#[test]
fn dev_shm_and_tmp_names_do_not_cross_jobs() {
    let plant = "import os\n\
        for path in ('/dev/shm/agentrl-plant', '/tmp/agentrl-plant', '../agentrl-plant'):\n    \
            try:\n        \
                open(path, 'w').write('leak')\n    \
            except OSError:\n        \
                pass\n";
    let probe = "import os\n\
        return any(os.path.exists(p) for p in ('/dev/shm/agentrl-plant', '/tmp/agentrl-plant', '../agentrl-plant'))\n";
    assert_nothing_crosses("/dev/shm names", Layer::Landlock, plant, probe);
}

#[test]
fn the_environment_does_not_cross_jobs() {
    let plant =
        "import os\nos.environ['AGENTRL_PLANT'] = 'leak'\nos.putenv('AGENTRL_PLANT2', 'leak')\n";
    let probe = "import os\n\
        return 'AGENTRL_PLANT' in os.environ or 'AGENTRL_PLANT2' in os.environ \
        or b'AGENTRL_PLANT' in open('/proc/self/environ', 'rb').read()\n";
    assert_nothing_crosses("environment", Layer::Fork, plant, probe);
}

#[test]
fn interpreter_state_does_not_cross_jobs() {
    let plant = "import builtins, sys, json\n\
        builtins.AGENTRL_PLANT = 'leak'\n\
        sys.modules['agentrl_plant'] = sys\n\
        json.AGENTRL_PLANT = 'leak'\n";
    let probe = "import builtins, sys, json\n\
        return hasattr(builtins, 'AGENTRL_PLANT') or 'agentrl_plant' in sys.modules \
        or hasattr(json, 'AGENTRL_PLANT')\n";
    assert_nothing_crosses("interpreter state", Layer::Fork, plant, probe);
}

/// The probes are not blind: planted in the probing job itself, before the probe, the state is
/// seen and the episode fails (for the classes a job may plant in its own process).
#[test]
fn a_probe_sees_state_planted_in_its_own_job() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tasks, executor) = one_worker();
    let mut env = BugFixEnv::new(
        tasks.clone(),
        executor,
        OutcomeCache::new(),
        EnvConfig::default(),
    );
    let cases = [
        (
            "environment",
            "import os\nos.environ['AGENTRL_PLANT'] = 'leak'\n".to_string(),
            "import os\nreturn 'AGENTRL_PLANT' in os.environ\n".to_string(),
        ),
        (
            "leftover process",
            daemon("agentrl-self", "pass"),
            format!("import time\ntime.sleep(0.5)\n{OTHER_PROCESS}"),
        ),
    ];
    for (class, plant, probe) in cases {
        let text = format!(
            "{}\n{}",
            planting(&tasks, &plant, When::AtImport),
            probing(&tasks, &probe, When::AtImport)
                .replace(&tasks.get(TASK).unwrap().reference[MODULE], "")
        );
        let reward = episode(&mut env, &text);
        assert!(
            !reward.solved(),
            "{class}: the probe did not see it: {reward:?}"
        );
    }
}
