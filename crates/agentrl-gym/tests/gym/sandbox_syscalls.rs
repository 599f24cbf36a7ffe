//! Each system call the seccomp filter denies (the table in `src/sandbox/seccomp.rs`), called
//! raw through `ctypes` from a job in both executors: `EPERM`, or `ENOSYS` for `clone3` (so libc
//! falls back to `clone`). Where the arguments allow, they are ones an unfiltered kernel would
//! accept or answer with another errno, so the answer is the filter's. And what Python needs
//! from the same calls still works: threads, subprocesses, `fork`, the personality query.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentrl_gym::sandbox::{Executor, FreshExecutor, Job, Limits, PoolExecutor, Termination};

fn executors() -> [(&'static str, Arc<dyn Executor>); 2] {
    static POOL: OnceLock<Arc<dyn Executor>> = OnceLock::new();
    let pool = POOL
        .get_or_init(|| Arc::new(PoolExecutor::new(2).expect("start the pool")))
        .clone();
    let fresh: Arc<dyn Executor> = Arc::new(FreshExecutor::new().expect("probe the sandbox"));
    [("fresh", fresh), ("pool", pool)]
}

/// Runs `program` in both executors and returns `(executor, result channel)` for each.
fn run_everywhere(program: &str) -> Vec<(&'static str, String)> {
    let mut results = Vec::new();
    for (name, executor) in executors() {
        if !executor.info().socket_filter {
            eprintln!(
                "{name}: seccomp filter off here, skipped: {:?}",
                executor.info().notes
            );
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = executor
            .run(&Job {
                workspace: dir.path().to_path_buf(),
                program: program.to_string(),
                stdin: Vec::new(),
                limits: Limits {
                    time_limit: Duration::from_secs(20),
                    ..Limits::default()
                },
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            out.termination,
            Termination::Exited { code: 0 },
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        results.push((name, String::from_utf8_lossy(&out.result).into_owned()));
    }
    results
}

/// `syscall(nr, args...)` in the sandbox answers -1 with `errno` in both executors. `args` is a
/// Python expression list; ints go as `long`, bytes and buffers as pointers.
fn assert_answer(call: &str, nr: i64, args: &str, errno: i32) {
    let program = format!(
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         libc.syscall.restype = ctypes.c_long\n\
         args = [ctypes.c_long(a) if isinstance(a, int) else a for a in ({nr}, {args})]\n\
         rc = libc.syscall(*args)\n\
         os.write(3, b'%d %d' % (rc, ctypes.get_errno()))\n"
    );
    for (name, result) in run_everywhere(&program) {
        assert_eq!(
            result,
            format!("-1 {errno}"),
            "{name}: {call}({args}) answered `rc errno` = {result}, not -1 {errno}"
        );
    }
}

macro_rules! denied {
    ($($(#[$meta:meta])* $test:ident: $nr:expr, $args:expr;)*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $test() {
                assert_answer(stringify!($test), $nr as i64, $args, libc::EPERM);
            }
        )*
    };
}

const NEWUSER: i32 = libc::CLONE_NEWUSER;

denied! {
    unshare_user: libc::SYS_unshare, &format!("{NEWUSER}");
    unshare_user_and_mount: libc::SYS_unshare, &format!("{}", NEWUSER | libc::CLONE_NEWNS);
    clone_new_user: libc::SYS_clone, &format!("{NEWUSER}, 0, 0, 0, 0");
    clone_new_mount: libc::SYS_clone, &format!("{}, 0, 0, 0, 0", libc::CLONE_NEWNS);
    clone_new_net: libc::SYS_clone, &format!("{}, 0, 0, 0, 0", libc::CLONE_NEWNET);
    setns: libc::SYS_setns, "-1, 0";
    chroot: libc::SYS_chroot, "b'.'";
    pivot_root: libc::SYS_pivot_root, "b'.', b'.'";
    mount: libc::SYS_mount, "b'none', b'.', b'tmpfs', 0, 0";
    umount2: libc::SYS_umount2, "b'.', 0";
    fsopen: libc::SYS_fsopen, "b'tmpfs', 0";
    fsconfig: libc::SYS_fsconfig, "-1, 0, 0, 0, 0";
    fsmount: libc::SYS_fsmount, "-1, 0, 0";
    fspick: libc::SYS_fspick, "-100, b'.', 0";
    move_mount: libc::SYS_move_mount, "-1, b'', -1, b'', 0";
    open_tree: libc::SYS_open_tree, "-100, b'.', 0";
    mount_setattr: libc::SYS_mount_setattr, "-100, b'.', 0, 0, 0";
    add_key: libc::SYS_add_key, "b'user', b'agentrl', b'x', 1, -4";
    request_key: libc::SYS_request_key, "b'user', b'agentrl', 0, -4";
    // KEYCTL_GET_KEYRING_ID of the user keyring: an unfiltered kernel answers its id.
    keyctl: libc::SYS_keyctl, "0, -4, 1";
    perf_event_open: libc::SYS_perf_event_open, "ctypes.create_string_buffer(128), 0, -1, -1, 0";
    userfaultfd: libc::SYS_userfaultfd, "0";
    bpf: libc::SYS_bpf, "0, 0, 0";
    io_uring_setup: libc::SYS_io_uring_setup, "1, ctypes.create_string_buffer(120)";
    io_uring_enter: libc::SYS_io_uring_enter, "-1, 0, 0, 0, 0, 0";
    io_uring_register: libc::SYS_io_uring_register, "-1, 0, 0, 0";
    // PTRACE_TRACEME: an unfiltered kernel accepts it.
    ptrace: libc::SYS_ptrace, "0, 0, 0, 0";
    // Zero iovecs on itself: an unfiltered kernel answers 0.
    process_vm_readv: libc::SYS_process_vm_readv, "os.getpid(), 0, 0, 0, 0, 0";
    process_vm_writev: libc::SYS_process_vm_writev, "os.getpid(), 0, 0, 0, 0, 0";
    // KCMP_FILE of its own stdin against itself: an unfiltered kernel answers 0.
    kcmp: libc::SYS_kcmp, "os.getpid(), os.getpid(), 0, 0, 0";
    pidfd_getfd: libc::SYS_pidfd_getfd, "-1, 0, 0";
    init_module: libc::SYS_init_module, "0, 0, b''";
    finit_module: libc::SYS_finit_module, "-1, b'', 0";
    delete_module: libc::SYS_delete_module, "b'agentrl', 0";
    kexec_load: libc::SYS_kexec_load, "0, 0, 0, 0";
    kexec_file_load: libc::SYS_kexec_file_load, "-1, -1, 0, b'', 0";
    // A wrong magic: an unfiltered kernel would refuse it anyway.
    reboot: libc::SYS_reboot, "0, 0, 0, 0";
    swapon: libc::SYS_swapon, "b'/nonexistent', 0";
    swapoff: libc::SYS_swapoff, "b'/nonexistent'";
    acct: libc::SYS_acct, "0";
    lookup_dcookie: libc::SYS_lookup_dcookie, "0, 0, 0";
    quotactl: libc::SYS_quotactl, "0, 0, 0, 0";
    quotactl_fd: libc::SYS_quotactl_fd, "-1, 0, 0, 0";
    fanotify_init: libc::SYS_fanotify_init, "0, 0";
    name_to_handle_at: libc::SYS_name_to_handle_at, "-100, b'.', ctypes.create_string_buffer(128), ctypes.create_string_buffer(8), 0";
    open_by_handle_at: libc::SYS_open_by_handle_at, "-1, 0, 0";
    // SYSLOG_ACTION_SIZE_BUFFER.
    syslog: libc::SYS_syslog, "10, 0, 0";
    vhangup: libc::SYS_vhangup, "";
    sethostname: libc::SYS_sethostname, "b'x', 1";
    setdomainname: libc::SYS_setdomainname, "b'x', 1";
    // Both pointers null: an unfiltered kernel answers 0 and changes nothing.
    settimeofday: libc::SYS_settimeofday, "0, 0";
    clock_settime: libc::SYS_clock_settime, "0, 0";
    clock_adjtime: libc::SYS_clock_adjtime, "0, ctypes.create_string_buffer(256)";
    // modes = 0 only reads: an unfiltered kernel answers the clock state.
    adjtimex: libc::SYS_adjtimex, "ctypes.create_string_buffer(256)";
    // MPOL_DEFAULT: an unfiltered kernel answers 0.
    mbind: libc::SYS_mbind, "0, 0, 0, 0, 0, 0";
    set_mempolicy: libc::SYS_set_mempolicy, "0, 0, 0";
    move_pages: libc::SYS_move_pages, "0, 0, 0, 0, 0, 0";
    shmget: libc::SYS_shmget, "0x61677274, 0, 0";
    shmat: libc::SYS_shmat, "-1, 0, 0";
    shmctl: libc::SYS_shmctl, "-1, 0, 0";
    msgget: libc::SYS_msgget, "0x61677274, 0";
    msgsnd: libc::SYS_msgsnd, "-1, 0, 0, 0";
    msgrcv: libc::SYS_msgrcv, "-1, 0, 0, 0, 0";
    msgctl: libc::SYS_msgctl, "-1, 0, 0";
    semget: libc::SYS_semget, "0x61677274, 0, 0";
    semop: libc::SYS_semop, "-1, 0, 0";
    semtimedop: libc::SYS_semtimedop, "-1, 0, 0, 0";
    semctl: libc::SYS_semctl, "-1, 0, 0, 0";
    mq_open: libc::SYS_mq_open, "b'agentrl', 0, 0, 0";
    mq_unlink: libc::SYS_mq_unlink, "b'agentrl'";
    mq_timedsend: libc::SYS_mq_timedsend, "-1, 0, 0, 0, 0";
    mq_timedreceive: libc::SYS_mq_timedreceive, "-1, 0, 0, 0, 0";
    mq_notify: libc::SYS_mq_notify, "-1, 0";
    mq_getsetattr: libc::SYS_mq_getsetattr, "-1, 0, 0";
    // ADDR_NO_RANDOMIZE is not one of Docker's values.
    personality: libc::SYS_personality, "0x0040000";
    // AF_UNIX.
    socket_unix: libc::SYS_socket, "1, 1, 0";
    // An AF_UNIX datagram pair could be connected to a host socket.
    socketpair_dgram: libc::SYS_socketpair, "1, 2, 0, ctypes.create_string_buffer(8)";
    // Level 0 and turning ports off need no privilege: an unfiltered kernel answers 0.
    #[cfg(target_arch = "x86_64")]
    iopl: libc::SYS_iopl, "0";
    #[cfg(target_arch = "x86_64")]
    ioperm: libc::SYS_ioperm, "0, 0, 0";
    // Gone from the kernel: an unfiltered one answers ENOSYS.
    #[cfg(target_arch = "x86_64")]
    nfsservctl: libc::SYS_nfsservctl, "0, 0, 0";
    #[cfg(target_arch = "x86_64")]
    create_module: 174, "b'agentrl', 0";
    #[cfg(target_arch = "x86_64")]
    get_kernel_syms: 177, "0";
    #[cfg(target_arch = "x86_64")]
    query_module: 178, "b'agentrl', 0, 0, 0, 0";
    #[cfg(target_arch = "x86_64")]
    uselib: libc::SYS_uselib, "b'/nonexistent'";
    #[cfg(target_arch = "x86_64")]
    ustat: libc::SYS_ustat, "0, ctypes.create_string_buffer(64)";
    #[cfg(target_arch = "x86_64")]
    sysfs: libc::SYS_sysfs, "3";
    #[cfg(target_arch = "x86_64")]
    _sysctl: libc::SYS__sysctl, "0";
    // getpid through the x32 ABI.
    #[cfg(target_arch = "x86_64")]
    x32_getpid: 0x4000_0000 | libc::SYS_getpid, "";
}

/// clone3's flags are in memory, out of the filter's reach: `ENOSYS`, so glibc uses `clone`.
/// An unfiltered kernel would answer EINVAL (size 0).
#[test]
fn clone3_is_not_implemented() {
    assert_answer("clone3", libc::SYS_clone3, "0, 0", libc::ENOSYS);
}

/// What Python needs from the filtered calls still works: threads (clone3 falls back to clone),
/// subprocesses (posix_spawn), `os.fork`, the personality query, inet and stream-pair sockets,
/// the clocks' descriptions (no `adjtimex`).
#[test]
fn what_python_needs_still_works() {
    let program = "import ctypes, os, socket, subprocess, sys, threading\n\
        seen = []\n\
        t = threading.Thread(target=lambda: seen.append('thread'))\n\
        t.start(); t.join()\n\
        seen.append(subprocess.run([sys.executable, '-c', 'print(\"child\")'], capture_output=True, text=True).stdout.strip())\n\
        pid = os.fork()\n\
        if pid == 0:\n    os._exit(7)\n\
        seen.append('fork %d' % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        seen.append('persona %d' % (libc.personality(0xffffffff) >= 0))\n\
        a, b = socket.socketpair()\n\
        a.send(b'pair'); seen.append(b.recv(4).decode())\n\
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n\
        seen.append('inet')\n\
        import time\n\
        seen.append('clock %d' % all(time.get_clock_info(c).resolution > 0 for c in ('time', 'monotonic', 'perf_counter', 'process_time')))\n\
        os.write(3, ' '.join(seen).encode())\n";
    for (name, result) in run_everywhere(program) {
        assert_eq!(
            result, "thread child fork 7 persona 1 pair inet clock 1",
            "{name}"
        );
    }
}
