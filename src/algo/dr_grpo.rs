//! Dr. GRPO (arXiv:2503.20783; ALGORITHMS.md §5): GRPO without the two biases — advantage
//! `R − mean` (no std), and the per-token loss summed and divided by the constant generation
//! budget `L_max` (`seq-mean-token-sum-norm`), no KL.

use super::{Preset, BASE};
use crate::train::pending_rl::AggMode;

pub const PRESET: Preset = Preset {
    agg: AggMode::SeqMeanTokenSumNorm,
    std_normalize: false,
    ..BASE
};
