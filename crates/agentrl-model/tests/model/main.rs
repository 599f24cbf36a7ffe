//! `agentrl-model`'s integration tests, one test target (`model`): Qwen3 (the policy that
//! turns an episode's tokens into log-probs) against transformers/PEFT fixtures, and its
//! ragged decoding, and TinyAgent's explicit trunk against candle's autograd. Run one module with
//! `cargo test --release --workspace --test model -- qwen3_ragged::`.

mod qwen3;
mod qwen3_ragged;
mod tiny_trunk;
