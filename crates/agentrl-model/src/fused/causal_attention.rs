//! Causal multi-head attention as one op: `softmax(scale · Q Kᵀ + causal mask) V`, read straight
//! from the fused QKV projection `[B, T, 3·D]` and written as `[B, T, D]`.
//!
//! Data flow: TinyAgent's block, training forward: `dense(rms_norm(x), W_qkv)` → this →
//! the output projection. One head per rayon task, skipping the masked half; the backward pass
//! recomputes the probabilities per query row instead of storing them. Composed from candle
//! ops, this part of the training step cost about 45% of it: a thousand small batched GEMMs per
//! step, each with a thread-pool round trip.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp;
use super::{f32_data, lane_sum};

/// `Σ a[i]·b[i]` with eight independent partial sums, so the compiler can vectorise it without
/// reassociating floating-point adds.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    let mut sum = lanes.iter().sum::<f32>();
    for i in chunks * 8..a.len() {
        sum += a[i] * b[i];
    }
    sum
}

/// `y += alpha · x`.
#[inline(always)]
fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// Calls `shape.kernel(args…)` through a copy compiled for AVX2 where the CPU has it (the
/// default x86-64 target assumes only SSE2, which halves the width of the kernels' loops). The
/// arithmetic is the same either way (no fused multiply-adds, explicit partial sums), so results
/// do not depend on the CPU.
macro_rules! simd_dispatch {
    ($shape:ident . $kernel:ident ( $($arg:expr),* )) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
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
    heads: usize,
    dh: usize,
}

