//! `agentrl-gym`'s integration tests, one test target (`gym`): tasks, tools, sandbox and
//! verifier (the task end of the data flow) through the public API. Run one module with
//! `cargo test --release --workspace --test gym -- sandbox_attacks::`.

mod builtin_extraction;
mod check;
/// Needs the `cli` feature (the play/run loops); the workspace build turns it on.
#[cfg(feature = "cli")]
mod env_tools;
mod expert;
mod generator_reproduces_builtin;
mod harness;
mod landlock_rules;
mod real_tasks;
mod render;
mod reward;
mod sandbox_attacks;
mod sandbox_syscalls;
mod scratch_dirs;
mod scratch_owners;
mod seccomp_filter;
mod service;
mod state_crossing;
mod trusted_checker;
mod trusted_checks;
mod validate_builtin;
mod verdict_paths;

/// The built-in tasks and one sandbox pool, made once for the whole binary (a pool starts
/// worker interpreters).
pub fn shared() -> (
    std::sync::Arc<agentrl_gym::task::TaskSet>,
    std::sync::Arc<dyn agentrl_gym::sandbox::Executor>,
) {
    use std::sync::{Arc, OnceLock};
    type Shared = (
        Arc<agentrl_gym::task::TaskSet>,
        Arc<dyn agentrl_gym::sandbox::Executor>,
    );
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            (
                Arc::new(agentrl_gym::task::TaskSet::builtin().expect("built-in tasks")),
                agentrl_gym::sandbox::default_executor().expect("sandbox pool"),
            )
        })
        .clone()
}
