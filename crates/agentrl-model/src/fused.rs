//! Fused CPU ops with hand-written backward passes, for TinyAgent's training step.
//!
//! candle builds a training step from many small elementwise ops, each allocating (and often
//! zeroing) a fresh buffer; about 30% of a step went there (shared/DESIGN.md, "candle"). The
//! ops here do one pass over the data forward and one backward, and — unlike candle's own fused
//! `softmax_last_dim` / `rms_norm` — they record a backward pass, so gradients flow. Each is
//! checked against the composed candle ops (value and gradient) in the tests below.
//!
//! * [`causal_softmax`]: `softmax(scale · x + causal mask)` over the last dim of `[.., T, T]`.
//! * [`causal_attention`]: the whole attention core, `softmax(scale · Q Kᵀ + causal mask) V`,
//!   read straight from the QKV projection `[B, T, 3·D]` and written as `[B, T, D]`; one head
//!   per task, skipping the masked half, with the probabilities recomputed in the backward
//!   pass instead of stored. Composed from candle ops, this part of the step cost about 45%
//!   of it: a thousand small batched GEMMs per step, each with a thread-pool round trip.
//! * [`log_softmax_gather`]: `log_softmax(logits)[target]` per row: the token log-probs a
//!   policy-gradient loss needs, without materialising the `[N, V]` log-softmax.
//! * [`gelu`]: tanh-approximated GELU.
//! * [`rms_norm`]: `x · rsqrt(mean(x²) + eps) · w` with gradients for `x` and `w`.
//!
//! They run on f32 CPU tensors (TinyAgent's training setting); other devices/dtypes get an error
//! naming the op, never a silent fallback without gradient.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

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

// ---------------------------------------------------------------------------------------------
// Causal softmax

struct CausalSoftmax {
    scale: f32,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_data(self.name(), storage, layout)?;
        let dims = layout.shape().dims();
        let t = *dims.last().unwrap_or(&0);
        if dims.len() < 2 || dims[dims.len() - 2] != t || t == 0 {
            candle_core::bail!("causal-softmax: expected [.., T, T], got {dims:?}");
        }
        let scale = self.scale;
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, t, |r, row| {
            let i = r % t; // query position: keys 0..=i are visible
            let xr = &x[r * t..r * t + i + 1];
            let max = xr.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) * scale;
            let mut sum = 0f32;
            for (o, &v) in row.iter_mut().zip(xr) {
                let e = (v * scale - max).exp();
                *o = e;
                sum += e;
            }
            let inv = 1.0 / sum;
            row[..=i].iter_mut().for_each(|o| *o *= inv);
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        Ok(Some(res.apply_op2_no_bwd(
            &grad,
            &SoftmaxBackward { scale: self.scale },
        )?))
    }
}

