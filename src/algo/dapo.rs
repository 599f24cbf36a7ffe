//! DAPO (arXiv:2503.14476; ALGORITHMS.md §6): clip-higher (ε_low 0.2, ε_high 0.28), dynamic
//! sampling (groups with all-equal rewards dropped), token-level loss (`token-mean`), soft
//! overlong punishment added to the reward, no KL.

use super::{Preset, BASE};
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    eps_low: 0.2,
    eps_high: 0.28,
    agg: AggMode::TokenMean,
    std_normalize: true,
    dynamic_sampling: true,
    // The paper's L_cache is 4096 of 20480 tokens (1/5 of the budget); TinyAgent's budget
    // is tens of action tokens, so the cache is a few tokens.
    overlong_cache: Some(4),
    ..BASE
};
