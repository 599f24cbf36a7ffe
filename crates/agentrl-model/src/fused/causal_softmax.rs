//! Causal softmax: `softmax(scale · x + causal mask)` over the last dim of `[.., T, T]`, with a
//! hand-written backward `dx = scale · y ⊙ (dy − Σ y ⊙ dy)`.
//!
//! Data flow: attention scores `Q Kᵀ` `[B, H, T, T]` → probabilities, in TinyAgent's block
//! where the plain-causal path is not already one [`super::causal_attention`] call (a cache
//! with causal masking).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

use super::exp::exp;
use super::{f32_data, for_rows, lane_max, lane_sum};

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
            let max = lane_max(xr) * scale;
            for (o, &v) in row.iter_mut().zip(xr) {
                *o = exp(v * scale - max);
            }
            let inv = 1.0 / lane_sum(&row[..=i]);
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
