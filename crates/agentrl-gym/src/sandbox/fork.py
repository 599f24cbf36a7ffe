# agentrl fork helper: the one fork both embedded programs use, put in front of the worker
# (worker.py) and of the verdict tree (verdict_tree.py) when they are embedded (programs.rs),
# since each runs as one source text and neither can import the other's file.
import os


def raw_fork():
    """libc's fork(), called with the GIL held, or os.fork where ctypes is missing.

    os.fork runs CPython's at-fork machinery in both processes (it re-initialises the runtime's
    locks and thread states and runs every os.register_at_fork hook); in a job or case process
    that costs about 180 copy-on-write page faults and 1 ms of CPU, more than a case itself
    (measured: 600 forks + _exit of a plain python3, children's minor faults 142,990 with
    os.fork against 33,600). Both callers fork from their main thread, so the child's one
    thread is the main thread CPython knows; threads the code under test started at import
    do not exist in the child (as after any fork), and a case that waits on them waits on its
    own time limit.

    Only `Exception` falls back to os.fork: a missing or unusable ctypes raises ImportError,
    AttributeError or OSError, while a KeyboardInterrupt or SystemExit arriving here is a
    request to stop, which a fallback would swallow (no code under test has run yet, so
    nothing else can raise here)."""
    try:
        import ctypes

        libc_fork = ctypes.PyDLL(None).fork
        libc_fork.restype = ctypes.c_int
        libc_fork.argtypes = []
    except Exception:
        return os.fork

    def fork():
        pid = libc_fork()
        if pid < 0:
            raise OSError(ctypes.get_errno(), "fork failed")
        return pid

    return fork
