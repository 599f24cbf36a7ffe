//! The `agentrl` command-line tool: the binary of the workspace. The logic lives in the
//! library crates (`crates/`, in data-flow order: gym → chat → model → engine → rollout → rl →
//! train → run); [`cli`] only parses flags and calls them.

// candle allocates and zeroes many short-lived buffers per step; mimalloc measured 2x faster
// than the system allocator for the TinyAgent training step (see shared/DESIGN.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;

fn main() -> std::process::ExitCode {
    // Freed memory stays with the process (`agentrl_train::allocator` has the measurements).
    agentrl_train::allocator::keep_freed_pages();
    // No candle thread pool beside rayon's (`agentrl_train::threads::single_candle_pool`).
    agentrl_train::threads::single_candle_pool();
    cli::main()
}
