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
/// The server needs the `service` feature (the async HTTP stack); the workspace build turns
/// it on.
#[cfg(feature = "service")]
mod service;
#[cfg(feature = "service")]
mod service_stack;
#[cfg(feature = "service")]
mod state_crossing;
mod trusted_checker;
mod trusted_checks;
mod validate_builtin;
mod verdict_paths;
#[cfg(feature = "service")]
mod workspace_quota;

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

/// `POST url` with a JSON body: `(status, JSON answer)`; error statuses are answers too.
pub fn post_json(url: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let result = ureq::post(url)
        .set("Connection", "close")
        .timeout(std::time::Duration::from_secs(120))
        .send_string(&body.to_string());
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let status = response.status();
    let text = response.into_string().expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}
