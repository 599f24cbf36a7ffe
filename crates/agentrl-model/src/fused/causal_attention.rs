//! Causal multi-head attention as one op: `softmax(scale · Q Kᵀ + causal mask) V`, read straight
//! from the fused QKV projection `[B, T, 3·D]` and written as `[B, T, D]`.
//!
//! Data flow: TinyAgent's block, training forward: `dense(rms_norm(x), W_qkv)` → this →
//! the output projection (as a candle op here, and on plain slices in TinyAgent's explicit
//! trunk, which keeps the probabilities for its backward pass), and a real model's training
//! forward (`qwen3::model`, keys and values repeated per query head). Each head is a few small
//! GEMMs over blocks of query rows, so a block of queries only meets the keys up to its last
//! row (the masked corner above the diagonal is skipped, block by block). The op runs one
//! rayon task per (batch row, head), each holding one block of probabilities at a time: a real
//! model's update is one long episode per micro-batch, which one task per batch row left on
//! one thread (SmolLM2's SFT update: 30.9 → 26.2 s a step on 2 cores, the same losses to every
//! digit). TinyAgent's trunk keeps its own split of the batch.
//!
//! Composed from candle ops, this part of the training step cost about 45% of it: a thousand
//! small batched GEMMs per step, each with a thread-pool round trip; as per-row dot products it
//! was still 39% of the step (`perf`, issue 25), bound by loads and stores, not arithmetic.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp;
use super::{f32_data, gemm_into, lane_dot, lane_max, lane_sum, Operand};

/// Query rows per block: a block meets the keys up to its last row only.
const ROW_BLOCK: usize = 32;

/// Calls `shape.kernel(args…)` through a copy compiled for AVX-512 or AVX2 where the CPU has it (the
/// default x86-64 target assumes only SSE2, which halves the width of the kernels' loops). The
/// arithmetic is the same either way (no fused multiply-adds, explicit partial sums), so results
/// do not depend on the CPU.
macro_rules! simd_dispatch {
    ($shape:ident . $kernel:ident ( $($arg:expr),* )) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports AVX-512F, checked just above.
                unsafe { $shape.with_avx512(|s| s.$kernel($($arg),*)) }
            } else if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                unsafe { $shape.with_avx2(|s| s.$kernel($($arg),*)) }
            } else {
                $shape.$kernel($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $shape.$kernel($($arg),*)
        }
    }};
}

/// Shapes of a causal-attention call: `qkv [B, T, 3·D]`, `H` heads of `Dh = D / H`.
#[derive(Clone, Copy)]
struct AttentionShape {
    b: usize,
    t: usize,
    d: usize,
    dh: usize,
}

impl AttentionShape {
    fn from_dims((b, t, d): (usize, usize, usize), heads: usize) -> Self {
        Self {
            b,
            t,
            d,
            dh: d / heads,
        }
    }

    fn of(op: &str, layout: &Layout, heads: usize) -> Result<Self> {
        let (b, t, three_d) = layout.shape().dims3()?;
        if heads == 0 || three_d % (3 * heads) != 0 {
            candle_core::bail!("{op}: last dim {three_d} is not 3 x heads ({heads}) x head_dim");
        }
        let d = three_d / 3;
        Ok(Self {
            b,
            t,
            d,
            dh: d / heads,
        })
    }

