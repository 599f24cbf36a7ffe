//! RMSNorm, `x · rsqrt(mean(x²) + eps) · w` over the last dim, with gradients for `x` and `w`.
//!
//! Data flow: TinyAgent's block input (before attention and before the MLP) and the final norm
//! before the LM and value heads.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{f32_data, for_rows_on, lane_dot, with_simd};

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
        rms_dims(self.name(), l1, l2)?;
        let mut out = vec![0f32; x.len()];
        rms_norm_forward(x, w, self.eps, &mut out, true);
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
        let mut out = vec![0f32; n * d + d];
        let (dx, dw) = out.split_at_mut(n * d);
        rms_norm_backward(x, w, dy, self.eps, dx, dw, true);
        Ok((CpuStorage::F32(out), Shape::from(n * d + d)))
    }
}

/// [`rms_norm`] on plain slices: `x [N, d]` into `out [N, d]` (every element written), for
/// `w [d]`; `parallel` splits the rows over the current rayon pool.
pub(crate) fn rms_norm_forward(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], parallel: bool) {
    let d = w.len();
    for_rows_on(out, d, parallel, |r, row| {
        let xr = &x[r * d..(r + 1) * d];
        with_simd(|| {
            let inv = inv_rms(xr, eps);
            for ((o, &v), &wv) in row.iter_mut().zip(xr).zip(w) {
                *o = v * inv * wv;
            }
        })
    });
}

/// `1 / sqrt(mean(x²) + eps)` of one row.
#[inline(always)]
fn inv_rms(xr: &[f32], eps: f32) -> f32 {
    1.0 / (lane_dot(xr, xr) / xr.len() as f32 + eps).sqrt()
}

/// The gradient of [`rms_norm_forward`] given `dy [N, d]`: `dx [N, d]` and `dw [d]` (every
/// element written); `parallel` as in [`rms_norm_forward`].
pub(crate) fn rms_norm_backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    eps: f32,
    dx: &mut [f32],
    dw: &mut [f32],
    parallel: bool,
) {
    let d = w.len();
    dw.fill(0.0);
    // One row's dx, with its dw contribution added to `dw_acc`.
    let row_grads = |r: usize, row: &mut [f32], dw_acc: &mut [f32]| {
        let xr = &x[r * d..(r + 1) * d];
        let gr = &dy[r * d..(r + 1) * d];
        let inv = inv_rms(xr, eps);
        let mut lanes = [0f32; 8];
        let (mut gs, mut ws, mut xs) = (gr.chunks_exact(8), w.chunks_exact(8), xr.chunks_exact(8));
        for ((g, wv), xv) in (&mut gs).zip(&mut ws).zip(&mut xs) {
            for l in 0..8 {
                lanes[l] += g[l] * wv[l] * xv[l];
            }
        }
        let tail: f32 = (gs
            .remainder()
            .iter()
            .zip(ws.remainder())
            .zip(xs.remainder()))
        .map(|((g, wv), xv)| g * wv * xv)
        .sum();
        let mean = (lanes.iter().sum::<f32>() + tail) * inv / d as f32;
        for k in 0..d {
            let xhat = xr[k] * inv;
            row[k] = inv * (gr[k] * w[k] - xhat * mean);
            dw_acc[k] += gr[k] * xhat;
        }
    };
    // dx rows in parallel, each task summing its rows' dw contributions; those partial sums
    // are added in task order, so the result does not depend on scheduling.
    const ROWS_PER_TASK: usize = 64;
    let task = |(chunk, rows): (usize, &mut [f32])| {
        let mut acc = vec![0f32; d];
        with_simd(|| {
            for (i, row) in rows.chunks_mut(d).enumerate() {
                row_grads(chunk * ROWS_PER_TASK + i, row, &mut acc);
            }
        });
        acc
    };
    let partials: Vec<Vec<f32>> = if parallel {
        dx.par_chunks_mut(d * ROWS_PER_TASK)
            .enumerate()
            .map(task)
            .collect()
    } else {
        dx.chunks_mut(d * ROWS_PER_TASK)
            .enumerate()
            .map(task)
            .collect()
    };
    for p in partials {
        dw.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
    }
}

/// `x · rsqrt(mean(x²) + eps) · w` over the last dim; differentiable in `x` and `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}
