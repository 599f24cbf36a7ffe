//! The `agentrl` command-line tool: the binary of the workspace. The logic lives in the
//! library crates (`crates/`, in data-flow order: gym → chat → model → engine → rollout → rl →
//! train → run); [`cli`] only parses flags and calls them.

// candle allocates and zeroes many short-lived buffers per step; mimalloc measured 2x faster
// than the system allocator for the TinyAgent training step (see shared/DESIGN.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;

/// mimalloc's `mi_option_purge_delay`: index 15 of `mi_option_e` in both versions
/// libmimalloc-sys bundles (v2 and v3, `include/mimalloc.h`); the crate's own constants skip it.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

fn main() -> std::process::ExitCode {
    // Freed memory stays with the process instead of going back to the OS after a delay. A
    // step frees and reallocates the same buffers every time; purged, each reallocation
    // faulted its pages in again, zeroing 2 MiB huge pages, which was 13% of a training step
    // and half of a rollout (`perf`, issue 16). MIMALLOC_PURGE_DELAY, if set, still wins.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: a plain option store, before any thread exists.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    cli::main()
}