    /// Runs `f` in a function compiled with AVX2 enabled; `#[inline(always)]` kernels called
    /// from it are compiled with AVX2 too.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn with_avx2(&self, f: impl FnOnce(&Self)) {
        f(self)
    }

    /// [`Self::with_avx2`] for AVX-512F (16 lanes).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn with_avx512(&self, f: impl FnOnce(&Self)) {
        f(self)
    }

    /// Head `h`'s part `part` (0 = Q, 1 = K, 2 = V) inside one batch row's `qkv [T, 3·D]`,
    /// from position `row` on: rows `3·D` apart.
    fn part<'a>(&self, qkv_b: &'a [f32], h: usize, part: usize, row: usize) -> &'a [f32] {
        &qkv_b[row * 3 * self.d + part * self.d + h * self.dh..]
    }

    /// Head `h`'s probabilities for one batch row into `p [T, T]`: row `i` holds `P[i, ..=i]`
    /// and zeros up to the end of its row block (the rest of the row is never read).
    #[inline(always)]
    fn probabilities(&self, qkv_b: &[f32], scale: f32, h: usize, p: &mut [f32]) {
        let t = self.t;
        for r0 in (0..t).step_by(ROW_BLOCK) {
            let r1 = (r0 + ROW_BLOCK).min(t);
            self.block_probabilities(qkv_b, scale, h, (r0, r1), &mut p[r0 * t..]);
        }
    }

    /// The probabilities of head `h`'s query rows `r0..r1` into `p_block`, rows `T` apart:
    /// its row `i - r0` holds `P[i, ..=i]` and zeros up to `r1` (the keys past the block's
    /// last row are never read).
    #[inline(always)]
    fn block_probabilities(
        &self,
        qkv_b: &[f32],
        scale: f32,
        h: usize,
        (r0, r1): (usize, usize),
        p_block: &mut [f32],
    ) {
        let (t, dh, stride) = (self.t, self.dh, 3 * self.d);
        gemm_into(
            p_block,
            t,
            (r1 - r0, r1, dh),
            Operand::rows(self.part(qkv_b, h, 0, r0), stride),
            Operand::transposed(self.part(qkv_b, h, 1, 0), stride),
            false,
            false,
        );
        for i in r0..r1 {
            let row = &mut p_block[(i - r0) * t..(i - r0) * t + r1];
            let (seen, masked) = row.split_at_mut(i + 1);
            masked.fill(0.0);
            let max = lane_max(seen);
            for pj in seen.iter_mut() {
                *pj = exp((*pj - max) * scale);
            }
            let inv = 1.0 / lane_sum(seen);
            seen.iter_mut().for_each(|pj| *pj *= inv);
        }
    }

    /// Forward pass of head `h` of one batch row into its columns of `out_b [T, D]`, given
    /// its probabilities.
    fn forward_head(&self, qkv_b: &[f32], p: &[f32], h: usize, out_b: &mut [f32]) {
        let (t, dh, stride) = (self.t, self.dh, 3 * self.d);
        for r0 in (0..t).step_by(ROW_BLOCK) {
            let r1 = (r0 + ROW_BLOCK).min(t);
            gemm_into(
                &mut out_b[r0 * self.d + h * dh..],
                self.d,
                (r1 - r0, dh, r1),
                Operand::rows(&p[r0 * t..], t),
                Operand::rows(self.part(qkv_b, h, 2, 0), stride),
                false,
                false,
            );
        }
    }

    /// Forward pass of head `h` of one batch row into `out_h [T, Dh]`, its probabilities
    /// computed one block of query rows at a time into `p_block [ROW_BLOCK, T]`: the same
    /// products as [`Self::probabilities`] then [`Self::forward_head`], without a `[T, T]`
    /// buffer.
    #[inline(always)]
    fn forward_head_by_blocks(
        &self,
        qkv_b: &[f32],
        scale: f32,
        h: usize,
        p_block: &mut [f32],
        out_h: &mut [f32],
    ) {
        let (t, dh, stride) = (self.t, self.dh, 3 * self.d);
        for r0 in (0..t).step_by(ROW_BLOCK) {
            let r1 = (r0 + ROW_BLOCK).min(t);
            self.block_probabilities(qkv_b, scale, h, (r0, r1), p_block);
            gemm_into(
                &mut out_h[r0 * dh..],
                dh,
                (r1 - r0, dh, r1),
                Operand::rows(p_block, t),
                Operand::rows(self.part(qkv_b, h, 2, 0), stride),
                false,
                false,
            );
        }
    }

    /// Backward pass of head `h` of one batch row into its columns of `d_qkv_b [T, 3·D]`
    /// (zeroed by the caller, since dK and dV accumulate over query blocks), given its
    /// probabilities `p [T, T]`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn backward_head(
        &self,
        qkv_b: &[f32],
        d_out_b: &[f32],
        p: &[f32],
        scale: f32,
        h: usize,
        ds: &mut [f32],
        d_qkv_b: &mut [f32],
    ) {
        let (t, dh, d) = (self.t, self.dh, self.d);
        let columns = HeadColumns {
            row_stride: 3 * d,
            q: h * dh,
            k: d + h * dh,
            v: 2 * d + h * dh,
        };
        for r0 in (0..t).step_by(ROW_BLOCK) {
            let r1 = (r0 + ROW_BLOCK).min(t);
            let p_block = &p[r0 * t..];
            self.backward_block(
                qkv_b,
                d_out_b,
                p_block,
                scale,
                h,
                (r0, r1),
                ds,
                d_qkv_b,
                columns,
            );
        }
    }

    /// Backward pass of head `h` of one batch row into `d_h [T, 3·Dh]` (dQ, dK, dV side by
    /// side; zeroed by the caller), the probabilities recomputed one block of query rows at a
    /// time into `p_block [ROW_BLOCK, T]`: the same products as [`Self::backward_head`] given
    /// [`Self::probabilities`], without a `[T, T]` buffer.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn backward_head_by_blocks(
        &self,
        qkv_b: &[f32],
        d_out_b: &[f32],
        scale: f32,
        h: usize,
        p_block: &mut [f32],
        ds: &mut [f32],
        d_h: &mut [f32],
    ) {
        let (t, dh) = (self.t, self.dh);
        let columns = HeadColumns {
            row_stride: 3 * dh,
            q: 0,
            k: dh,
            v: 2 * dh,
        };
        for r0 in (0..t).step_by(ROW_BLOCK) {
            let r1 = (r0 + ROW_BLOCK).min(t);
            self.block_probabilities(qkv_b, scale, h, (r0, r1), p_block);
            self.backward_block(
                qkv_b,
                d_out_b,
                p_block,
                scale,
                h,
                (r0, r1),
                ds,
                d_h,
                columns,
            );
        }
    }

    /// Backward pass of head `h`'s query rows `r0..r1`, given their probabilities `p_block`
    /// (rows `T` apart, as [`Self::block_probabilities`] writes them): `dP = dO Vᵀ`,
    /// `dS = scale · P ⊙ (dP − rowsum(P ⊙ dP))`, then `dQ = dS K` into the block's rows and
    /// `dK += dSᵀ Q`, `dV += Pᵀ dO` into rows `0..r1`, at `columns` of `dst`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn backward_block(
        &self,
        qkv_b: &[f32],
        d_out_b: &[f32],
        p_block: &[f32],
        scale: f32,
        h: usize,
        (r0, r1): (usize, usize),
        ds: &mut [f32],
        dst: &mut [f32],
        columns: HeadColumns,
    ) {
        let (t, dh, d, stride) = (self.t, self.dh, self.d, 3 * self.d);
        let rows = r1 - r0;
        let d_out_rows = Operand::rows(&d_out_b[r0 * d + h * dh..], d);
        gemm_into(
            ds,
            t,
            (rows, r1, dh),
            d_out_rows,
            Operand::transposed(self.part(qkv_b, h, 2, 0), stride),
            false,
            false,
        );
        for i in r0..r1 {
            let pr = &p_block[(i - r0) * t..(i - r0) * t + i + 1];
            let row = &mut ds[(i - r0) * t..(i - r0) * t + r1];
            let (seen, masked) = row.split_at_mut(i + 1);
            masked.fill(0.0);
            let row_dot = lane_dot(pr, seen);
            for (dsj, &pj) in seen.iter_mut().zip(pr) {
                *dsj = scale * pj * (*dsj - row_dot);
            }
        }
        gemm_into(
            &mut dst[r0 * columns.row_stride + columns.q..],
            columns.row_stride,
            (rows, dh, r1),
            Operand::rows(ds, t),
            Operand::rows(self.part(qkv_b, h, 1, 0), stride),
            false,
            false,
        );
        gemm_into(
            &mut dst[columns.k..],
            columns.row_stride,
            (r1, dh, rows),
            Operand::transposed(ds, t),
            Operand::rows(self.part(qkv_b, h, 0, r0), stride),
            true,
            false,
        );
        gemm_into(
            &mut dst[columns.v..],
            columns.row_stride,
            (r1, dh, rows),
            Operand::transposed(p_block, t),
            d_out_rows,
            true,
            false,
        );
    }
}

