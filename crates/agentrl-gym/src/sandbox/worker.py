# agentrl sandbox worker: the Python half of the sandbox (embedded in the Rust crate with
# include_str!, after fork.py, and run as `python3 -I -c <fork.py + this source + entry call>`).
#
# Two entry points:
#   fresh_main()  - FreshExecutor: the Rust side already confined this process (pre_exec);
#                   read the program from fd 4 and run it as __main__.
#   serve(config) - PoolExecutor: a warm fork server, started by Rust as PID 1 of its own PID
#                   namespace. It pre-imports the stdlib modules tests use, then for every job
#                   gives the workspace to the job uid, builds the job's Landlock ruleset and
#                   compiles the program (cached by text) and the workspace's modules, and forks
#                   a job process that applies rlimits, the ruleset, the uid drop and the
#                   scrubbed environment (the seccomp filter is the server's own, inherited
#                   by every fork), and runs
#                   the program. Work done before the fork costs the job process no
#                   copy-on-write page faults, which dominate a job's CPU cost. After the job the server kills
#                   every other process in its namespace (kill(-1) from a namespace's PID 1
#                   reaches all of them, daemons that called setsid included) and reaps them, so
#                   nothing a job starts outlives it. The server never imports workspace code,
#                   so its module cache cannot leak between jobs.
#
# Wire format on the server's stdin/stdout (both directions): a frame is
#   u32 big-endian header length, header JSON, then the blobs listed in header["blobs"]
#   (their lengths), raw bytes back to back.

import os
import sys

# Only os and sys load at start-up: fresh_main() must stay cheap. The fork server imports the
# rest once, before its first job.

EXIT_SETUP_FAILED = 126


def _exit_code_of(exc):
    # Same rules as the interpreter's handling of SystemExit.
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def run_program(source, code=None, entry=None):
    """Run `source` as a fresh __main__ module; returns the exit code. Never raises. `code` is
    `source` already compiled (the fork server compiles each distinct program once). `entry`:
    a function the fork server loaded from the very same source (the verdict tree's `main`),
    called instead of running the source again."""
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    if not sys.path or sys.path[0] != "":
        # The workspace (cwd) comes first on sys.path, as for `python -c`.
        sys.path.insert(0, "")
    try:
        if entry is not None:
            entry()
        else:
            if code is None:
                code = compile(source, "<agentrl>", "exec")
            exec(code, main.__dict__)
        status = 0
    except SystemExit as exc:
        status = _exit_code_of(exc)
    except BaseException as exc:  # the program's own failure: print it like the interpreter
        import traceback

        tb = exc.__traceback__
        # Hide this runner's frame; the program's frames start at <agentrl>.
        if tb is not None and tb.tb_frame.f_code is run_program.__code__:
            tb = tb.tb_next
        try:
            traceback.print_exception(type(exc), exc, tb)
        except Exception:
            pass
        status = 1
    return status


def _finish(status):
    # The end of a normal interpreter run: non-daemon threads, atexit, flush. Each step only
    # when there is something to do (they cost milliseconds in a forked child otherwise).
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        if atexit._ncallbacks():
            atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