impl AttentionShape {
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
            heads,
            dh: d / heads,
        })
    }

    /// Start of `part` (0 = Q, 1 = K, 2 = V) of head `h` at position `i` of row `b` in `qkv`.
    fn at(&self, b: usize, i: usize, part: usize, h: usize) -> usize {
        (b * self.t + i) * 3 * self.d + part * self.d + h * self.dh
    }

    /// Part `part` (1 = K, 2 = V) of head `(b, h)` transposed to `[Dh, T]`, so that loops over
    /// key positions run over contiguous memory.
    #[inline(always)]
    fn transposed(&self, qkv: &[f32], b: usize, h: usize, part: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.dh * self.t];
        for j in 0..self.t {
            let row = &qkv[self.at(b, j, part, h)..][..self.dh];
            for (l, &x) in row.iter().enumerate() {
                out[l * self.t + j] = x;
            }
        }
        out
    }

    /// The normalised attention probabilities of query `q` at position `i` into `p[..=i]`,
    /// given the head's keys transposed (`kt [Dh, T]`).
    #[inline(always)]
    fn probabilities(&self, q: &[f32], kt: &[f32], i: usize, scale: f32, p: &mut [f32]) {
        let p = &mut p[..=i];
        p.fill(0.0);
        for (l, &ql) in q.iter().enumerate() {
            axpy(p, ql, &kt[l * self.t..l * self.t + i + 1]);
        }
        let max = p.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        for pj in p.iter_mut() {
            *pj = exp((*pj - max) * scale);
        }
        let inv = 1.0 / lane_sum(p);
        p.iter_mut().for_each(|pj| *pj *= inv);
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

    /// Forward pass of head `bh = b·H + h` into `out [T, Dh]`.
    #[inline(always)]
    fn forward_head(&self, qkv: &[f32], scale: f32, bh: usize, out: &mut [f32]) {
        let (t, dh) = (self.t, self.dh);
        let (b, h) = (bh / self.heads, bh % self.heads);
        let kt = self.transposed(qkv, b, h, 1);
        let vt = self.transposed(qkv, b, h, 2);
        let mut p = vec![0f32; t];
        for i in 0..t {
            let q = &qkv[self.at(b, i, 0, h)..][..dh];
            self.probabilities(q, &kt, i, scale, &mut p);
            for (l, o) in out[i * dh..(i + 1) * dh].iter_mut().enumerate() {
                *o = dot(&p[..=i], &vt[l * t..l * t + i + 1]);
            }
        }
    }

    /// Backward pass of head `bh` into `grads [3, T, Dh]`: dQ as is, dK and dV transposed
    /// (`[Dh, T]`, transposed back by the caller).
    #[inline(always)]
    fn backward_head(&self, qkv: &[f32], d_out: &[f32], scale: f32, bh: usize, grads: &mut [f32]) {
        let (t, dh) = (self.t, self.dh);
        let (b, h) = (bh / self.heads, bh % self.heads);
        let (dq, rest) = grads.split_at_mut(t * dh);
        let (dkt, dvt) = rest.split_at_mut(t * dh);
        let kt = self.transposed(qkv, b, h, 1);
        let vt = self.transposed(qkv, b, h, 2);
        let mut p = vec![0f32; t];
        let mut ds = vec![0f32; t];
        for i in 0..t {
            let q = &qkv[self.at(b, i, 0, h)..][..dh];
            self.probabilities(q, &kt, i, scale, &mut p);
            let g = &d_out[(b * t + i) * self.d + h * dh..][..dh];
            let dp = &mut ds[..=i];
            dp.fill(0.0);
            for (l, &gl) in g.iter().enumerate() {
                axpy(dp, gl, &vt[l * t..l * t + i + 1]);
            }
            let row_dot = dot(&p[..=i], dp);
            for (dsj, &pj) in dp.iter_mut().zip(&p[..=i]) {
                *dsj = scale * pj * (*dsj - row_dot);
            }
            let ds = &ds[..=i];
            for l in 0..dh {
                dq[i * dh + l] = dot(ds, &kt[l * t..l * t + i + 1]);
                axpy(&mut dkt[l * t..l * t + i + 1], q[l], ds);
                axpy(&mut dvt[l * t..l * t + i + 1], g[l], &p[..=i]);
            }
        }
    }
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
        let (t, dh) = (sh.t, sh.dh);
        // Per head `[B·H, T, Dh]` (each task owns one chunk), then interleaved into `[B, T, D]`.
        let mut per_head = vec![0f32; sh.b * sh.heads * t * dh];
        per_head
            .par_chunks_mut(t * dh)
            .enumerate()
            .for_each(|(bh, out)| simd_dispatch!(sh.forward_head(qkv, self.scale, bh, out)));
        let mut out = vec![0f32; sh.b * t * sh.d];
        for b in 0..sh.b {
            for h in 0..sh.heads {
                for i in 0..t {
                    out[(b * t + i) * sh.d + h * dh..][..dh]
                        .copy_from_slice(&per_head[((b * sh.heads + h) * t + i) * dh..][..dh]);
                }
            }
        }
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
        let (t, dh) = (sh.t, sh.dh);
        if l2.shape().dims() != [sh.b, t, sh.d] {
            candle_core::bail!(
                "{}: gradient shape {:?}, expected [{}, {t}, {}]",
                self.name(),
                l2.shape(),
                sh.b,
                sh.d
            );
        }
        // Per head `[B·H, 3, T, Dh]`: dQ, dK, dV of that head.
        let mut per_head = vec![0f32; sh.b * sh.heads * 3 * t * dh];
        per_head
            .par_chunks_mut(3 * t * dh)
            .enumerate()
            .for_each(|(bh, grads)| {
                simd_dispatch!(sh.backward_head(qkv, d_out, self.scale, bh, grads))
            });
        let mut out = vec![0f32; sh.b * t * 3 * sh.d];
        for b in 0..sh.b {
            for h in 0..sh.heads {
                let base = (b * sh.heads + h) * 3 * t * dh;
                for i in 0..t {
                    out[sh.at(b, i, 0, h)..][..dh]
                        .copy_from_slice(&per_head[base + i * dh..][..dh]);
                    for part in 1..3 {
                        let transposed = &per_head[base + part * t * dh..][..t * dh];
                        let row = &mut out[sh.at(b, i, part, h)..][..dh];
                        for (l, x) in row.iter_mut().enumerate() {
                            *x = transposed[l * t + i];
                        }
                    }
                }
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::D;

    use crate::fused::testing::{causal_mask, check, randn};

    #[test]
    fn causal_attention_matches_the_composed_ops() {
        let (b, t, heads, dh) = (2, 6, 3, 4);
        let d = heads * dh;
        let mask = causal_mask(t);
        check(
            &[randn(&[b, t, 3 * d], 3)],
            |x| causal_attention(&x[0], heads, 0.5).unwrap(),
            |x| {
                let qkv = x[0]
                    .reshape((b, t, 3, heads, dh))
                    .unwrap()
                    .permute((2, 0, 3, 1, 4))
                    .unwrap();
                let part = |i: usize| qkv.get(i).unwrap().contiguous().unwrap();
                let (q, k, v) = (part(0), part(1), part(2));
                let s = (q.matmul(&k.t().unwrap()).unwrap() * 0.5)
                    .unwrap()
                    .broadcast_add(&mask)
                    .unwrap();
                let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
                p.matmul(&v)
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
                    .reshape((b, t, d))
                    .unwrap()
            },
        );
    }
}
