//! `agentrl-rollout`'s integration tests, one test target (`rollout`): episodes through the
//! real driver, env and verifier (task → episode). Run one module with
//! `cargo test --release --workspace --test rollout -- expert_demos::`.

mod expert_demos;