def fresh_main():
    chunks = []
    while True:
        chunk = os.read(4, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(4)
    source = b"".join(chunks).decode("utf-8", "surrogateescape")
    _finish(run_program(source))


# ---------------------------------------------------------------------------------------------
# Landlock through raw syscalls (x86_64 / aarch64 numbers are the same: 444, 445, 446).

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15


def _fs_rights_for_abi(abi):
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _oserror(what):
    import ctypes

    err = ctypes.get_errno()
    return OSError(err, "%s: %s" % (what, os.strerror(err)))


class Landlock:
    """Landlock for the job processes, prepared by the fork server. The static rules (read and
    execute on `read_only`, read and write on the device files in `read_write_files`; missing
    paths skipped) are opened and packed once. Per job the server builds a fresh ruleset (the
    static rules plus everything inside the workspace) before it forks, and the job process
    only calls landlock_restrict_self on it: no ctypes work in the job process."""

    def __init__(self, abi, read_only, read_write_files):
        import ctypes
        import struct

        _load_libc()
        handled_fs = _fs_rights_for_abi(abi)
        handled_net = 3 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP with no rule: both denied
        scoped = 3 if abi >= 6 else 0  # abstract unix sockets and signals stay inside the domain
        if abi >= 6:
            attr = struct.pack("<QQQ", handled_fs, handled_net, scoped)
        elif abi >= 4:
            attr = struct.pack("<QQ", handled_fs, handled_net)
        else:
            attr = struct.pack("<Q", handled_fs)
        self._attr = ctypes.create_string_buffer(attr, len(attr))
        self._attr_size = ctypes.c_size_t(len(attr))
        self._handled_fs = handled_fs
        self._file_rights = handled_fs & (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
        read_exec = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        rules = [(p, read_exec) for p in read_only]
        rules += [(p, FS_READ_FILE | FS_WRITE_FILE | (handled_fs & FS_TRUNCATE)) for p in read_write_files]
        # (path, O_PATH fd held for the server's lifetime, packed landlock_path_beneath_attr).
        # The fds are close-on-exec, and job processes close them before running anything.
        self._static = []
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            self._static.append((path, fd, self._rule(fd, rights)))

    def _rule(self, fd, rights):
        import ctypes
        import stat
        import struct

        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= self._file_rights
        return ctypes.create_string_buffer(struct.pack("<Qi", rights, fd), 12)

    def _add(self, ruleset, rule, path):
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0) != 0:
            raise _oserror("landlock_add_rule(%s)" % path)

    def ruleset_static(self):
        """A new ruleset fd (close-on-exec, numbered 5 or above) with the static rules only:
        read and execute on `read_only`, no write anywhere else. The trusted checker's as is
        (it has no workspace); `ruleset_for` adds a job's workspace."""
        import fcntl

        ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, self._attr, self._attr_size, 0)
        if ruleset < 0:
            raise _oserror("landlock_create_ruleset")
        if ruleset < 5:
            # The job process fills fds 0-4 before it moves the ruleset to 5: keep it clear.
            try:
                moved = fcntl.fcntl(ruleset, fcntl.F_DUPFD_CLOEXEC, 5)
            finally:
                os.close(ruleset)
            ruleset = moved
        try:
            for path, _fd, rule in self._static:
                self._add(ruleset, rule, path)
        except BaseException:
            os.close(ruleset)
            raise
        return ruleset

    def ruleset_for(self, workspace):
        """A new ruleset fd for a job in `workspace` (read and write everywhere inside it, plus
        the static rules); the caller closes it."""
        ruleset = self.ruleset_static()
        try:
            fd = os.open(workspace, os.O_PATH | os.O_CLOEXEC)
            try:
                self._add(ruleset, self._rule(fd, self._handled_fs), workspace)
            finally:
                os.close(fd)
        except BaseException:
            os.close(ruleset)
            raise
        return ruleset


