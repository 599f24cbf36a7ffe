//! Attention of one new token per sequence over a batch of ragged KV caches, for a decoding
//! step of the local engine: `softmax(scale · q Kᵀ) V` per (sequence, key/value head) for the
//! `group` query heads that share the key/value head, over the cache slots the sequence sees.
//!
//! Data flow: Qwen3's ragged decoding step (`qwen3::ragged`, a step where every row feeds at
//! most one token) projects the new tokens to Q, K and V, writes K and V into the cache, then
//! attends here; the context vectors go on to the output projection. Steps that feed longer
//! runs (a prompt, an observation) keep the composed path.
//!
//! Why: composed from candle ops, a decoding step's attention is a batched matmul per
//! (sequence, head) of 3 query rows against every slot (packing the keys into a scratch
//! buffer first), a mask add over every slot, a softmax and a second matmul: on 2 cores that
//! was about a third of a SmolLM2 decoding step (`perf`, 2026-12-08). Here each
//! (sequence, key/value head) is one task that reads each visible key and value once, for
//! all the query heads of its group, and skips the slots the sequence does not see.
//! Each task sums in a fixed order, so the result does not depend on the thread count.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp;
use super::{f32_data, lane_dot, lane_max, lane_sum, with_simd};

/// The op: `q [rows, kv_heads, group, d]`, `keys` and `values` `[rows, kv_heads, slots, d]`
/// (rows of `d` contiguous; a narrowed view of a larger buffer is fine).
struct RaggedDecodeAttention {
    scale: f32,
    /// `visible[row * slots + slot]`: the row's query sees that slot; `None`: every slot.
    visible: Option<Arc<[bool]>>,
}

/// The strided `[rows, heads, slots, d]` cache operand: where the slots of `(row, head)`
/// start in the storage.
struct CacheOperand<'a> {
    data: &'a [f32],
    start: usize,
    row_stride: usize,
    head_stride: usize,
}

impl<'a> CacheOperand<'a> {
    fn of(
        storage: &'a CpuStorage,
        layout: &Layout,
        (rows, heads, slots, d): (usize, usize, usize, usize),
    ) -> Result<Self> {
        let data = match storage {
            CpuStorage::F32(data) => data.as_slice(),
            other => candle_core::bail!(
                "ragged_decode_attention: expected an f32 cache, got {:?}",
                other.dtype()
            ),
        };
        let stride = layout.stride();
        if layout.dims() != [rows, heads, slots, d] || stride[3] != 1 || stride[2] != d {
            candle_core::bail!(
                "ragged_decode_attention: cache of shape {:?} and strides {stride:?}, expected \
                 [{rows}, {heads}, {slots}, {d}] with rows of {d} contiguous floats",
                layout.dims()
            );
        }
        let last =
            layout.start_offset() + (rows - 1) * stride[0] + (heads - 1) * stride[1] + slots * d;
        if last > data.len() {
            candle_core::bail!("ragged_decode_attention: the cache view reaches past its storage");
        }
        Ok(Self {
            data,
            start: layout.start_offset(),
            row_stride: stride[0],
            head_stride: stride[1],
        })
    }

    /// The `slots × d` floats of `(row, head)`.
    fn slots(&self, row: usize, head: usize, len: usize) -> &'a [f32] {
        let at = self.start + row * self.row_stride + head * self.head_stride;
        &self.data[at..at + len]
    }
}

impl CustomOp3 for RaggedDecodeAttention {
    fn name(&self) -> &'static str {
        "ragged_decode_attention"
    }

    fn cpu_fwd(
        &self,
        q_storage: &CpuStorage,
        q_layout: &Layout,
        k_storage: &CpuStorage,
        k_layout: &Layout,
        v_storage: &CpuStorage,
        v_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (rows, heads, group, d) = q_layout.shape().dims4()?;
        let slots = k_layout.shape().dims4()?.2;
        let q = f32_data(self.name(), q_storage, q_layout)?;
        let keys = CacheOperand::of(k_storage, k_layout, (rows, heads, slots, d))?;
        let values = CacheOperand::of(v_storage, v_layout, (rows, heads, slots, d))?;
        if let Some(visible) = &self.visible {
            if visible.len() != rows * slots {
                candle_core::bail!(
                    "ragged_decode_attention: a mask of {} entries for {rows} rows of {slots} \
                     slots",
                    visible.len()
                );
            }
        }
        let mut out = vec![0f32; rows * heads * group * d];
        if slots > 0 {
            out.par_chunks_mut(group * d)
                .enumerate()
                .for_each(|(task, out)| {
                    let (row, head) = (task / heads, task % heads);
                    let visible = self
                        .visible
                        .as_ref()
                        .map(|visible| &visible[row * slots..(row + 1) * slots]);
                    with_simd(|| {
                        attend(
                            &q[task * group * d..(task + 1) * group * d],
                            keys.slots(row, head, slots * d),
                            values.slots(row, head, slots * d),
                            visible,
                            (group, slots, d),
                            self.scale,
                            out,
                        )
                    });
                });
        }
        Ok((CpuStorage::F32(out), Shape::from((rows, heads, group, d))))
    }
}

/// One (row, key/value head): `out[g] = Σ_s softmax_s(scale · q[g]·k_s) v_s` over the visible
/// slots `s`, for each of the `group` query heads. A query that sees no slot gets zeros.
#[inline(always)]
fn attend(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    visible: Option<&[bool]>,
    (group, slots, d): (usize, usize, usize),
    scale: f32,
    out: &mut [f32],
) {
    let sees = |slot: usize| visible.is_none_or(|visible| visible[slot]);
    // Scores of every slot, −∞ where hidden (so they weigh exactly 0 after the exp).
    let mut scores = vec![f32::NEG_INFINITY; group * slots];
    for slot in (0..slots).filter(|&slot| sees(slot)) {
        let key = &keys[slot * d..(slot + 1) * d];
        for g in 0..group {
            scores[g * slots + slot] = lane_dot(&q[g * d..(g + 1) * d], key) * scale;
        }
    }
    let mut totals = vec![0f32; group];
    for (g, total) in totals.iter_mut().enumerate() {
        let row = &mut scores[g * slots..(g + 1) * slots];
        let max = lane_max(row);
        if max == f32::NEG_INFINITY {
            continue;
        }
        for x in row.iter_mut() {
            *x = exp(*x - max);
        }
        *total = lane_sum(row);
    }
    for slot in (0..slots).filter(|&slot| sees(slot)) {
        let value = &values[slot * d..(slot + 1) * d];
        for g in 0..group {
            let p = scores[g * slots + slot];
            for (o, &v) in out[g * d..(g + 1) * d].iter_mut().zip(value) {
                *o += p * v;
            }
        }
    }
    for (g, &total) in totals.iter().enumerate() {
        if total > 0.0 {
            out[g * d..(g + 1) * d].iter_mut().for_each(|o| *o /= total);
        }
    }
}

/// `softmax(scale · q Kᵀ) V` for `q [rows, kv_heads, group, d]` (one query per row and query
/// head, query head `h · group + g` on key/value head `h`) over `keys` and `values`
/// `[rows, kv_heads, slots, d]`, seeing for row `r` only the slots `s` with
/// `visible[r · slots + s]` (all of them for `None`); `[rows, kv_heads, group, d]`. CPU, f32,
/// no gradient (inference only).
pub fn ragged_decode_attention(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<Arc<[bool]>>,
    scale: f64,
) -> Result<Tensor> {
    q.contiguous()?.apply_op3_no_bwd(
        keys,
        values,
        &RaggedDecodeAttention {
            scale: scale as f32,
            visible,
        },
    )
}
