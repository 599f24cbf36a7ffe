//! `agentrl-engine`'s integration tests, one test target (`engine`): the local and the remote
//! engine (turn sampling, the episode's token ids and log-probs) over a tiny random Qwen3, and
//! their parts: token sampling, the local engine over TinyAgent, the engine wrappers (noise,
//! thread count), the remote pool, wire types and response parsing, and the server's helpers.
//! Run one module with `cargo test --release --workspace --test engine -- remote_loopback::`.

mod local_engine;
mod noise;
mod qwen3_engine;
mod remote;
mod remote_loopback;
mod remote_pool;
mod remote_wire;
mod sampling;
mod serve;
mod threads;