def restrict_self(ruleset):
    """Confine this process with `ruleset` (from Landlock.ruleset_for), for good."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _oserror("prctl(PR_SET_NO_NEW_PRIVS)")
    if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        raise _oserror("landlock_restrict_self")


class SocketFilter:
    """The seccomp filter compiled on the Rust side (seccomp.rs: which calls and sockets a job may
    make, and why), as hex `struct sock_filter`s. The fork server installs it on itself once;
    filters are inherited by every fork and kept across exec."""

    def __init__(self, hex_program):
        import ctypes

        raw = bytes.fromhex(hex_program)

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._filter = ctypes.create_string_buffer(raw, len(raw))
        self._prog = SockFprog(len(raw) // 8, ctypes.addressof(self._filter))
        self._prog_ref = ctypes.byref(self._prog)

    def apply(self):
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _oserror("prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._prog_ref, 0, 0) != 0:
            raise _oserror("prctl(PR_SET_SECCOMP)")


# ---------------------------------------------------------------------------------------------
# The fork server.

# What tests commonly import, and no more: every pre-imported module makes each fork copy and
# tear down more page tables, and some cost every job page faults through at-fork hooks, used
# or not. Left out on purpose: unittest.mock (it imports asyncio and ssl: about 180 faults per
# job), threading (its at-fork hook: about 120), random (it reseeds at fork), and the rarely
# used decimal, fractions, statistics, datetime, difflib, pprint, argparse, tempfile, shutil and
# pathlib (about half a millisecond of fork cost together). A test that needs one imports it
# in its own process.
PRELOAD = (
    "unittest", "json", "traceback", "re", "math", "collections", "itertools", "functools",
    "dataclasses", "typing", "types", "io", "string", "copy", "operator", "heapq", "bisect",
    "textwrap", "enum", "abc", "contextlib", "atexit", "weakref", "struct", "inspect",
    "warnings",
)


def _read_exact(fd, n):
    parts = []
    while n > 0:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    header = json.loads(_read_exact(fd, size))
    blobs = [_read_exact(fd, n) if n else b"" for n in header.get("blobs", [])]
    return header, blobs


def _write_frame(fd, header, blobs):
    header = dict(header)
    header["blobs"] = [len(b) for b in blobs]
    raw = json.dumps(header).encode()
    data = b"".join([struct.pack(">I", len(raw)), raw] + list(blobs))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _job_process(job, config, fds, ruleset):
    """Runs in the job process, a child of the server. Never returns. The server already gave
    the workspace to the job uid and built the Landlock `ruleset` (an fd, or None)."""
    stdin_r, stdout_w, stderr_w, result_w, status_w = fds
    server_pid = os.getppid()
    try:
        # Its own session and process group: the wall-timeout kill takes the whole group.
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(stdout_w, 1)
        os.dup2(stderr_w, 2)
        os.dup2(result_w, 3)
        os.dup2(status_w, 4)
        if ruleset is not None:
            os.dup2(ruleset, 5)
            ruleset = 5
            os.closerange(6, 1 << 16)
        else:
            os.closerange(5, 1 << 16)
        workspace = job["workspace"]
        os.chdir(workspace)
        uid = job.get("uid")
        limits = job["limits"]
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Soft < hard: SIGXCPU at the soft limit names a CPU-limit kill; the hard one follows.
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"], limits["max_file_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"], limits["max_open_files"]))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"]))
        if ruleset is not None:
            restrict_self(ruleset)
            os.close(ruleset)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        # After the uid change, which clears it: die if the server dies.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != server_pid:
            os._exit(EXIT_SETUP_FAILED)
        # Last, so that the setup above is not limited by the address-space cap.
        resource.setrlimit(resource.RLIMIT_AS, (limits["address_space_bytes"], limits["address_space_bytes"]))
        # The server's environment is the scrubbed one (serve sets it): only HOME differs. Set
        # here, not by the server: glibc never frees a replaced environment string, so a server
        # that set it for every new workspace would grow with each one. The signal dispositions
        # are the server's (set once in serve: here they cost the job some 100 page faults).
        os.environ["HOME"] = workspace
        sys.stdin, sys.stdout, sys.stderr = _JOB_STREAMS
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = _JOB_STREAMS
        os.close(4)
    except BaseException as exc:
        try:
            os.write(4, ("setup-error %s: %s\n" % (type(exc).__name__, exc)).encode())
        finally:
            os._exit(EXIT_SETUP_FAILED)
    _finish(run_program(job["program"], job.get("code"), job.get("entry")))


_JOB_STREAMS = None


def _make_job_streams():
    """sys.stdin/stdout/stderr of every job, on fds 0-2, which each job process points at its
    own pipes. Made once by the server, which never uses them, so every fork gets them unused
    (building them in the job process costs it some 90 copy-on-write page faults)."""
    import io

    return (
        io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
        io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"),
        io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True
        ),
    )


def _kill_leftovers(config, job_pid):
    """Kills and reaps everything the job left behind (its own process is already reaped)."""
    if not config.get("pid_namespace"):
        # Not PID 1 of a namespace: the job's process group is the best handle we have.
        try:
            os.killpg(job_pid, signal.SIGKILL)
        except OSError:
            pass
        return
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # every process in our namespace except ourselves
        except ProcessLookupError:
            break
        try:
            # Orphans are reparented to us (PID 1): reap until the namespace is empty.
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


class _Sink:
    """One captured stream: keeps the first `cap` bytes, drains a bounded excess, then closes."""

    def __init__(self, fd, cap):
        self.fd = fd
        self.cap = cap
        self.data = bytearray()
        self.seen = 0
        self.truncated = False
        # Past this many bytes the pipe is closed: the writer gets EPIPE instead of us
        # draining a flood until the wall-clock timeout.
        self.drain_limit = max(cap * 16, 1 << 20)

    def feed(self, chunk):
        self.seen += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        if self.seen > self.cap:
            self.truncated = True
        return self.seen <= self.drain_limit


# Programs compiled by the server, by source text. The `test` tool sends the same harness for
# every job, so compiling it once saves the job process a compile. Compiling runs no program
# code. Bounded: a program seen once too often just gets compiled again.
_CODE_CACHE = {}
_CODE_CACHE_MAX = 64


def _compiled(source):
    """`source` compiled as run_program would, or None (the job compiles it and reports any
    SyntaxError the way the interpreter does)."""
    code = _CODE_CACHE.get(source)
    if code is None:
        try:
            code = compile(source, "<agentrl>", "exec")
        except BaseException:
            return None
        if len(_CODE_CACHE) >= _CODE_CACHE_MAX:
            _CODE_CACHE.clear()
        _CODE_CACHE[source] = code
    return code


# Workspace modules compiled by the server, by (path, exact source bytes). Jobs run with
# PYTHONDONTWRITEBYTECODE, so without this every job compiles every module it imports, and in a
# forked process compiling is mostly copy-on-write faults (about a tenth of a bench job).
# Before each fork the server compiles the workspace's small .py files it has not seen; the
# job's import system takes a cached code object only when the bytes it read itself are the
# very bytes that were compiled (_install_compile_cache), so what runs is what an uncached
# import would run. Compiling executes nothing. Holds workspace files only: the job's own
# inputs, never a harness's cases.
_SOURCE_CODE = {}
_SOURCE_CODE_MAX = 128
_SOURCE_MAX_BYTES = 128 << 10
_SOURCE_MAX_FILES = 32


def _precompile_workspace(workspace):
    pending = [workspace]
    files = 0
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                    continue
                if not entry.name.endswith(".py") or not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
                # A file with several hard links could be one outside the workspace.
                if info.st_nlink != 1 or info.st_size > _SOURCE_MAX_BYTES:
                    continue
                files += 1
                if files > _SOURCE_MAX_FILES:
                    return
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    data = os.read(fd, _SOURCE_MAX_BYTES + 1)
                finally:
                    os.close(fd)
                key = (entry.path, data)
                if key in _SOURCE_CODE:
                    continue
                try:
                    code = compile(data, entry.path, "exec", dont_inherit=True)
                except BaseException:
                    continue  # the job compiles it and reports the error as the interpreter would
                if len(_SOURCE_CODE) >= _SOURCE_CODE_MAX:
                    _SOURCE_CODE.clear()
                _SOURCE_CODE[key] = code


def _install_compile_cache():
    """Makes source imports take their code from _SOURCE_CODE when path and bytes match."""
    import importlib._bootstrap_external as external

    compile_source = external.SourceLoader.source_to_code

    def source_to_code(self, data, path, *, _optimize=-1):
        if _optimize == -1 and type(data) is bytes and type(path) is str:
            code = _SOURCE_CODE.get((path, data))
            if code is not None:
                return code
        return compile_source(self, data, path, _optimize=_optimize)

    external.SourceLoader.source_to_code = source_to_code


# A built-in unittest run the server does once before serving: it fills the lazy caches that
# every test job would otherwise fill in its own process (compiled regexes, unittest's loader
# and runner paths, traceback formatting). The module lives only in memory: nothing is read
# from disk and no workspace code is involved.
_WARM_UP_TESTS = """
import unittest

