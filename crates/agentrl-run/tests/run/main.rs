//! `agentrl-run`'s integration tests, one test target (`run`): what a run leaves on disk, read
//! back by independent readers. Run one module with
//! `cargo test --release --workspace --test run -- tensorboard_events::`.

mod metrics;
mod run_dir;
mod tensorboard_encoding;
mod tensorboard_events;

/// The independent TensorBoard reader, shared with the binary's tests (`tests/cli`).
#[path = "../support/tfrecord_reader.rs"]
mod tfrecord_reader;
