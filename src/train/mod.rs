//! The trainer: config, optimizer, LR schedule, run directory with checkpoints and metrics,
//! and the loop that turns rollouts into weight updates.
//!
//! Data flow of one step (see `shared/DESIGN.md`): sample a group of episodes per task →
//! rewards → advantages (the [`crate::algo`] preset) → batched forward → policy loss + KL +
//! entropy (+ value loss) → AdamW with grad clipping → metrics line, episodes sample,
//! periodic checkpoint.

pub mod action_space;
pub mod bench;
pub mod config;
pub mod optim;
pub mod run_dir;
pub mod schedule;
pub mod session;
pub mod shuffle;
pub mod trainer;
pub mod update;

/// `n > 0` and `step` is a multiple of `n` ("every n steps"). Written with `%` because the
/// workspace's MSRV (1.85) predates `usize::is_multiple_of`.
#[allow(clippy::manual_is_multiple_of)]
pub(crate) fn every(step: usize, n: usize) -> bool {
    n > 0 && step % n == 0
}
