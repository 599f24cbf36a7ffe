//! # agentrl-train: rollouts become weight updates
//!
//! Data flow of one RL step (see `shared/DESIGN.md`): the [`recipes::rl`] step samples a
//! group of episodes per task through the [`sampler`] (the engine on the weights
//! [`engine_sync`] keeps) → rewards (and the preset's step hooks) → a `Batch` → [`update`]:
//! advantages and the policy loss from the [`algo`] preset, KL, entropy and the value loss,
//! AdamW ([`optim`]) with gradient clipping and the LR [`schedule`] → a [`step_record`] →
//! [`metrics`] lines, sampled episodes and periodic checkpoints in the run directory
//! (`agentrl-run`). [`session`] runs a whole training session with evaluations; [`config`]
//! is the run configuration.
//!
//! The rooms: the trainer core ([`trainer`], built from the config by [`build`] and
//! [`engine_sync`]; [`sampler`], [`streams`], [`step_record`], [`demonstrations`]) knows no
//! recipe; each recipe ([`recipes`]: RL, SFT, RFT, DPO, distillation) is one file on top of
//! it and never imports another.
//!
//! Rules this crate keeps: [`algo`] never imports [`config`] (the config is built from the
//! presets, not the other way round); no file imports a recipe, and the files' imports form
//! no circle (the workspace's `tests/cli/import_graph.rs` checks these, the last for every
//! crate); the update and evaluation are generic over `agentrl_model::Policy`; [`threads`]
//! and [`allocator`] are the only places that set process-wide state.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod algo;
pub mod allocator;
pub mod build;
pub mod config;
pub mod demonstrations;
pub mod engine_sync;
pub mod fleet_plan;
pub mod metrics;
pub mod optim;
pub mod plan;
pub mod policy_stack;
pub mod preflight;
pub mod recipes;
pub mod sampler;
pub mod schedule;
pub mod session;
pub mod step_record;
pub mod streams;
pub mod threads;
pub mod trainer;
pub mod update;

/// `n > 0` and `step` is a multiple of `n` ("every n steps"). Written with `%` because the
/// workspace's MSRV (1.85) predates `usize::is_multiple_of`.
#[allow(clippy::manual_is_multiple_of)]
pub(crate) fn every(step: usize, n: usize) -> bool {
    n > 0 && step % n == 0
}