/// `dx = scale · y ⊙ (dy − Σ y ⊙ dy)` per row.
struct SoftmaxBackward {
    scale: f32,
}

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "causal-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = f32_data(self.name(), s1, l1)?;
        let dy = f32_data(self.name(), s2, l2)?;
        let t = *l1.shape().dims().last().unwrap_or(&1);
        let scale = self.scale;
        let mut out = vec![0f32; y.len()];
        for_rows(&mut out, t, |r, row| {
            let yr = &y[r * t..(r + 1) * t];
            let dyr = &dy[r * t..(r + 1) * t];
            let dot: f32 = yr.iter().zip(dyr).map(|(a, b)| a * b).sum();
            for ((o, &yv), &g) in row.iter_mut().zip(yr).zip(dyr) {
                *o = scale * yv * (g - dot);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `softmax(scale · x)` over the last dim of `x [.., T, T]`, with key `j` hidden from query `i`
/// when `j > i` (probability exactly 0). Differentiable.
pub fn causal_softmax(x: &Tensor, scale: f64) -> Result<Tensor> {
    if !(scale > 0.0 && scale.is_finite()) {
        candle_core::bail!("causal-softmax: scale must be positive, got {scale}");
    }
    x.contiguous()?.apply_op1(CausalSoftmax {
        scale: scale as f32,
    })
}

// ---------------------------------------------------------------------------------------------
// Causal attention

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
        let mut sum = 0f32;
        for pj in p.iter_mut() {
            *pj = ((*pj - max) * scale).exp();
            sum += *pj;
        }
        let inv = 1.0 / sum;
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

// ---------------------------------------------------------------------------------------------
// log_softmax + gather

struct LogSoftmaxGather;

impl CustomOp2 for LogSoftmaxGather {
    fn name(&self) -> &'static str {
        "log-softmax-gather"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let logits = f32_data(self.name(), s1, l1)?;
        let targets = u32_data(self.name(), s2, l2)?;
        let (n, v) = l1.shape().dims2()?;
        if targets.len() != n {
            candle_core::bail!("log-softmax-gather: {n} rows but {} targets", targets.len());
        }
        if let Some(&bad) = targets.iter().find(|&&t| t as usize >= v) {
            candle_core::bail!("log-softmax-gather: target {bad} out of vocabulary {v}");
        }
        let out: Vec<f32> = (0..n)
            .into_par_iter()
            .with_min_len(64)
            .map(|r| {
                let row = &logits[r * v..(r + 1) * v];
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let sum: f32 = row.iter().map(|&x| (x - max).exp()).sum();
                row[targets[r] as usize] - max - sum.ln()
            })
            .collect();
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad_res.contiguous()?;
        let d_logits = logits.apply_op3_no_bwd(targets, &grad, &LogSoftmaxGatherBackward)?;
        Ok((Some(d_logits), None))
    }
}

/// `d logits[n, v] = g[n] · (1[v = target[n]] − softmax(logits[n])[v])`.
struct LogSoftmaxGatherBackward;

impl CustomOp3 for LogSoftmaxGatherBackward {
    fn name(&self) -> &'static str {
        "log-softmax-gather-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let logits = f32_data(self.name(), s1, l1)?;
        let targets = u32_data(self.name(), s2, l2)?;
        let grad = f32_data(self.name(), s3, l3)?;
        let (_, v) = l1.shape().dims2()?;
        let mut out = vec![0f32; logits.len()];
        for_rows(&mut out, v, |r, row| {
            let g = grad[r];
            let lr = &logits[r * v..(r + 1) * v];
            let max = lr.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut sum = 0f32;
            for (o, &x) in row.iter_mut().zip(lr) {
                let e = (x - max).exp();
                *o = e;
                sum += e;
            }
            let k = -g / sum;
            row.iter_mut().for_each(|o| *o *= k);
            row[targets[r] as usize] += g;
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `log_softmax(logits)[n, targets[n]]` for `logits [N, V]` f32 and `targets [N]` u32 → `[N]`.
/// Differentiable in `logits`.
pub fn log_softmax_gather(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, LogSoftmaxGather)
}

// ---------------------------------------------------------------------------------------------
// GELU (tanh approximation)

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "fused-gelu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_data(self.name(), storage, layout)?;
        let mut out = vec![0f32; x.len()];
        let row = 4096.min(x.len().max(1));
        for_rows(&mut out, row, |r, chunk| {
            let xs = &x[r * row..r * row + chunk.len()];
            for (o, &v) in chunk.iter_mut().zip(xs) {
                // 0.5·(1 + tanh(z)) = sigmoid(2z): one `exp` instead of libm's slow `tanhf`.
                let z = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
                *o = v / (1.0 + (-2.0 * z).exp());
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        Ok(Some(
            arg.contiguous()?.apply_op2_no_bwd(&grad, &GeluBackward)?,
        ))
    }
}

struct GeluBackward;

impl CustomOp2 for GeluBackward {
    fn name(&self) -> &'static str {
        "fused-gelu-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_data(self.name(), s1, l1)?;
        let dy = f32_data(self.name(), s2, l2)?;
        let mut out = vec![0f32; x.len()];
        let row = 4096.min(x.len().max(1));
        for_rows(&mut out, row, |r, chunk| {
            let base = r * row;
            for (k, o) in chunk.iter_mut().enumerate() {
                let v = x[base + k];
                // gelu = v·s with s = sigmoid(2z): d/dv = s + v·2s(1−s)·dz/dv.
                let z = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
                let sig = 1.0 / (1.0 + (-2.0 * z).exp());
                let dz = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
                let d = sig + v * 2.0 * sig * (1.0 - sig) * dz;
                *o = dy[base + k] * d;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Tanh-approximated GELU (same function as candle's `Tensor::gelu`), differentiable.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu)
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

struct RmsNorm {
    eps: f32,
}

fn rms_dims(op: &str, lx: &Layout, lw: &Layout) -> Result<(usize, usize)> {
    let d = *lx.shape().dims().last().unwrap_or(&0);
    if lw.shape().dims() != [d] || d == 0 {
        candle_core::bail!(
            "{op}: weight {:?} does not match the last dim of {:?}",
            lw.shape(),
            lx.shape()
        );
    }
    Ok((lx.shape().elem_count() / d, d))
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "fused-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_data(self.name(), s1, l1)?;
        let w = f32_data(self.name(), s2, l2)?;
        let (_, d) = rms_dims(self.name(), l1, l2)?;
        let eps = self.eps;
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, d, |r, row| {
            let xr = &x[r * d..(r + 1) * d];
            let ms = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for ((o, &v), &wv) in row.iter_mut().zip(xr).zip(w) {
                *o = v * inv * wv;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad_res.contiguous()?;
        // One pass computes dx for every row and, appended as one extra row, dw.
        let both =
            x.contiguous()?
                .apply_op3_no_bwd(w, &grad, &RmsNormBackward { eps: self.eps })?;
        let d = w.dim(0)?;
        let n = x.elem_count() / d;
        let dx = both.narrow(0, 0, n * d)?.reshape(x.shape())?;
        let dw = both.narrow(0, n * d, d)?;
        Ok((Some(dx), Some(dw)))
    }
}

/// With `r = rsqrt(mean(x²) + eps)` and `x̂ = x · r`:
/// `dx = r · (dy ⊙ w − x̂ · mean(dy ⊙ w ⊙ x̂))`, `dw = Σ_rows dy ⊙ x̂`.
/// Output: `[N·D + D]`, dx flattened then dw.
struct RmsNormBackward {
    eps: f32,
}

impl CustomOp3 for RmsNormBackward {
    fn name(&self) -> &'static str {
        "fused-rms-norm-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_data(self.name(), s1, l1)?;
        let w = f32_data(self.name(), s2, l2)?;
        let dy = f32_data(self.name(), s3, l3)?;
        let (n, d) = rms_dims(self.name(), l1, l2)?;
        let eps = self.eps;
        let mut out = vec![0f32; n * d + d];
        let (dx, dw) = out.split_at_mut(n * d);
        // dx rows in parallel, each also returning its dw contribution; sum those in order so
        // the result does not depend on scheduling.
        let row_dw = |r: usize, row: &mut [f32]| -> Vec<f32> {
            let xr = &x[r * d..(r + 1) * d];
            let gr = &dy[r * d..(r + 1) * d];
            let ms = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            let mut dot = 0f32;
            for k in 0..d {
                dot += gr[k] * w[k] * xr[k] * inv;
            }
            let mean = dot / d as f32;
            let mut contrib = vec![0f32; d];
            for k in 0..d {
                let xhat = xr[k] * inv;
                row[k] = inv * (gr[k] * w[k] - xhat * mean);
                contrib[k] = gr[k] * xhat;
            }
            contrib
        };
        const ROWS_PER_TASK: usize = 64;
        let partials: Vec<Vec<f32>> = dx
            .par_chunks_mut(d * ROWS_PER_TASK)
            .enumerate()
            .map(|(chunk, rows)| {
                let mut acc = vec![0f32; d];
                for (i, row) in rows.chunks_mut(d).enumerate() {
                    let c = row_dw(chunk * ROWS_PER_TASK + i, row);
                    acc.iter_mut().zip(&c).for_each(|(a, b)| *a += b);
                }
                acc
            })
            .collect();
        for p in partials {
            dw.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
        }
        Ok((CpuStorage::F32(out), Shape::from(n * d + d)))
    }
}

/// `x · rsqrt(mean(x²) + eps) · w` over the last dim; differentiable in `x` and `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var, D};

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "element {i}: {x} vs {y}"
            );
        }
    }

    /// Value and gradient of `f_fused` equal those of `f_ref`, under a random upstream weight.
    fn check(
        inputs: &[Tensor],
        f_fused: impl Fn(&[Tensor]) -> Tensor,
        f_ref: impl Fn(&[Tensor]) -> Tensor,
    ) {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let fused = f_fused(&ts);
        let reference = f_ref(&ts);
        close(&fused, &reference, 1e-5);
        let weight = randn(fused.dims(), 99);
        let gf = (fused * &weight)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gr = (reference * &weight)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for v in &vars {
            let a = gf
                .get(v.as_tensor())
                .expect("fused op produced no gradient");
            let b = gr
                .get(v.as_tensor())
                .expect("reference produced no gradient");
            close(a, b, 1e-4);
        }
    }

    /// Additive `[T, T]` mask: 0 where key `j <= i`, −∞ above the diagonal.
    fn causal_mask(t: usize) -> Tensor {
        let mask: Vec<f32> = (0..t * t)
            .map(|k| {
                if k % t <= k / t {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap()
    }

    #[test]
    fn causal_softmax_matches_masked_softmax() {
        let t = 7;
        let mask = causal_mask(t);
        check(
            &[randn(&[2, 3, t, t], 1)],
            |x| causal_softmax(&x[0], 0.5).unwrap(),
            |x| {
                let s = (&x[0] * 0.5).unwrap().broadcast_add(&mask).unwrap();
                candle_nn::ops::softmax(&s, D::Minus1).unwrap()
            },
        );
    }

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

    #[test]
    fn log_softmax_gather_matches_log_softmax_then_gather() {
        let targets = Tensor::from_vec(vec![0u32, 4, 2, 3, 1, 4], 6, &Device::Cpu).unwrap();
        check(
            &[randn(&[6, 5], 2)],
            |x| log_softmax_gather(&x[0], &targets).unwrap(),
            |x| {
                candle_nn::ops::log_softmax(&x[0], D::Minus1)
                    .unwrap()
                    .gather(&targets.unsqueeze(1).unwrap(), 1)
                    .unwrap()
                    .squeeze(1)
                    .unwrap()
            },
        );
        let bad = Tensor::from_vec(vec![5u32; 6], 6, &Device::Cpu).unwrap();
        assert!(log_softmax_gather(&randn(&[6, 5], 2), &bad).is_err());
    }

    #[test]
    fn gelu_matches_candle_gelu() {
        check(
            &[randn(&[5, 9], 3)],
            |x| gelu(&x[0]).unwrap(),
            |x| x[0].gelu().unwrap(),
        );
    }

    #[test]
    fn rms_norm_matches_the_differentiable_reference() {
        // Enough rows to cross the parallel chunking of the backward pass.
        check(
            &[randn(&[3, 50, 8], 4), randn(&[8], 5)],
            |x| rms_norm(&x[0], &x[1], 1e-5).unwrap(),
            |x| {
                candle_nn::RmsNorm::new(x[1].clone(), 1e-5)
                    .forward_diff(&x[0])
                    .unwrap()
            },
        );
    }

    #[test]
    fn gradients_match_finite_differences() {
        // Central differences in f64-accumulated sums on a tiny input, for the two ops whose
        // backward is least like a textbook formula.
        let x = randn(&[1, 1, 3, 3], 6);
        let w = randn(&[1, 1, 3, 3], 7);
        let f = |x: &Tensor| -> f32 {
            (causal_softmax(x, 0.7).unwrap() * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        let var = Var::from_tensor(&x).unwrap();
        let grads = (causal_softmax(var.as_tensor(), 0.7).unwrap() * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let analytic: Vec<f32> = grads
            .get(var.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let base: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let h = 1e-2f32;
        for k in 0..base.len() {
            let shifted = |delta: f32| {
                let mut v = base.clone();
                v[k] += delta;
                f(&Tensor::from_vec(v, (1, 1, 3, 3), &Device::Cpu).unwrap())
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
            assert!(
                (numeric - analytic[k]).abs() < 2e-3,
                "{k}: {numeric} vs {}",
                analytic[k]
            );
        }
    }
}
