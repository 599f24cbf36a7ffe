//! `agentrl-engine`'s integration tests, one test target (`engine`): the local and the remote
//! engine (turn sampling, the episode's token ids and log-probs) over a tiny random Qwen3. Run
//! one module with `cargo test --release --workspace --test engine -- remote_loopback::`.

mod qwen3_engine;
mod remote_loopback;
