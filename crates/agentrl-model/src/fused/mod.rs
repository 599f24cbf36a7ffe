//! Fused CPU ops with hand-written backward passes, for TinyAgent's and Qwen3's training steps.
//!
//! candle builds a training step from many small elementwise ops, each allocating (and often
//! zeroing) a fresh buffer; about 30% of a step went there (shared/DESIGN.md, "candle"). The
//! ops here do one pass over the data forward and one backward, and — unlike candle's own fused
//! `softmax_last_dim` / `rms_norm` — they record a backward pass, so gradients flow. Each is
//! checked against the composed candle ops (value and gradient) in its own tests.
//!
//! * `causal_softmax`: `softmax(scale · x + causal mask)` over the last dim of `[.., T, T]`.
//! * `causal_attention`: the whole attention core, `softmax(scale · Q Kᵀ + causal mask) V`,
//!   read straight from the QKV projection `[B, T, 3·D]` and written as `[B, T, D]`; one head
//!   per task, skipping the masked half, with the probabilities recomputed in the backward
//!   pass instead of stored. Composed from candle ops, this part of the step cost about 45%
//!   of it: a thousand small batched GEMMs per step, each with a thread-pool round trip.
//! * `log_softmax_gather`: `log_softmax(logits)[target]` per position: the token log-probs a
//!   policy-gradient loss needs, without materialising the `[.., V]` log-softmax. The model
//!   crate's one log-prob gather (Qwen3's scoring goes through it).
//! * [`log_prob_and_entropy`]: the log-prob of the target and the entropy of each row's
//!   softmax in one pass: what an update's policy loss and entropy bonus read.
//! * `gelu`: tanh-approximated GELU.
//! * `rms_norm`: `x · rsqrt(mean(x²) + eps) · w` with gradients for `x` and `w`.
//! * `rope`: rotary position embedding (rotate-half) with its backward pass: Qwen3's training
//!   forward (the inference forward's candle `rope_thd` gives the same bits, without one).
//! * `silu_mul`: SwiGLU's `silu(gate) ⊙ up` in one pass, and its two gradients in one pass:
//!   Qwen3's MLP, training and inference.
//! * `frozen_matmul`: `x · Wᵀ` for a frozen weight, with the backward pass of `x` only (candle's
//!   matmul also computes, and drops, the frozen weight's gradient): Qwen3's LoRA training.
//! * [`amx_matmul`]: `x · W` for Qwen3's frozen weights in inference, on the CPU's AMX tile
//!   unit at f32 accuracy (bf16x3), where the CPU has one; no backward pass.
//! * `ragged_decode_attention`: one new token per sequence against a batch of ragged KV
//!   caches (the local engine's decoding steps of a real model), each cached key and value read
//!   once per key/value head, hidden slots skipped; no backward pass.
//! * [`thin_matmul`]: `x · W` for the few rows of a decoding step (1–16) against Qwen3's frozen
//!   f32 weights packed in column panels, with AVX2 + FMA; no backward pass either.
//!
//! Their softmaxes and GELU's sigmoid use [`exp::exp`], an inlined `exp` that lets those loops
//! vectorise, and they run their loops compiled for AVX2 where the CPU has it (`with_simd`).
//!
//! They run on f32 CPU tensors (TinyAgent's training setting); other devices/dtypes get an error
//! naming the op, never a silent fallback without gradient. The exceptions are the ops Qwen3
//! calls (`log_softmax_gather`, `rope`, `silu_mul`): elsewhere (another device, an f64 model)
//! they fall back to composed candle ops, which record their own backward pass.
//!
//! The attention, GELU and RMSNorm kernels also work on plain slices (`attention_forward`,
//! `gelu_forward`, `rms_norm_forward` and their backward passes), which TinyAgent's explicit
//! trunk (`crate::tiny`, `trunk.rs`) composes with `gemm_into`; the candle ops above call the
//! same functions, so there is one kernel per op. TinyAgent's explicit decoding (`decode.rs`)
//! composes the same forward kernels with `cached_attention`'s `SequenceKv`: one sequence's
//! keys and values, and attention of a new token over them.
//!
//! One file per op; this file holds the shared plumbing (input access, row parallelism, the
//! one GEMM entry point).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout, Result};
use rayon::prelude::*;

pub mod amx_matmul;
mod cached_attention;
mod causal_attention;
mod causal_softmax;
mod exp;
mod frozen_matmul;
mod gelu;
mod log_prob_entropy;
mod log_softmax_gather;
mod ragged_decode_attention;
mod rms_norm;
mod rope;
mod silu_mul;
pub mod thin_matmul;

pub use causal_attention::causal_attention;
pub use causal_softmax::causal_softmax;
pub use frozen_matmul::frozen_matmul;
pub use gelu::gelu;
pub use log_prob_entropy::log_prob_and_entropy;
pub use log_softmax_gather::log_softmax_gather;
pub use ragged_decode_attention::ragged_decode_attention;
pub use rms_norm::rms_norm;
pub use rope::rope;
pub use silu_mul::silu_mul;

// Public for the integration tests (tests/model/fused_exp.rs).
#[doc(hidden)]
pub use exp::exp;
// Public for the integration tests (tests/model/fused_log_softmax_gather.rs).
#[doc(hidden)]
pub use log_softmax_gather::composed as composed_log_softmax_gather;