/// Where one head's dQ, dK and dV columns sit in a backward pass's destination: row `i` of
/// dQ starts at `i · row_stride + q`.
#[derive(Clone, Copy)]
struct HeadColumns {
    row_stride: usize,
    q: usize,
    k: usize,
    v: usize,
}

struct CausalAttention {
    heads: usize,
    scale: f32,
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = f32_data(self.name(), storage, layout)?;
        let sh = AttentionShape::of(self.name(), layout, self.heads)?;
        let t = sh.t;
        let mut out = vec![0f32; sh.b * t * sh.d];
        attention_forward(
            qkv,
            (sh.b, t, sh.d),
            self.heads,
            self.scale,
            &mut out,
            None,
            true,
        );
        Ok((CpuStorage::F32(out), Shape::from((sh.b, t, sh.d))))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        Ok(Some(arg.apply_op2_no_bwd(
            &grad,
            &CausalAttentionBackward {
                heads: self.heads,
                scale: self.scale,
            },
        )?))
    }
}

/// Gradient of [`causal_attention`] with respect to `qkv`, given `d out [B, T, D]`:
/// `dP = dO Vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = scale · dS K`, `dK = scale · dSᵀ Q`,
/// `dV = Pᵀ dO`, with `P` recomputed per query row.
struct CausalAttentionBackward {
    heads: usize,
    scale: f32,
}

