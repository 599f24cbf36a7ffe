//! Attention of new tokens over one sequence's cached keys and values, for incremental decoding:
//! [`SequenceKv`] holds a layer's keys and values of one sequence, laid out for it, and
//! [`SequenceKv::attend`] computes `softmax(scale · q Kᵀ) V` per head for one query over the
//! first `upto` positions (the causal mask is the `upto`).
//!
//! Data flow: TinyAgent's explicit decoding (`crate::tiny`, `decode.rs`) projects each new
//! token to Q, K and V, [`SequenceKv::push`]es its key and value, then attends its query here;
//! the context vectors go on to the output projection.
//!
//! Why this layout: a decoding step is one query per sequence against up to `max_seq` keys of
//! `head_dim` (16 for TinyAgent) each. As dot products of 16 floats, every key costs a
//! horizontal reduction; here the keys sit transposed in blocks of [`KEY_BLOCK`] positions
//! (`[d][KEY_BLOCK]` per block), so the scores of a block are `head_dim` lane-wide
//! multiply-adds with no reduction, and a new key is written into the open block without moving
//! the earlier ones. The values stay row-major (`[position][d]`), so `Σ p_j v_j` runs across the
//! head's own lanes. The training forward (`causal_attention`) meets a whole causal square at
//! once and uses GEMMs instead; both compute the same function, and the tests tie them.

use super::exp::exp;
use super::{lane_max, lane_sum};

/// Declares `unsafe fn $name`: [`SequenceKv::attend_heads`] compiled with the target feature
/// `$feature` (the CPU must have it), so its loops are as wide as the feature's registers.
macro_rules! compiled_for {
    ($name:ident, $feature:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        unsafe fn $name(
            &self,
            q: &[f32],
            upto: usize,
            heads: usize,
            scale: f32,
            out: &mut [f32],
            scores: &mut [f32],
        ) {
            self.attend_heads(q, upto, heads, scale, out, scores)
        }
    };
}

/// Positions per block of transposed keys (16 f32 lanes: one AVX-512 register).
pub(crate) const KEY_BLOCK: usize = 16;

/// One layer's keys and values of one sequence, positions `0..len`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SequenceKv {
    /// Blocks of [`KEY_BLOCK`] positions, each `[d][KEY_BLOCK]` (channel-major).
    keys: Vec<f32>,
    /// `[len][d]`.
    values: Vec<f32>,
    len: usize,
}

