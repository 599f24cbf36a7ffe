//! Rollout correction: what the trainer does about the engine having sampled the episodes
//! with slightly different probabilities than the trainer computes (ALGORITHMS.md §13). It
//! sits between the batch and the loss (task → episode → batch → **correction** → loss →
//! update): from `log π_rollout` (the engine's) and `log π_train` (the trainer's recomputation),
//! both `[B, T]`, it makes detached per-token importance weights for
//! [`crate::policy_loss::PolicyLossInputs::token_weights`], optionally a rejection mask that
//! replaces the loss mask, and the mismatch metrics.
//!
//! - [`weights`]: TIS / MIS / IcePop weights as ALGORITHMS.md writes them
//!   ([`RolloutCorrection`]) and [`mismatch_metrics`];
//! - [`config`]: verl's `rollout_correction` strings parsed into a [`RolloutCorrectionSpec`];
//! - [`apply`]: that spec applied to a batch, with rejection and verl's `rollout_corr/…`
//!   metrics ([`rollout_correction_and_rejection`]), as verl's trainer and its bypass mode
//!   ([`crate::policy_loss::bypass`]) use it.

pub mod apply;
pub mod config;
pub mod weights;

pub use apply::{rollout_corr_metrics, rollout_correction_and_rejection, RolloutCorrectionOutput};
pub use config::{
    IsLevel, RolloutCorrectionConfig, RolloutCorrectionSpec, RsFilter, RsOption, ThresholdSpec,
    SAFETY_BOUND,
};
pub use weights::{
    icepop_weights, mis_weights, mismatch_metrics, rollout_correction_weights, tis_weights,
    CorrectionWeights, MisLevel, MismatchMetrics, RolloutCorrection,
};
