//! The seccomp filter of every sandboxed process (the fork servers, their jobs, the fresh
//! executor's interpreters and the trusted checker): a seccomp-bpf program, compiled here and
//! installed after the namespaces are set up, that takes away the kernel interfaces no test
//! needs. Its anchor is Docker's default profile (moby `profiles/seccomp/default.json`): every
//! call that profile denies to a container without extra capabilities is denied here too, plus
//! the channels to host processes that Landlock and the network namespace leave open (Landlock
//! checks `open` but not `connect`; abstract Unix sockets are only scoped from Landlock ABI 6
//! on; System V IPC and POSIX message queues are reachable by key or name, and jobs share the
//! host's IPC namespace). Docker's profile is an allowlist; this filter is a denylist of the
//! same decisions for the calls that matter, since everything else is confined by the other
//! layers (Landlock, the uid drop, rlimits, the namespaces).
//!
//! A denied call fails with `EPERM` (Python raises `PermissionError`), as under Docker, except
//! `clone3`, which fails with `ENOSYS` as Docker's does: its flags sit in memory, where a filter
//! cannot read them, and `ENOSYS` makes glibc fall back to `clone`, whose flags are filtered.
//! On x86_64 every x32 system call (`nr | 0x4000_0000`) is denied: the architecture check that
//! starts every filter does not tell x32 from x86_64, and no Python here uses x32.
//!
//! Every call not in this table is allowed. `here`: `deny` (always `EPERM`), `ENOSYS`, or
//! `args` (denied for the arguments named). `Docker`: the default profile's decision for a
//! container with Docker's default capabilities ("CAP_X" means allowed only with that
//! capability, which a default container lacks, so denied). Where this filter is stricter, the
//! last column says why nothing a test needs is lost. `tests/gym/seccomp_filter.rs` checks that
//! this table and [`decisions`] agree, and `tests/gym/sandbox_syscalls.rs` calls each one.
//!
//! | syscall | here | Docker | why |
//! |---|---|---|---|
//! | `socket` | args | allowed | only `AF_INET`/`AF_INET6`, and only inside the empty network namespace: any other family could reach a host process (pathname or abstract Unix sockets, netlink) |
//! | `socketpair` | args | allowed | only `AF_UNIX` `SOCK_STREAM`/`SOCK_SEQPACKET`: connected at birth, they cannot be re-pointed; a datagram pair could `connect` to a host socket. The stdlib's `socket.socketpair()`, asyncio and `multiprocessing.Pipe()` use stream pairs |
//! | `clone` | args | args | no namespace flag (`CLONE_NEWNS`, `NEWUTS`, `NEWIPC`, `NEWUSER`, `NEWPID`, `NEWNET`, `NEWCGROUP`), Docker's mask without `CAP_SYS_ADMIN` |
//! | `clone3` | ENOSYS | ENOSYS | without `CAP_SYS_ADMIN` Docker answers `ENOSYS` too, so libc falls back to `clone` |
//! | `personality` | args | args | only 0x0, 0x8, 0x20000, 0x20008 and 0xffffffff (the query), Docker's values |
//! | `unshare` | deny | CAP_SYS_ADMIN | |
//! | `setns` | deny | CAP_SYS_ADMIN | |
//! | `chroot` | deny | allowed | Docker grants `CAP_SYS_CHROOT`; here a job's root is the host's and inside a new user namespace a chroot is one more view of it; no test needs it |
//! | `pivot_root` | deny | CAP_SYS_ADMIN | |
//! | `mount`, `umount2` | deny | CAP_SYS_ADMIN | |
//! | `fsopen`, `fsconfig`, `fsmount`, `fspick`, `move_mount`, `open_tree`, `mount_setattr` | deny | CAP_SYS_ADMIN | the new mount API |
//! | `add_key`, `request_key`, `keyctl` | deny | deny | keyrings are not namespaced: a key added by one job stayed in its uid's user keyring for the next job of that uid |
//! | `perf_event_open` | deny | CAP_PERFMON | |
//! | `userfaultfd` | deny | CAP_SYS_PTRACE | |
//! | `bpf` | deny | CAP_BPF | |
//! | `io_uring_setup`, `io_uring_enter`, `io_uring_register` | deny | deny | io_uring could also open and connect sockets without the calls above |
//! | `ptrace` | deny | allowed | Docker allows it from kernel 4.8 on; a job has no other process of its own worth tracing, and tests do not debug |
//! | `process_vm_readv`, `process_vm_writev` | deny | allowed | as `ptrace` |
//! | `kcmp`, `pidfd_getfd` | deny | CAP_SYS_PTRACE | |
//! | `init_module`, `finit_module`, `delete_module` | deny | CAP_SYS_MODULE | |
//! | `kexec_load`, `kexec_file_load`, `reboot` | deny | CAP_SYS_BOOT | |
//! | `swapon`, `swapoff` | deny | CAP_SYS_ADMIN | |
//! | `acct` | deny | CAP_SYS_PACCT | |
//! | `lookup_dcookie`, `quotactl`, `quotactl_fd`, `fanotify_init` | deny | CAP_SYS_ADMIN | |
//! | `name_to_handle_at`, `open_by_handle_at` | deny | CAP_DAC_READ_SEARCH | |
//! | `syslog` | deny | CAP_SYSLOG | |
//! | `vhangup` | deny | CAP_SYS_TTY_CONFIG | |
//! | `sethostname`, `setdomainname` | deny | CAP_SYS_ADMIN | jobs share the host's UTS namespace |
//! | `settimeofday`, `clock_settime`, `clock_adjtime` | deny | CAP_SYS_TIME | |
//! | `adjtimex` | deny | allowed | Docker allows it for reading the clock state; Python reads clocks with `clock_gettime` only |
//! | `mbind`, `set_mempolicy`, `move_pages` | deny | CAP_SYS_NICE | |
//! | `shmget`, `shmat`, `shmctl`, `msgget`, `msgsnd`, `msgrcv`, `msgctl`, `semget`, `semop`, `semtimedop`, `semctl` | deny | allowed | a container has an IPC namespace of its own; jobs share the host's, where these reach the host's segments by key. `multiprocessing` uses pipes, socketpairs and `/dev/shm` files |
//! | `mq_open`, `mq_unlink`, `mq_timedsend`, `mq_timedreceive`, `mq_notify`, `mq_getsetattr` | deny | allowed | as System V IPC |
//! | `iopl`, `ioperm` (x86_64) | deny | CAP_SYS_RAWIO | |
//! | `nfsservctl`, `create_module`, `get_kernel_syms`, `query_module`, `uselib`, `ustat`, `sysfs`, `_sysctl` (x86_64) | deny | deny | obsolete |

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// The x32 ABI flag of x86_64 system call numbers.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Socket types a socketpair may have (the low four bits of `type`; the rest are flags).
const PAIR_TYPES: [u64; 2] = [libc::SOCK_STREAM as u64, libc::SOCK_SEQPACKET as u64];

