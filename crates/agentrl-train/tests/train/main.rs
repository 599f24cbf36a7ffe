//! `agentrl-train`'s integration tests, one test target (`train`): sessions on a few real
//! BugFix tasks (the update end of the data flow: batch → loss → update → run directory). Run
//! one module with `cargo test --release --workspace --test train -- train_loop::`.
//!
//! Two files stay test targets of their own, as they rest on process-wide state:
//! `tests/plan_memory.rs` installs a counting `#[global_allocator]`, and `tests/qwen3_loop.rs`
//! trains on `train.threads=2` while every module here uses 1 (a process computes on one
//! thread count: `agentrl_train::threads::apply`).

mod algo;
#[path = "../common/mod.rs"]
mod common;
mod config;
mod distill;
mod engine_amx;
mod eval_spec;
mod gdpo;
mod metrics;
mod optim;
mod plan;
mod post_training;
mod preflight;
mod registry;
mod run_state;
mod schedule;
mod session;
mod sft;
mod small_runs;
mod step_record;
mod streams;
mod train_loop;
mod update;
