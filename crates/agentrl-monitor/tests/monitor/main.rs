//! `agentrl-monitor`'s integration tests, one test target (`monitor`): the doctor, the
//! dashboard and its charts, episode views and evaluation reports through the public API. Run
//! one module with `cargo test --release --workspace --test monitor -- doctor::`.

mod dashboard;
mod doctor;
mod episodes;
mod eval_report;
mod panels;
mod plot;