impl CustomOp2 for CausalAttentionBackward {
    fn name(&self) -> &'static str {
        "causal-attention-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let qkv = f32_data(self.name(), s1, l1)?;
        let d_out = f32_data(self.name(), s2, l2)?;
        let sh = AttentionShape::of(self.name(), l1, self.heads)?;
        let t = sh.t;
        if l2.shape().dims() != [sh.b, t, sh.d] {
            candle_core::bail!(
                "{}: gradient shape {:?}, expected [{}, {t}, {}]",
                self.name(),
                l2.shape(),
                sh.b,
                sh.d
            );
        }
        let mut out = vec![0f32; sh.b * t * 3 * sh.d];
        attention_backward(
            qkv,
            d_out,
            None,
            (sh.b, t, sh.d),
            self.heads,
            self.scale,
            &mut out,
            true,
        );
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// [`causal_attention`] on plain slices: `qkv [B, T, 3·D]` → `out [B, T, D]` (every element
/// written), for `(B, T, D)` = `dims`. Where `probs` is given (`[B·H, T, T]`), each head's
/// probabilities are kept there for [`attention_backward`]. The op and TinyAgent's explicit
/// trunk share it. `parallel` splits the batch rows over the current rayon pool; a caller that
/// already runs one task per shard of the batch passes `false`.
pub(crate) fn attention_forward(
    qkv: &[f32],
    dims: (usize, usize, usize),
    heads: usize,
    scale: f32,
    out: &mut [f32],
    probs: Option<&mut [f32]>,
    parallel: bool,
) {
    let sh = AttentionShape::from_dims(dims, heads);
    let (t, d) = (sh.t, sh.d);
    // One batch row per task: its output rows `[T, D]` and its heads' probabilities are its own.
    let row = |b: usize, out_b: &mut [f32], probs_b: &mut [f32]| {
        let qkv_b = &qkv[b * t * 3 * d..][..t * 3 * d];
        for (h, p) in probs_b.chunks_exact_mut(t * t).enumerate() {
            simd_dispatch!(sh.probabilities(qkv_b, scale, h, p));
            sh.forward_head(qkv_b, p, h, out_b);
        }
    };
    match probs {
        Some(probs) if !parallel => out
            .chunks_mut(t * d)
            .zip(probs.chunks_mut(heads * t * t))
            .enumerate()
            .for_each(|(b, (out_b, probs_b))| row(b, out_b, probs_b)),
        Some(probs) => out
            .par_chunks_mut(t * d)
            .zip(probs.par_chunks_mut(heads * t * t))
            .enumerate()
            .for_each(|(b, (out_b, probs_b))| row(b, out_b, probs_b)),
        None => {
            // One task per (batch row, head), each with one block of probabilities: a batch of
            // one long sequence (a real model's episode) still fills every thread, and nothing
            // of `[T, T]` is allocated (a 2,500-token episode's heads would page in 225 MB).
            let per_head = per_head_pair(sh.b, heads, parallel, |b, h| {
                let qkv_b = &qkv[b * t * 3 * d..][..t * 3 * d];
                let mut p_block = vec![0f32; ROW_BLOCK * t];
                let mut out_h = vec![0f32; t * sh.dh];
                simd_dispatch!(sh.forward_head_by_blocks(
                    qkv_b,
                    scale,
                    h,
                    &mut p_block,
                    &mut out_h
                ));
                out_h
            });
            scatter_heads(&per_head, &sh, heads, sh.dh, out, d);
        }
    }
}

/// `task(b, h)` for every batch row `b` and head `h`, in order (`b`-major), on the current
/// rayon pool when `parallel`.
fn per_head_pair(
    batch: usize,
    heads: usize,
    parallel: bool,
    task: impl Fn(usize, usize) -> Vec<f32> + Sync + Send,
) -> Vec<Vec<f32>> {
    let pairs = 0..batch * heads;
    if parallel {
        pairs
            .into_par_iter()
            .map(|bh| task(bh / heads, bh % heads))
            .collect()
    } else {
        pairs.map(|bh| task(bh / heads, bh % heads)).collect()
    }
}

/// Copies each (batch row, head) buffer `[T, width]` of `per_head` (`b`-major) into its
/// columns of `dst [B, T, row_stride]`: head `h`'s piece `j` (of `width / Dh`) lands at column
/// `j · D + h · Dh`.
fn scatter_heads(
    per_head: &[Vec<f32>],
    sh: &AttentionShape,
    heads: usize,
    width: usize,
    dst: &mut [f32],
    row_stride: usize,
) {
    let (t, d, dh) = (sh.t, sh.d, sh.dh);
    for (bh, head) in per_head.iter().enumerate() {
        let (b, h) = (bh / heads, bh % heads);
        for (i, src_row) in head.chunks_exact(width).enumerate() {
            let dst_row = &mut dst[(b * t + i) * row_stride..][..row_stride];
            for (piece, src) in src_row.chunks_exact(dh).enumerate() {
                let at = piece * d + h * dh;
                dst_row[at..at + dh].copy_from_slice(src);
            }
        }
    }
}

/// The gradient of [`attention_forward`] with respect to `qkv`, given `d_out [B, T, D]`, into
/// `d_qkv [B, T, 3·D]` (every element written); `probs` are the forward pass's kept
/// probabilities, or `None` to recompute them. `parallel` as in [`attention_forward`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_backward(
    qkv: &[f32],
    d_out: &[f32],
    probs: Option<&[f32]>,
    dims: (usize, usize, usize),
    heads: usize,
    scale: f32,
    d_qkv: &mut [f32],
    parallel: bool,
) {
    let sh = AttentionShape::from_dims(dims, heads);
    let (t, d) = (sh.t, sh.d);
    let Some(probs) = probs else {
        // As the forward pass: one task per (batch row, head), probabilities recomputed one
        // block of query rows at a time.
        let per_head = per_head_pair(sh.b, heads, parallel, |b, h| {
            let qkv_b = &qkv[b * t * 3 * d..][..t * 3 * d];
            let d_out_b = &d_out[b * t * d..][..t * d];
            let mut p_block = vec![0f32; ROW_BLOCK * t];
            let mut ds = vec![0f32; ROW_BLOCK * t];
            let mut d_h = vec![0f32; t * 3 * sh.dh];
            simd_dispatch!(sh.backward_head_by_blocks(
                qkv_b,
                d_out_b,
                scale,
                h,
                &mut p_block,
                &mut ds,
                &mut d_h
            ));
            d_h
        });
        scatter_heads(&per_head, &sh, heads, 3 * sh.dh, d_qkv, 3 * d);
        return;
    };
    let row = |b: usize, d_qkv_b: &mut [f32]| {
        d_qkv_b.fill(0.0);
        let qkv_b = &qkv[b * t * 3 * d..][..t * 3 * d];
        let d_out_b = &d_out[b * t * d..][..t * d];
        let mut ds = vec![0f32; ROW_BLOCK * t];
        for h in 0..heads {
            let p = &probs[(b * heads + h) * t * t..][..t * t];
            simd_dispatch!(sh.backward_head(qkv_b, d_out_b, p, scale, h, &mut ds, d_qkv_b));
        }
    };
    if parallel {
        d_qkv
            .par_chunks_mut(t * 3 * d)
            .enumerate()
            .for_each(|(b, d_qkv_b)| row(b, d_qkv_b));
    } else {
        d_qkv
            .chunks_mut(t * 3 * d)
            .enumerate()
            .for_each(|(b, d_qkv_b)| row(b, d_qkv_b));
    }
}

/// Causal multi-head attention from a fused QKV projection: `qkv [B, T, 3·D]` holds Q, K and V
/// side by side (each `D = heads · Dh`, heads in order), as `dense(x, W_qkv)` produces them.
/// Returns `softmax(scale · Q Kᵀ + causal mask) V` per head, heads concatenated: `[B, T, D]`.
/// Differentiable with respect to `qkv`.
pub fn causal_attention(qkv: &Tensor, heads: usize, scale: f64) -> Result<Tensor> {
    if !(scale > 0.0 && scale.is_finite()) {
        candle_core::bail!("causal-attention: scale must be positive, got {scale}");
    }
    qkv.contiguous()?.apply_op1(CausalAttention {
        heads,
        scale: scale as f32,
    })
}
