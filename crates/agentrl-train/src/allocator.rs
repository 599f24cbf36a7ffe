//! The allocator's one setting: freed memory stays with the process. Set at the trainer's
//! entry points beside [`crate::threads::apply`], before the first step, and by the `agentrl`
//! binary at start-up.
//!
//! A training step frees and reallocates the same large buffers every time. mimalloc, the
//! allocator `agentrl` runs on, gives freed memory back to the OS after 10 ms by default, so
//! each reallocation faulted its pages in again and the kernel zeroed them: 13% of a TinyAgent
//! step and half of a rollout (`perf`, issue 16). Set here as well as in the binary so that a
//! library user or a test binary (`tests/qwen3_loop.rs`) trains as `agentrl` does. Alone it
//! did not shorten the `qwen3_loop` tests (462 s with it, 464 s without): most of their page
//! faults were copy-on-write copies of pages the sandbox's fork-server relays still shared
//! with the trainer (`do_wp_page`), gone since the relay execs a program of its own
//! (`agentrl_gym` sandbox, `ExecRelay`: that binary's system time 209 s -> 30 s). A process
//! whose global allocator is not mimalloc is unaffected: the setting only reaches mimalloc's
//! own heap.

/// mimalloc's `mi_option_purge_delay`: index 15 of `mi_option_e` in both versions
/// libmimalloc-sys bundles (v2 and v3, `include/mimalloc.h`); the crate's own constants skip it.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Makes mimalloc keep freed pages instead of purging them (`purge_delay = -1`). Idempotent.
/// `MIMALLOC_PURGE_DELAY`, when set in the environment, still wins.
pub fn keep_freed_pages() {
    // Linked through the `mimalloc` dependency, so the symbol exists in every binary that
    // links this crate, whichever global allocator it chose.
    use mimalloc as _;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: a plain store of one option value, which mimalloc reads on its next purge.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}
