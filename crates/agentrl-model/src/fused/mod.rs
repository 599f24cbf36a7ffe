//! Fused CPU ops with hand-written backward passes, for TinyAgent's training step.
//!
//! candle builds a training step from many small elementwise ops, each allocating (and often
//! zeroing) a fresh buffer; about 30% of a step went there (shared/DESIGN.md, "candle"). The
//! ops here do one pass over the data forward and one backward, and — unlike candle's own fused
//! `softmax_last_dim` / `rms_norm` — they record a backward pass, so gradients flow. Each is
//! checked against the composed candle ops (value and gradient) in its own tests.
//!
//! * [`causal_softmax`]: `softmax(scale · x + causal mask)` over the last dim of `[.., T, T]`.
//! * [`causal_attention`]: the whole attention core, `softmax(scale · Q Kᵀ + causal mask) V`,
//!   read straight from the QKV projection `[B, T, 3·D]` and written as `[B, T, D]`; one head
//!   per task, skipping the masked half, with the probabilities recomputed in the backward
//!   pass instead of stored. Composed from candle ops, this part of the step cost about 45%
//!   of it: a thousand small batched GEMMs per step, each with a thread-pool round trip.
//! * [`log_softmax_gather`]: `log_softmax(logits)[target]` per position: the token log-probs a
//!   policy-gradient loss needs, without materialising the `[.., V]` log-softmax. The model
//!   crate's one log-prob gather (Qwen3's scoring goes through it).
//! * [`gelu`]: tanh-approximated GELU.
//! * [`rms_norm`]: `x · rsqrt(mean(x²) + eps) · w` with gradients for `x` and `w`.
//!
//! Their softmaxes and GELU's sigmoid use [`exp::exp`], an inlined `exp` that lets those loops
//! vectorise, and they run their loops compiled for AVX2 where the CPU has it (`with_simd`).
//!
//! They run on f32 CPU tensors (TinyAgent's training setting); other devices/dtypes get an error
//! naming the op, never a silent fallback without gradient. The exception is
//! [`log_softmax_gather`], which Qwen3 also calls: it converts to f32 itself and, off the CPU,
//! falls back to composed candle ops that do record a backward pass.
//!
//! One file per op; this file holds the shared plumbing (input access, row parallelism).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout, Result};
use rayon::prelude::*;

mod causal_attention;
mod causal_softmax;
mod exp;
mod gelu;
mod log_softmax_gather;
mod rms_norm;
#[cfg(test)]
mod testing;

pub use causal_attention::causal_attention;
pub use causal_softmax::causal_softmax;
pub use gelu::gelu;
pub use log_softmax_gather::log_softmax_gather;
pub use rms_norm::rms_norm;

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

/// Runs `f` in a function compiled for AVX2 where the CPU has it, so the loops `f` inlines
/// vectorise 8 lanes wide instead of the default x86-64 target's 4 (SSE2). The kernels use no
/// fused multiply-adds, so the results are the same either way.
#[inline(always)]
fn with_simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
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

/// Rows below this many elements in total are processed on one thread (rayon's fork/join costs
/// more than the work).
const PARALLEL_MIN_ELEMENTS: usize = 1 << 14;

fn for_rows<F>(out: &mut [f32], row_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    if out.len() >= PARALLEL_MIN_ELEMENTS {
        out.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    } else {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
    }
}
