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
pub mod trainer;
pub mod update;
