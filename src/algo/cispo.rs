//! CISPO (MiniMax-M1, arXiv:2506.13585 §3.1; ALGORITHMS.md §10): REINFORCE weighted by a
//! clipped, detached importance weight `sg(clip(r, 1−ε_low, 1+ε_high))·Â·log π` (the bounds are
//! `algorithm.eps_low` / `eps_high`), so no token
//! loses its gradient; group advantage, `token-mean`, no KL.

use super::{Preset, BASE};
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    agg: AggMode::TokenMean,
    // The paper sets no lower bound in practice; a large ε_low does the same.
    eps_low: 1.0,
    eps_high: 0.28,
    minibatches: 2,
    ..BASE
};
