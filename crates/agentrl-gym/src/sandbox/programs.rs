//! The Python programs the sandbox starts, embedded in the binary: the worker (the Python half
//! of both executors), the trusted checker (appended to the worker) and the verdict tree (the
//! program of one sandboxed job per verdict).
//!
//! They live with the sandbox, at the bottom of the gym crate, because the sandbox is what
//! starts them: the pool's fork servers load the verdict tree and run the checker, so the
//! layers above (`harness`, `trusted`, `verify`) take them from here and the sandbox names
//! nothing above it. `fork.py` is the one fork helper of the worker and the verdict tree: each
//! runs as a single source text and cannot import the other's file, so it is put in front of
//! both here.

/// The worker (`worker.py`, after `fork.py`): `fresh_main()` or `serve(config)` is appended
/// by the executor that starts it.
pub(crate) const WORKER_PY: &str =
    concat!(include_str!("fork.py"), "\n", include_str!("worker.py"));

/// The trusted checker's Python half (appended to [`WORKER_PY`], whose helpers it uses).
pub(crate) const CHECKER_PY: &str = include_str!("checker.py");

/// Runs every hidden case of one verdict as a warm job tree (see `verdict_tree.py`, after
/// `fork.py`): the modules are imported once, each case runs in a process forked from that
/// interpreter, with its own limits, namespace, pristine builtins and result pipe, and the
/// workspace put back between cases. Stdin: `harness::tree_stdin`.
pub const VERDICT_TREE_PROGRAM: &str = concat!(
    include_str!("fork.py"),
    "\n",
    include_str!("verdict_tree.py")
);