impl SequenceKv {
    /// Positions held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Empties the sequence, keeping its buffers' capacity for the next one.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.len = 0;
    }

    /// Room for `more` positions beyond those held; the first call reserves `capacity`
    /// positions (the model's `max_seq`) at once, so a buffer never moves while it is filled.
    pub(crate) fn reserve(&mut self, more: usize, d: usize, capacity: usize) {
        let positions = (self.len + more).max(capacity);
        let key_len = positions.div_ceil(KEY_BLOCK) * d * KEY_BLOCK;
        self.keys
            .reserve_exact(key_len.saturating_sub(self.keys.len()));
        self.values
            .reserve_exact((positions * d).saturating_sub(self.values.len()));
    }

    /// Appends the key and value of the next position (`key`, `value`: `[d]` each).
    pub(crate) fn push(&mut self, key: &[f32], value: &[f32]) {
        let d = key.len();
        let (block, lane) = (self.len / KEY_BLOCK, self.len % KEY_BLOCK);
        if lane == 0 {
            self.keys.resize((block + 1) * d * KEY_BLOCK, 0.0);
        }
        let keys = &mut self.keys[block * d * KEY_BLOCK..];
        for (c, &k) in key.iter().enumerate() {
            keys[c * KEY_BLOCK + lane] = k;
        }
        self.values.extend_from_slice(value);
        self.len += 1;
    }

    /// `out [d] = concat_h softmax(scale · q_h K_hᵀ) V_h` over positions `0..upto` for the
    /// query `q [d]` (heads of `d / heads` channels, in order); `scores` is working space.
    pub(crate) fn attend(
        &self,
        q: &[f32],
        upto: usize,
        heads: usize,
        scale: f32,
        out: &mut [f32],
        scores: &mut Vec<f32>,
    ) {
        debug_assert!(upto >= 1 && upto <= self.len, "attend: bad upto {upto}");
        scores.resize(upto.div_ceil(KEY_BLOCK) * KEY_BLOCK, 0.0);
        // Called straight from a function compiled for AVX-512 (else AVX2): passed to
        // `with_simd` as a closure, this loop nest was compiled apart from it, four lanes wide.
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports AVX-512F, checked just above.
                return unsafe { self.attend_avx512(q, upto, heads, scale, out, scores) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { self.attend_avx2(q, upto, heads, scale, out, scores) };
            }
        }
        self.attend_heads(q, upto, heads, scale, out, scores)
    }

    compiled_for!(attend_avx512, "avx512f");
    compiled_for!(attend_avx2, "avx2");

    #[inline(always)]
    fn attend_heads(
        &self,
        q: &[f32],
        upto: usize,
        heads: usize,
        scale: f32,
        out: &mut [f32],
        scores: &mut [f32],
    ) {
        let d = q.len();
        let dh = d / heads;
        for h in 0..heads {
            let channels = h * dh..(h + 1) * dh;
            self.scores(&q[channels.clone()], h * dh, d, scores);
            let seen = &mut scores[..upto];
            let max = lane_max(seen);
            for s in seen.iter_mut() {
                *s = exp((*s - max) * scale);
            }
            let inv = 1.0 / lane_sum(seen);
            let out = &mut out[channels];
            // A head of 16, 32, 48 or 64 channels keeps its sums in registers.
            match dh {
                16 => self.weighted_values::<1>(seen, h * dh, d, out),
                32 => self.weighted_values::<2>(seen, h * dh, d, out),
                48 => self.weighted_values::<3>(seen, h * dh, d, out),
                64 => self.weighted_values::<4>(seen, h * dh, d, out),
                _ => self.weighted_values_any(seen, h * dh, d, out),
            }
            out.iter_mut().for_each(|o| *o *= inv);
        }
    }

    /// `scores[j] = q_h · k_j` for every position of the blocks that `scores` covers, for the
    /// head whose channels start at `first` (`q_h`: its part of the query; `d`: the keys'
    /// width). Four blocks at a time, so four independent sums are in flight instead of one
    /// chain of adds per block.
    #[inline(always)]
    fn scores(&self, q_h: &[f32], first: usize, d: usize, scores: &mut [f32]) {
        let quads = scores.len() / (4 * KEY_BLOCK);
        let (quad_scores, rest) = scores.split_at_mut(quads * 4 * KEY_BLOCK);
        for (quad, s) in quad_scores.chunks_exact_mut(4 * KEY_BLOCK).enumerate() {
            self.block_scores::<4>(q_h, 4 * quad, first, d, s);
        }
        for (i, s) in rest.chunks_exact_mut(KEY_BLOCK).enumerate() {
            self.block_scores::<1>(q_h, 4 * quads + i, first, d, s);
        }
    }

    /// [`Self::scores`] of the `N` key blocks from `first_block` on, into `out [N · KEY_BLOCK]`.
    #[inline(always)]
    fn block_scores<const N: usize>(
        &self,
        q_h: &[f32],
        first_block: usize,
        first: usize,
        d: usize,
        out: &mut [f32],
    ) {
        let width = q_h.len() * KEY_BLOCK;
        let keys: [&[f32]; N] = std::array::from_fn(|i| {
            &self.keys[((first_block + i) * d + first) * KEY_BLOCK..][..width]
        });
        let mut acc = [[0f32; KEY_BLOCK]; N];
        for (c, &qc) in q_h.iter().enumerate() {
            for (a, keys) in acc.iter_mut().zip(&keys) {
                let row = &keys[c * KEY_BLOCK..(c + 1) * KEY_BLOCK];
                for (a, &k) in a.iter_mut().zip(row) {
                    *a += qc * k;
                }
            }
        }
        for (s, acc) in out.chunks_exact_mut(KEY_BLOCK).zip(&acc) {
            s.copy_from_slice(acc);
        }
    }

    /// `out = Σ_j p_j v_j[head]` for a head of `16 · LANES` channels starting at `first`, with
    /// four partial sums over `j mod 4` (one chain of adds per lane would wait on each add).
    #[inline(always)]
    fn weighted_values<const LANES: usize>(
        &self,
        p: &[f32],
        first: usize,
        d: usize,
        out: &mut [f32],
    ) {
        let value = |j: usize| &self.values[j * d + first..][..16 * LANES];
        let (mut a0, mut a1, mut a2, mut a3) = (
            [[0f32; 16]; LANES],
            [[0f32; 16]; LANES],
            [[0f32; 16]; LANES],
            [[0f32; 16]; LANES],
        );
        let quads = p.len() / 4;
        let (quad_p, rest) = p.split_at(quads * 4);
        for (quad, ps) in quad_p.chunks_exact(4).enumerate() {
            let j = 4 * quad;
            axpy(&mut a0, ps[0], value(j));
            axpy(&mut a1, ps[1], value(j + 1));
            axpy(&mut a2, ps[2], value(j + 2));
            axpy(&mut a3, ps[3], value(j + 3));
        }
        for (i, &pj) in rest.iter().enumerate() {
            axpy(&mut a0, pj, value(4 * quads + i));
        }
        for (lane, o) in out.chunks_exact_mut(16).enumerate() {
            for (i, o) in o.iter_mut().enumerate() {
                *o = (a0[lane][i] + a1[lane][i]) + (a2[lane][i] + a3[lane][i]);
            }
        }
    }

    /// [`Self::weighted_values`] for a head of any width.
    #[inline(always)]
    fn weighted_values_any(&self, p: &[f32], first: usize, d: usize, out: &mut [f32]) {
        out.fill(0.0);
        for (j, &pj) in p.iter().enumerate() {
            let v = &self.values[j * d + first..][..out.len()];
            for (o, &v) in out.iter_mut().zip(v) {
                *o += pj * v;
            }
        }
    }
}

/// `acc += p · v`, lane by lane.
#[inline(always)]
fn axpy<const LANES: usize>(acc: &mut [[f32; 16]; LANES], p: f32, v: &[f32]) {
    for (a, v) in acc.iter_mut().zip(v.chunks_exact(16)) {
        for (a, &v) in a.iter_mut().zip(v) {
            *a += p * v;
        }
    }
}
