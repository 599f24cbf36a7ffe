//! Bounded staleness for asynchronous rollouts: which weight version the engine may sample a
//! step's episodes with, and the episodes sampled ahead for the next step.
//!
//! Where it sits: between the engine and the trainer's update. In an asynchronous run the
//! engine samples the rollouts of step t+1 while the trainer updates on those of step t, so
//! the episodes trained on at step t+1 come from weights some versions old. The staleness of
//! an episode is the trainer's version when it is trained on minus the version it was sampled
//! with (ALGORITHMS.md §13, "Decoupled PPO for stale, asynchronous data": AReaL caps it). The
//! trainer's version is its count of completed updates, so the update of step t trains version
//! t.
//!
//! With a bound of 0 nothing can overlap (step t+1's weights exist only once step t's update
//! is done), and an asynchronous run is the synchronous one.

use rand_chacha::ChaCha8Rng;

use crate::Episode;

/// The most weight versions a rollout may lag the trainer by when it is trained on
/// (`engine.max_staleness`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StalenessBound {
    pub max_versions: u64,
}

impl StalenessBound {
    pub fn new(max_versions: u64) -> Self {
        Self { max_versions }
    }

    /// Whether the engine's weights (`engine_version`) are fresh enough to sample episodes
    /// that are trained on at step `trained_at`; if not, they must be synced first.
    pub fn allows(&self, trained_at: u64, engine_version: u64) -> bool {
        trained_at.saturating_sub(engine_version) <= self.max_versions
    }

    /// Whether the next step's rollouts may be sampled during this step's update: they would
    /// be at least one version old.
    pub fn allows_overlap(&self) -> bool {
        self.max_versions >= 1
    }
}

/// Episodes sampled ahead for a later step, with the rollout stream as the sampling left it
/// (the step's later rounds, e.g. DAPO's refills, continue it).
pub struct Prefetched {
    /// The step whose update trains on them.
    pub step: u64,
    pub episodes: Vec<Episode>,
    pub rng: ChaCha8Rng,
    /// Wall time their environments were busy (the step that trains on them reports it).
    pub env_seconds: f64,
}