/// The namespace flags of `clone` (Docker's mask, 0x7e020000).
const CLONE_NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// The `personality` values Docker allows: PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32
/// and the query.
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Denied outright (`EPERM`), by the names of the table above.
const DENIED: &[(&str, i64)] = &[
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("chroot", libc::SYS_chroot),
    ("pivot_root", libc::SYS_pivot_root),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("keyctl", libc::SYS_keyctl),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("bpf", libc::SYS_bpf),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("mbind", libc::SYS_mbind),
    ("set_mempolicy", libc::SYS_set_mempolicy),
    ("move_pages", libc::SYS_move_pages),
    ("shmget", libc::SYS_shmget),
    ("shmat", libc::SYS_shmat),
    ("shmctl", libc::SYS_shmctl),
    ("msgget", libc::SYS_msgget),
    ("msgsnd", libc::SYS_msgsnd),
    ("msgrcv", libc::SYS_msgrcv),
    ("msgctl", libc::SYS_msgctl),
    ("semget", libc::SYS_semget),
    ("semop", libc::SYS_semop),
    ("semtimedop", libc::SYS_semtimedop),
    ("semctl", libc::SYS_semctl),
    ("mq_open", libc::SYS_mq_open),
    ("mq_unlink", libc::SYS_mq_unlink),
    ("mq_timedsend", libc::SYS_mq_timedsend),
    ("mq_timedreceive", libc::SYS_mq_timedreceive),
    ("mq_notify", libc::SYS_mq_notify),
    ("mq_getsetattr", libc::SYS_mq_getsetattr),
];

