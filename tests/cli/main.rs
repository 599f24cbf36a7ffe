//! The binary's integration tests, one test target (`cli`) with a module per command or
//! promise: each runs the real `agentrl` binary (`CARGO_BIN_EXE_agentrl`) on real tasks and
//! runs, from the task to what a run leaves on disk. One target instead of one per file, so
//! `cargo test` links the whole stack once; run one module with
//! `cargo test --release --workspace --test cli -- monitor_runs::`.

mod cli_chat_render;
mod examples;
mod experiment_cli;
mod first_hour;
mod gym_cli;
mod gym_service;
mod import_graph;
mod monitor_runs;
mod plan_cli;
mod post_training_cli;
mod python_client;
mod readme_commands;
mod runs_cli;
mod score_cli;
mod serve_cli;
mod sft_cli;
mod smollm2_cli;
mod support;
mod test_layout;

/// The independent TensorBoard reader of `agentrl-run`'s tests (`monitor_runs` reads the
/// event files of real runs with it).
#[path = "../../crates/agentrl-run/tests/support/tfrecord_reader.rs"]
mod tfrecord_reader;
