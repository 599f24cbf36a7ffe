//! The run's random streams: every random draw of a run comes from a generator derived from
//! `(seed, step, purpose)`, so the step counter is the whole RNG state and a resumed run
//! continues exactly where an uninterrupted one would be.
//!
//! Where it sits: under every recipe and the trainer core; it knows nothing else of the crate.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Purposes of the derived random streams (any distinct constants).
pub const STREAM_TASKS: u64 = 0x7461_736b;
pub const STREAM_ROLLOUT: u64 = 0x726f_6c6c;
pub const STREAM_SHUFFLE: u64 = 0x7368_7566;
pub const STREAM_EVAL: u64 = 0x6576_616c;
pub const STREAM_WARMUP: u64 = 0x7761_726d;
pub const STREAM_GREEDY: u64 = 0x6772_6479;
pub const STREAM_PREFLIGHT: u64 = 0x7072_6566;
/// The candidate orders of the expert's demonstrations.
pub const STREAM_EXPERT_VIEWS: u64 = 0x7366_7476;
/// The order in which a fixed set (a file of episodes, a pool of pairs) is visited.
pub const STREAM_DATA_ORDER: u64 = 0x7366_7464;

/// A generator for one purpose at one step: SplitMix64 over `(seed, step, purpose)`.
pub fn stream(seed: u64, step: u64, purpose: u64) -> ChaCha8Rng {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    ChaCha8Rng::seed_from_u64(mix(mix(mix(seed) ^ step) ^ purpose))
}

/// The indices step `step` takes from a set of `n` items, `per_step` of them: consecutive
/// slices of per-epoch permutations drawn from `(seed, epoch, purpose)`, so each epoch visits
/// every item once.
pub fn epoch_slice(n: usize, per_step: usize, step: usize, seed: u64, purpose: u64) -> Vec<usize> {
    (0..per_step)
        .map(|i| {
            let position = step * per_step + i;
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut stream(seed, (position / n) as u64, purpose));
            order[position % n]
        })
        .collect()
}