/// Denied outright, x86_64 only. `create_module`, `get_kernel_syms` and `query_module` have
/// numbers but no libc constants (the kernel dropped them in 2.6).
#[cfg(target_arch = "x86_64")]
const DENIED_X86_64: &[(&str, i64)] = &[
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("nfsservctl", libc::SYS_nfsservctl),
    ("create_module", 174),
    ("get_kernel_syms", 177),
    ("query_module", 178),
    ("uselib", libc::SYS_uselib),
    ("ustat", libc::SYS_ustat),
    ("sysfs", libc::SYS_sysfs),
    ("_sysctl", libc::SYS__sysctl),
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_X86_64: &[(&str, i64)] = &[];

/// Denied for some arguments (the table's `args`).
const BY_ARGS: &[(&str, i64)] = &[
    ("socket", libc::SYS_socket),
    ("socketpair", libc::SYS_socketpair),
    ("clone", libc::SYS_clone),
    ("personality", libc::SYS_personality),
];

/// Answered `ENOSYS`.
const NOT_IMPLEMENTED: &[(&str, i64)] = &[("clone3", libc::SYS_clone3)];

/// Every system call the filter does not simply allow, with its decision as the table at the
/// top of this file names it (`deny`, `ENOSYS` or `args`), and its number here.
pub fn decisions() -> Vec<(&'static str, &'static str, i64)> {
    let label = |list: &'static [(&'static str, i64)], label: &'static str| {
        list.iter().map(move |&(name, nr)| (name, label, nr))
    };
    label(DENIED, "deny")
        .chain(label(DENIED_X86_64, "deny"))
        .chain(label(BY_ARGS, "args"))
        .chain(label(NOT_IMPLEMENTED, "ENOSYS"))
        .collect()
}

fn condition(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// The rules that deny some arguments of each `BY_ARGS` call: a call is denied when any rule of
/// its chain matches, and a rule matches when all its conditions hold.
fn argument_rules(
    allow_inet: bool,
) -> Result<Vec<(i64, Vec<SeccompRule>)>, seccompiler::BackendError> {
    // socket(family, ...): deny unless the family is allowed.
    let families: &[u64] = if allow_inet {
        &[libc::AF_INET as u64, libc::AF_INET6 as u64]
    } else {
        &[]
    };
    let socket_rule = if families.is_empty() {
        // No condition would make the rule invalid; `family >= 0` always holds.
        SeccompRule::new(vec![condition(0, SeccompCmpOp::Ge, 0)?])?
    } else {
        SeccompRule::new(
            families
                .iter()
                .map(|&f| condition(0, SeccompCmpOp::Ne, f))
                .collect::<Result<_, _>>()?,
        )?
    };
    // socketpair(family, type, ...): deny a family other than AF_UNIX, and every type whose
    // low four bits are not an allowed one.
    let mut pair_rules = vec![SeccompRule::new(vec![condition(
        0,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?])?];
    for kind in (0..16u64).filter(|k| !PAIR_TYPES.contains(k)) {
        pair_rules.push(SeccompRule::new(vec![condition(
            1,
            SeccompCmpOp::MaskedEq(0xf),
            kind,
        )?])?);
    }
    // clone(flags, ...): deny when any namespace flag is set (flags is the first argument on
    // x86_64 and aarch64).
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|&flag| SeccompRule::new(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)?]))
        .collect::<Result<_, _>>()?;
    // personality(persona): deny every value but Docker's.
    let personality_rule = SeccompRule::new(
        PERSONALITIES
            .iter()
            .map(|&p| condition(0, SeccompCmpOp::Ne, p))
            .collect::<Result<_, _>>()?,
    )?;
    Ok(vec![
        (libc::SYS_socket, vec![socket_rule]),
        (libc::SYS_socketpair, pair_rules),
        (libc::SYS_clone, clone_rules),
        (libc::SYS_personality, vec![personality_rule]),
    ])
}

