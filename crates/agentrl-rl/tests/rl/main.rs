//! `agentrl-rl`'s integration tests, one test target (`rl`): the batch → loss math against
//! PyTorch and verl fixtures, and its properties. Run one module with
//! `cargo test --release --workspace --test rl -- verl_fixtures::`.

mod common;
mod rl_fixtures;
mod rl_properties;
mod verl_fixtures;
mod verl_properties;
