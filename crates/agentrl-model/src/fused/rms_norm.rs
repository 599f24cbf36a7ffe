//! RMSNorm, `x · rsqrt(mean(x²) + eps) · w` over the last dim, with gradients for `x` and `w`.
//!
//! Data flow: TinyAgent's block input (before attention and before the MLP) and the final norm
//! before the LM and value heads.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{f32_data, for_rows};

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
        rms_norm_forward(x, w, self.eps, &mut out);
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
        rms_norm_backward(x, w, dy, self.eps, dx, dw);
        Ok((CpuStorage::F32(out), Shape::from(n * d + d)))
    }
}

/// [`rms_norm`] on plain slices: rows of `x` (each `w.len()` long) into `out`.
pub(crate) fn rms_norm_forward(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for_rows(out, d, |r, row| {
        let xr = &x[r * d..(r + 1) * d];
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, &v), &wv) in row.iter_mut().zip(xr).zip(w) {
            *o = v * inv * wv;
        }
    });
}

/// The gradient of [`rms_norm_forward`]: `dx` for every row and `dw` (both overwritten), given
/// `dy`.
pub(crate) fn rms_norm_backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    eps: f32,
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let d = w.len();
    dw.fill(0.0);
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
}

/// `x · rsqrt(mean(x²) + eps) · w` over the last dim; differentiable in `x` and `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}