// The same kernels on plain slices, for TinyAgent's trunk (`crate::tiny`'s training forward).
pub(crate) use cached_attention::SequenceKv;
pub(crate) use causal_attention::{attention_backward, attention_forward};
pub(crate) use gelu::{gelu_backward, gelu_forward};
pub(crate) use rms_norm::{rms_norm_backward, rms_norm_forward};

/// The contiguous f32 data of an input, or an error naming the op.
fn f32_data<'a>(op: &str, storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let data = match storage {
        CpuStorage::F32(data) => data,
        other => candle_core::bail!("{op}: expected f32, got {:?}", other.dtype()),
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => candle_core::bail!("{op}: input must be contiguous"),
    }
}

fn u32_data<'a>(op: &str, storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [u32]> {
    let data = match storage {
        CpuStorage::U32(data) => data,
        other => candle_core::bail!("{op}: expected u32 targets, got {:?}", other.dtype()),
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => candle_core::bail!("{op}: targets must be contiguous"),
    }
}

/// `targets` holds one id per row of `[n, v]` logits, each inside the vocabulary; else an error
/// naming `op`.
fn check_targets(op: &str, targets: &[u32], n: usize, v: usize) -> Result<()> {
    if targets.len() != n {
        candle_core::bail!("{op}: {n} rows but {} targets", targets.len());
    }
    if let Some(&bad) = targets.iter().find(|&&t| t as usize >= v) {
        candle_core::bail!("{op}: target {bad} out of vocabulary {v}");
    }
    Ok(())
}

/// Runs `f` in a function compiled for AVX-512 (else AVX2) where the CPU has it, so the loops
/// `f` inlines vectorise 16 (8) lanes wide instead of the default x86-64 target's 4 (SSE2).
/// The kernels use no fused multiply-adds and keep their partial sums explicit, so the results
/// are the same either way.
#[inline(always)]
fn with_simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { avx512(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// `Σ xs[i]` with eight independent partial sums, so the compiler can vectorise it without
/// reassociating floating-point adds (a plain `.sum()` is one serial chain of adds).
#[inline(always)]
fn lane_sum(xs: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// `Σ a[i]·b[i]` with eight independent partial sums, so the compiler can vectorise it without
/// reassociating floating-point adds.
#[inline(always)]
fn lane_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (mut xs, mut ys) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut xs).zip(&mut ys) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    let tail: f32 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(x, y)| x * y)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// The largest of `xs` (`−∞` for none), NaNs skipped as `f32::max` skips them, with eight
/// independent running maxima: a `fold` of `f32::max` is one serial chain of NaN-aware
/// compares, which the compiler does not vectorise. Max is exact, so the order changes nothing.
#[inline(always)]
fn lane_max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = xs.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = if x > *lane { x } else { *lane };
        }
    }
    lanes
        .iter()
        .chain(chunks.remainder())
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// A matrix operand of [`gemm_into`]: its data and its row and column strides (so a transposed
/// operand, or one head's columns inside a wider row, is a view without a copy).
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub data: &'a [f32],
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Operand<'a> {
    /// A row-major matrix whose rows are `row_stride` apart.
    pub fn rows(data: &'a [f32], row_stride: usize) -> Self {
        Self {
            data,
            row_stride,
            col_stride: 1,
        }
    }

    /// The transpose of a row-major matrix whose rows are `row_stride` apart.
    pub fn transposed(data: &'a [f32], row_stride: usize) -> Self {
        Self {
            data,
            row_stride: 1,
            col_stride: row_stride,
        }
    }

    fn reaches(&self, rows: usize, cols: usize) -> bool {
        rows == 0
            || cols == 0
            || (rows - 1) * self.row_stride + (cols - 1) * self.col_stride < self.data.len()
    }
}

/// `dst [m, n] (+)= lhs [m, k] · rhs [k, n]` through the `gemm` crate (the GEMM candle's CPU
/// backend calls), `dst` row-major with rows `dst_row_stride` apart; `accumulate` adds to what
/// `dst` holds. `parallel` splits the product over the current rayon pool; callers that already
/// run one task per head pass `false`. The split is over output blocks, never over `k`, so the
/// result does not depend on the thread count.
///
/// # Panics
/// If an operand's strides reach outside its slice (a bug in the caller's shapes, never user
/// data: every shape here comes from a validated config).
pub(crate) fn gemm_into(
    dst: &mut [f32],
    dst_row_stride: usize,
    (m, n, k): (usize, usize, usize),
    lhs: Operand<'_>,
    rhs: Operand<'_>,
    accumulate: bool,
    parallel: bool,
) {
    assert!(
        m == 0 || n == 0 || (m - 1) * dst_row_stride + n <= dst.len(),
        "gemm_into: destination too small"
    );
    assert!(
        lhs.reaches(m, k) && rhs.reaches(k, n),
        "gemm_into: operand too small"
    );
    let threads = rayon::current_num_threads();
    let parallelism = if parallel && threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the asserts above keep every element the strides reach inside its slice; `dst`
    // is borrowed exclusively, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Rows below this many elements in total are processed on one thread (rayon's fork/join costs
/// more than the work).
const PARALLEL_MIN_ELEMENTS: usize = 1 << 14;

fn for_rows<F>(out: &mut [f32], row_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    for_rows_on(out, row_len, true, f)
}

/// [`for_rows`], on one thread where `parallel` is false (a caller that already runs one task
/// per shard of the batch).
fn for_rows_on<F>(out: &mut [f32], row_len: usize, parallel: bool, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    if parallel && out.len() >= PARALLEL_MIN_ELEMENTS {
        out.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    } else {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    }
}
