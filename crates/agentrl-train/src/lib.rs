//! # agentrl-train: rollouts become weight updates
//!
//! Data flow of one RL step (see `shared/DESIGN.md`): the [`recipes::rl`] trainer samples a
//! group of episodes per task through `agentrl-rollout` → rewards (and the preset's step
//! hooks) → a `Batch` → [`update`]: advantages and the policy loss from the [`algo`] preset,
//! KL, entropy and the value loss, AdamW ([`optim`]) with gradient clipping and the LR
//! [`schedule`] → a metrics line, sampled episodes and periodic checkpoints in the run
//! directory (`agentrl-run`). [`session`] runs a whole training session with evaluations;
//! [`config`] is the run configuration.
//!
//! Rules this crate keeps: [`algo`] never imports [`config`] (the config is built from the
//! presets, not the other way round); the update and evaluation are generic over
//! `agentrl_model::Policy`; [`threads`] is the only place that sets process-wide state.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod algo;
pub mod config;
pub mod metrics;
pub mod optim;
pub mod plan;
pub mod policy_stack;
pub mod preflight;
pub mod recipes;
pub mod schedule;
pub mod session;
pub mod threads;
pub mod update;

/// `n > 0` and `step` is a multiple of `n` ("every n steps"). Written with `%` because the
/// workspace's MSRV (1.85) predates `usize::is_multiple_of`.
#[allow(clippy::manual_is_multiple_of)]
pub(crate) fn every(step: usize, n: usize) -> bool {
    n > 0 && step % n == 0
}