/// The audit architecture value that `seccomp_data.arch` holds for `arch`.
fn audit_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::x86_64 => 0xc000_003e,
        TargetArch::aarch64 => 0xc000_00b7,
        TargetArch::riscv64 => 0xc000_00f3,
    }
}

/// Compiles the filter for this machine's architecture. `allow_inet`: `socket(AF_INET[6])`
/// stays allowed (only when jobs run in an empty network namespace).
// Public for the integration tests (tests/gym/seccomp_filter.rs).
#[doc(hidden)]
pub fn sandbox_filter(allow_inet: bool) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp target for {}: {e}", std::env::consts::ARCH))?;
    let build = || -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            argument_rules(allow_inet)?.into_iter().collect();
        for &(_, nr) in DENIED.iter().chain(DENIED_X86_64) {
            rules.insert(nr, Vec::new());
        }
        Ok(rules)
    };
    let rules = build().map_err(|e| format!("build the seccomp rules: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("build the seccomp filter: {e}"))?;
    let body =
        BpfProgram::try_from(filter).map_err(|e| format!("compile the seccomp filter: {e}"))?;
    Ok([prelude(arch), body].concat())
}

/// What seccompiler's filter cannot say (one action per filter): `ENOSYS` for `clone3`, and, on
/// x86_64, `EPERM` for every x32 call. Runs first and falls through to the compiled filter,
/// which checks the architecture again (and kills on a foreign one); its jumps are relative, so
/// the prelude moves nothing. Only the architecture and the call number are read, so the
/// kernel's per-call cache still allows the common calls without running the filter.
fn prelude(arch: TargetArch) -> Vec<sock_filter> {
    // Classic BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JSET|BPF_K,
    // BPF_JMP|BPF_JA, BPF_RET|BPF_K.
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const JA: u16 = 0x05;
    const RET_K: u16 = 0x06;
    const RET_ERRNO: u32 = 0x0005_0000;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let enosys = insn(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32);
    let clone3 = NOT_IMPLEMENTED[0].1 as u32;
    let mut prelude = vec![
        // A = arch; a foreign architecture goes straight to the compiled filter (jf below).
        insn(LD_W_ABS, 0, 0, 4),
        insn(JEQ_K, 0, 0, audit_arch(arch)),
        // A = nr.
        insn(LD_W_ABS, 0, 0, 0),
    ];
    if arch == TargetArch::x86_64 {
        prelude.extend([
            // x32: on to the EPERM return, 3 on.
            insn(JSET_K, 3, 0, X32_SYSCALL_BIT),
            insn(JEQ_K, 0, 1, clone3),
            enosys,
            // Neither: past the EPERM return, into the compiled filter.
            insn(JA, 0, 0, 1),
            insn(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        ]);
    } else {
        prelude.extend([insn(JEQ_K, 0, 1, clone3), enosys]);
    }
    // From the architecture check, a mismatch jumps to the first instruction after the prelude.
    prelude[1].jf = (prelude.len() - 2) as u8;
    prelude
}

/// In the child, between fork and exec: no new privileges, then install `program`.
/// Async-signal-safe (two system calls, no allocation).
pub(crate) fn apply(program: &BpfProgram) -> std::io::Result<()> {
    match seccompiler::apply_filter(program) {
        Ok(()) => Ok(()),
        Err(seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e)) => Err(e),
        Err(_) => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// `program` as hex, 8 bytes per instruction in the kernel's `struct sock_filter` layout
/// (native endian), for the fork server, which installs it with `prctl(PR_SET_SECCOMP)`.
// Public for the integration tests (tests/gym/seccomp_filter.rs).
#[doc(hidden)]
pub fn to_hex(program: &BpfProgram) -> String {
    let mut hex = String::with_capacity(program.len() * 16);
    for insn in program {
        let mut bytes = [0u8; 8];
        bytes[0..2].copy_from_slice(&insn.code.to_ne_bytes());
        bytes[2] = insn.jt;
        bytes[3] = insn.jf;
        bytes[4..8].copy_from_slice(&insn.k.to_ne_bytes());
        for b in bytes {
            hex.push_str(&format!("{b:02x}"));
        }
    }
    hex
}
