//! SwiGLU's gate, `silu(gate) ⊙ up`, as one pass, with a hand-written backward pass: Qwen3's
//! MLP in both forward modes.
//!
//! Data flow: Qwen3's MLP: `gate_proj(x)`, `up_proj(x)` → this → `down_proj`. Composed from
//! candle's ops, the forward is two passes over `[N, intermediate]` with a fresh buffer each,
//! and the backward about ten (candle's `silu` backward is `neg`, `exp`, `+1`, `recip`, `1 −`,
//! two products and a sum, each a fresh buffer, plus the product's two), most of them on the
//! widest activation of the layer: for SmolLM2's 2,500-token episodes, `[2500, 1536]` per layer.
//! Here the forward is one pass and the backward one pass that writes both gradients. Its
//! `exp` is [`super::exp`], which vectorises (libm's, one element at a time, was 7% of `agentrl
//! bench qwen3` outside the GEMMs, `perf`); the training and the inference forward are the same
//! function.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};

use super::exp::exp;
use super::{f32_data, for_rows, with_simd};

struct SiluMul;

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "fused-silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let gate = f32_data(self.name(), s1, l1)?;
        let up = f32_data(self.name(), s2, l2)?;
        let mut out = vec![0f32; gate.len()];
        let chunk = 4096.min(gate.len().max(1));
        for_rows(&mut out, chunk, |r, out| {
            let (gate, up) = (
                &gate[r * chunk..][..out.len()],
                &up[r * chunk..][..out.len()],
            );
            with_simd(|| {
                for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                    *o = g / (1.0 + exp(-g)) * u;
                }
            })
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let both = gate.contiguous()?.apply_op3_no_bwd(
            &up.contiguous()?,
            &grad_res.contiguous()?,
            &SiluMulBackward,
        )?;
        let shape = gate.shape();
        Ok((
            Some(both.get(0)?.reshape(shape)?),
            Some(both.get(1)?.reshape(shape)?),
        ))
    }
}

/// Both gradients of [`SiluMul`] in one pass: `[2, len]`, the gate's then the up
/// projection's. With `s = σ(g)`: `∂/∂u = dy · g·s` and `∂/∂g = dy · u · s·(1 + g·(1 − s))`.
struct SiluMulBackward;

impl CustomOp3 for SiluMulBackward {
    fn name(&self) -> &'static str {
        "fused-silu-mul-backward"
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
        let gate = f32_data(self.name(), s1, l1)?;
        let up = f32_data(self.name(), s2, l2)?;
        let dy = f32_data(self.name(), s3, l3)?;
        let len = gate.len();
        let mut out = vec![0f32; 2 * len];
        let (d_gate, d_up) = out.split_at_mut(len);
        let chunk = 4096.min(len.max(1));
        let work = |r: usize, d_gate: &mut [f32], d_up: &mut [f32]| {
            let range = r * chunk..r * chunk + d_gate.len();
            let (gate, up, dy) = (&gate[range.clone()], &up[range.clone()], &dy[range]);
            with_simd(|| {
                for i in 0..d_gate.len() {
                    let g = gate[i];
                    let s = 1.0 / (1.0 + exp(-g));
                    d_up[i] = dy[i] * (g * s);
                    d_gate[i] = dy[i] * up[i] * (s * (1.0 + g * (1.0 - s)));
                }
            })
        };
        if len >= super::PARALLEL_MIN_ELEMENTS {
            use rayon::prelude::*;
            d_gate
                .par_chunks_mut(chunk)
                .zip(d_up.par_chunks_mut(chunk))
                .enumerate()
                .for_each(|(r, (d_gate, d_up))| work(r, d_gate, d_up));
        } else {
            for (r, (d_gate, d_up)) in d_gate
                .chunks_mut(chunk)
                .zip(d_up.chunks_mut(chunk))
                .enumerate()
            {
                work(r, d_gate, d_up);
            }
        }
        let mut dims = vec![2];
        dims.extend(l1.shape().dims());
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

/// `silu(gate) ⊙ up` for two tensors of one shape, with its backward pass: the fused kernel on
/// f32 CPU tensors, candle's ops elsewhere (which record their own).
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.shape() != up.shape() {
        candle_core::bail!(
            "fused-silu-mul: gate {:?} and up {:?} differ in shape",
            gate.shape(),
            up.shape()
        );
    }
    if gate.device().is_cpu() && gate.dtype() == DType::F32 && up.dtype() == DType::F32 {
        return gate.contiguous()?.apply_op2(&up.contiguous()?, SiluMul);
    }
    gate.silu()? * up
}
