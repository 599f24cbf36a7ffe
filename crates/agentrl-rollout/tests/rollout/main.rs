//! `agentrl-rollout`'s integration tests, one test target (`rollout`): episodes through the
//! real driver, env and verifier (task → episode), and the parts on a scripted env: the
//! driver, the training batch, the env wrappers, staleness and split evaluation. Run one module
//! with `cargo test --release --workspace --test rollout -- expert_demos::`.

mod batch;
mod driver;
mod env_clock;
mod eval;
mod expert_demos;
mod shuffle;
mod staleness;
