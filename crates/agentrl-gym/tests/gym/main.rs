//! `agentrl-gym`'s integration tests, one test target (`gym`): tasks, tools, sandbox and
//! verifier (the task end of the data flow) through the public API. Run one module with
//! `cargo test --release --workspace --test gym -- sandbox_attacks::`.

/// Needs the `cli` feature (the play/run loops); the workspace build turns it on.
#[cfg(feature = "cli")]
mod env_tools;
mod generator_reproduces_builtin;
mod real_tasks;
mod sandbox_attacks;
mod scratch_dirs;
mod trusted_checks;
mod validate_builtin;
