//! Tanh-approximated GELU (candle's `Tensor::gelu`), with a hand-written backward.
//!
//! Data flow: TinyAgent's block, MLP: `dense(rms_norm(x), W_up)` → this → `dense(·, W_down)`.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

use super::exp::exp;
use super::{f32_data, for_rows_on, with_simd};

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
        gelu_forward(x, &mut out, true);
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
        gelu_backward(x, dy, &mut out, true);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// [`gelu`] on plain slices, `x` into `out`; `parallel` splits the work over the current rayon
/// pool.
pub(crate) fn gelu_forward(x: &[f32], out: &mut [f32], parallel: bool) {
    let row = 4096.min(x.len().max(1));
    for_rows_on(out, row, parallel, |r, chunk| {
        let xs = &x[r * row..r * row + chunk.len()];
        with_simd(|| {
            for (o, &v) in chunk.iter_mut().zip(xs) {
                // 0.5·(1 + tanh(z)) = sigmoid(2z): one `exp` instead of libm's slow `tanhf`.
                let z = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
                *o = v / (1.0 + exp(-2.0 * z));
            }
        })
    });
}

/// The gradient of [`gelu_forward`], `dy ⊙ gelu'(x)` into `out`.
pub(crate) fn gelu_backward(x: &[f32], dy: &[f32], out: &mut [f32], parallel: bool) {
    let row = 4096.min(x.len().max(1));
    for_rows_on(out, row, parallel, |r, chunk| {
        let base = r * row;
        let (xs, dys) = (&x[base..base + chunk.len()], &dy[base..base + chunk.len()]);
        with_simd(|| {
            for ((o, &v), &g) in chunk.iter_mut().zip(xs).zip(dys) {
                // gelu = v·s with s = sigmoid(2z): d/dv = s + v·2s(1−s)·dz/dv.
                let z = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
                let sig = 1.0 / (1.0 + exp(-2.0 * z));
                let dz = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
                let d = sig + v * 2.0 * sig * (1.0 - sig) * dz;
                *o = g * d;
            }
        })
    });
}

/// Tanh-approximated GELU (same function as candle's `Tensor::gelu`), differentiable.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu)
}
