//! The socket filter: a seccomp-bpf program that closes the channels to host processes that
//! Landlock and the network namespace leave open. Landlock checks `open`, but not `connect`: a
//! job could reach any process listening on a pathname Unix socket (`/tmp/*.sock`, `/run/...`), and
//! abstract Unix sockets are only scoped from Landlock ABI 6 on. Rather than enumerate paths,
//! the filter takes away the means: a job cannot create a socket that can be pointed at an
//! address outside itself.
//!
//! What it denies (`EACCES`, so Python raises `PermissionError`):
//! - `socket()` of every family except `AF_INET`/`AF_INET6`, and those too when the network
//!   namespace is off (inside the empty namespace they reach nothing);
//! - `socketpair()` except `AF_UNIX` with `SOCK_STREAM` or `SOCK_SEQPACKET`: a pair is connected
//!   at birth and such a socket cannot be re-pointed (`connect` and `sendto` give `EISCONN`),
//!   while a datagram pair could be `connect`ed to a host socket. Stream pairs are what the
//!   stdlib uses: `socket.socketpair()`, asyncio's self-pipe, `multiprocessing.Pipe()`;
//! - `io_uring_setup`/`_enter`/`_register`: io_uring can open and connect sockets without the
//!   system calls above;
//! - System V IPC (`shm*`, `msg*`, `sem*`) and POSIX message queues (`mq_*`): the other
//!   channels to host processes that neither the network namespace nor Landlock covers (a
//!   segment or queue of the host is reachable by its key or name). The stdlib needs none of
//!   them: `multiprocessing` uses pipes, socketpairs and `/dev/shm` files (which Landlock
//!   governs).
//!
//! On x86_64 the x32 numbers of the same calls are denied as well (the architecture check that
//! starts every program does not tell x32 from x86_64). Every other call is allowed: the other
//! layers confine the rest.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The x32 ABI flag of x86_64 system call numbers.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// Socket types a socketpair may have (the low four bits of `type`; the rest are flags).
const PAIR_TYPES: [u64; 2] = [libc::SOCK_STREAM as u64, libc::SOCK_SEQPACKET as u64];

fn condition(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// Compiles the filter for this machine's architecture. `allow_inet`: `socket(AF_INET[6])`
/// stays allowed (only when jobs run in an empty network namespace).
// Public for the integration tests (tests/gym/seccomp_filter.rs).
#[doc(hidden)]
pub fn socket_filter(allow_inet: bool) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp target for {}: {e}", std::env::consts::ARCH))?;
    let build = || -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
        // socket(family, ...): deny unless the family is allowed. One rule, all conditions
        // must hold for it to match (and deny).
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
        // socketpair(family, type, ...): deny a family other than AF_UNIX, and every type
        // whose low four bits are not an allowed one.
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
        let mut rules = BTreeMap::new();
        rules.insert(libc::SYS_socket, vec![socket_rule]);
        rules.insert(libc::SYS_socketpair, pair_rules);
        for call in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmctl,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
            libc::SYS_mq_open,
            libc::SYS_mq_unlink,
            libc::SYS_mq_timedsend,
            libc::SYS_mq_timedreceive,
            libc::SYS_mq_notify,
            libc::SYS_mq_getsetattr,
        ] {
            rules.insert(call, Vec::new());
        }
        if arch == TargetArch::x86_64 {
            let x32: Vec<(i64, Vec<SeccompRule>)> = rules
                .iter()
                .map(|(&nr, chain)| (nr | X32_SYSCALL_BIT, chain.clone()))
                .collect();
            rules.extend(x32);
        }
        Ok(rules)
    };
    let rules = build().map_err(|e| format!("build the seccomp rules: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| format!("build the seccomp filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("compile the seccomp filter: {e}"))
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
