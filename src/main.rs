//! The `agentrl` command-line tool. All logic lives in the library; this file only sets up the
//! allocator and logging and hands over to [`agentrl::cli`].

// candle allocates and zeroes many short-lived buffers per step; mimalloc measured 2x faster
// than the system allocator for the TinyAgent training step (see shared/DESIGN.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    agentrl::cli::main()
}