class WarmUp(unittest.TestCase):
    def test_pass(self):
        self.assertEqual([1, 2], [1, 2])
        self.assertIn(1, {1: 2})
        self.assertTrue(True)

    def test_fail(self):
        self.assertEqual({"a": [1, 2]}, {"a": [1, 3]})

    def test_error(self):
        raise ValueError("warm-up")

    @unittest.skip("warm-up")
    def test_skip(self):
        pass
"""


def _warm_up():
    import io
    import types
    import unittest

    module = types.ModuleType("agentrl_warm_up")
    exec(compile(_WARM_UP_TESTS, "<agentrl-warm-up>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(module.__name__)
        stream = io.StringIO()
        result = unittest.TextTestRunner(stream=stream, verbosity=2).run(suite)
        json.dumps({"run": result.testsRun, "failures": len(result.failures), "errors": len(result.errors)})
    finally:
        del sys.modules[module.__name__]


def _give_workspace(workspace, uid):
    """Makes `uid` the owner of `workspace` and everything in it (the host writes files there
    between jobs). Done by the server before the fork: nothing of the previous job is alive.
    Symlinks are changed, never followed; a file with several hard links could be one outside
    the workspace, so it is left alone. Entries already owned are skipped."""
    os.chown(workspace, uid, uid)
    pending = [workspace]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir:
                    pending.append(entry.path)
                if (info.st_uid, info.st_gid) != (uid, uid) and (is_dir or info.st_nlink == 1):
                    os.lchown(entry.path, uid, uid)


def _run_job(job, program, stdin, config, landlock):
    job = dict(job)
    job["program"] = program.decode("utf-8", "surrogateescape")
    if _VERDICT_TREE is not None and job["program"] == _VERDICT_TREE[0]:
        job["entry"] = _VERDICT_TREE[1]
    else:
        job["code"] = _compiled(job["program"])
    if job.get("uid") is not None:
        _give_workspace(job["workspace"], job["uid"])
    _precompile_workspace(job["workspace"])
    ruleset = landlock.ruleset_for(job["workspace"]) if landlock is not None else None
    try:
        return _fork_job(job, stdin, config, ruleset)
    finally:
        if ruleset is not None:
            os.close(ruleset)


_FORK = os.fork

# (source, main) of the verdict tree (verdict_tree.py, sent in the config), loaded and warmed
# up once by the server: a job whose program is exactly that source calls `main` instead of
# running the source, so what each verdict would spend binding the tree's helpers and
# specialising their bytecode is spent once per server (measured: about 1.6 ms of a 14 ms
# verdict). The tree takes its copy of the builtins here, before any job exists, which is as
# pristine as a fresh interpreter's; the job runs exactly the code of that source.
_VERDICT_TREE = None


def _load_verdict_tree(source):
    import builtins

    namespace = {"__name__": "agentrl_verdict_tree", "__builtins__": builtins}
    exec(compile(source, "<agentrl-verdict-tree>", "exec"), namespace)
    main, warm_up = namespace["_tree"]()
    try:
        warm_up()
    except Exception:
        pass
    return source, main


def _fork_job(job, stdin, config, ruleset):
    # select.poll rather than selectors: the server's work while a job runs touches pages the
    # job shares, and each costs a copy-on-write fault; poll keeps that work small.
    limits = job["limits"]
    cap = limits["output_cap_bytes"]
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    status_r, status_w = os.pipe()
    child_fds = (stdin_r, stdout_w, stderr_w, result_w, status_w)
    start = time.monotonic()
    job_pid = _FORK()
    if job_pid == 0:
        try:
            for fd in (stdin_w, stdout_r, stderr_r, result_r, status_r):
                os.close(fd)
            _job_process(job, config, child_fds, ruleset)
        finally:
            os._exit(EXIT_SETUP_FAILED)
    for fd in child_fds:
        os.close(fd)
    job_exit = os.pidfd_open(job_pid)
    deadline = start + limits["time_limit_s"]
    poller = select.poll()
    # The fds registered with poller (to drain and close at the end).
    registered = set()
    sinks = {}
    for fd in (stdout_r, stderr_r, result_r):
        os.set_blocking(fd, False)
        sinks[fd] = _Sink(fd, cap)
    for fd in (stdout_r, stderr_r, result_r, status_r, job_exit):
        poller.register(fd, select.POLLIN)
        registered.add(fd)
    status_buf = bytearray()
    os.set_blocking(status_r, False)
    pending_stdin = memoryview(stdin)
    os.set_blocking(stdin_w, False)
    if pending_stdin:
        poller.register(stdin_w, select.POLLOUT)
        registered.add(stdin_w)
    else:
        os.close(stdin_w)
        stdin_w = None
    timed_out = False
    wait_status = None
    open_reads = 4
    while open_reads > 0 or wait_status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = wait_status is None
            break
        for fd, _ in poller.poll(remaining * 1000.0):
            if fd not in registered:
                continue
            if fd == job_exit:
                poller.unregister(fd)
                registered.discard(fd)
                os.close(fd)
                _, wait_status = os.waitpid(job_pid, 0)
                # Everything still holding the pipes dies now, so they reach end of file.
                _kill_leftovers(config, job_pid)
                continue
            if fd == stdin_w:
                try:
                    pending_stdin = pending_stdin[os.write(fd, pending_stdin):]
                except BlockingIOError:
                    continue
                except OSError:  # the program closed its stdin
                    pending_stdin = pending_stdin[:0]
                if not pending_stdin:
                    poller.unregister(fd)
                    registered.discard(fd)
                    os.close(fd)
                    stdin_w = None
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            keep = bool(chunk)
            if fd == status_r:
                status_buf += chunk
            elif chunk:
                keep = sinks[fd].feed(chunk)
            if not keep:
                poller.unregister(fd)
                registered.discard(fd)
                os.close(fd)
                open_reads -= 1
    if wait_status is None:
        # Timed out (or the pipes outlived the job): kill the job's group, then the rest.
        try:
            os.killpg(job_pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(job_pid, signal.SIGKILL)
        except OSError:
            pass
        poller.unregister(job_exit)
        registered.discard(job_exit)
        os.close(job_exit)
        _, wait_status = os.waitpid(job_pid, 0)
        _kill_leftovers(config, job_pid)
    # Collect what is still buffered in the pipes (everything writing to them is dead now).
    for fd in list(registered):
        if fd != stdin_w:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not chunk:
                    break
                if fd == status_r:
                    status_buf += chunk
                elif not sinks[fd].feed(chunk):
                    break
        poller.unregister(fd)
        os.close(fd)
    elapsed = time.monotonic() - start
    setup_error = None
    for line in bytes(status_buf).decode("utf-8", "replace").splitlines():
        if line.startswith("setup-error "):
            setup_error = line[len("setup-error "):]
    if timed_out:
        termination = {"kind": "timed_out"}
    elif os.WIFSIGNALED(wait_status):
        termination = {"kind": "signaled", "signal": os.WTERMSIG(wait_status)}
    else:
        termination = {"kind": "exited", "code": os.WEXITSTATUS(wait_status)}
    if setup_error is not None and termination.get("code") == EXIT_SETUP_FAILED:
        termination = None
    header = {
        "termination": termination,
        "setup_error": setup_error,
        "truncated": any(s.truncated for s in sinks.values()),
        "elapsed_s": elapsed,
    }
    return header, [bytes(sinks[stdout_r].data), bytes(sinks[stderr_r].data), bytes(sinks[result_r].data)]


def serve(config_json):
    global ctypes, json, resource, select, signal, struct, time
    import ctypes
    import json
    import resource
    import select
    import signal
    import struct
    import time

    import gc

    _load_libc()
    config = json.loads(config_json)
    # The job processes inherit this environment (they set HOME) and these dispositions:
    # Python's own for SIGINT, and the default for the rest, whatever we inherited.
    os.environ.clear()
    os.environ.update(config["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    landlock = None
    if config.get("landlock_abi", 0) > 0:
        landlock = Landlock(config["landlock_abi"], config["read_only_paths"], config["read_write_files"])
    if config.get("socket_filter"):
        # On the server itself, which needs no socket: every job process inherits it from the
        # fork, so no job pays for installing (and JIT-compiling) it.
        SocketFilter(config["socket_filter"]).apply()
    # The server's cwd is "/": never import from there. Jobs put "" (their workspace) back.
    while "" in sys.path:
        sys.path.remove("")
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:
            pass
    _install_compile_cache()
    global _FORK, _VERDICT_TREE
    _FORK = raw_fork()
    if config.get("verdict_tree"):
        try:
            _VERDICT_TREE = _load_verdict_tree(config["verdict_tree"])
        except Exception:
            _VERDICT_TREE = None  # tree jobs then run the source like any program
    global _JOB_STREAMS
    _JOB_STREAMS = _make_job_streams()
    try:
        _warm_up()
    except Exception:
        pass
    # Keep the garbage collector of forked jobs off the server's objects: fewer copy-on-write
    # page faults per fork.
    gc.collect()
    gc.freeze()
    # Requests arrive on fd 0, replies leave on fd 1. The job processes get fresh fds 0-3.
    while True:
        frame = _read_frame(0)
        if frame is None:
            return
        header, blobs = frame
        try:
            reply, reply_blobs = _run_job(header, blobs[0], blobs[1], config, landlock)
        except Exception as exc:  # a server-side failure is reported, the server keeps serving
            reply, reply_blobs = {"termination": None, "setup_error": "worker: %s: %s" % (type(exc).__name__, exc)}, [b"", b"", b""]
        _write_frame(1, reply, reply_blobs)
