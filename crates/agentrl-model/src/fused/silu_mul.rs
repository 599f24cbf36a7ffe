//! SwiGLU's gate, `silu(gate) ⊙ up`, as one pass, for Qwen3's inference forward (no backward
//! pass is recorded: the training forward composes candle's differentiable ops).
//!
//! Data flow: Qwen3's MLP in `ForwardMode::Inference` (scoring and sampling):
//! `gate_proj(x)`, `up_proj(x)` → this → `down_proj`. Composed, `silu` and the product are two
//! passes over `[N, intermediate]` with a fresh buffer each, and `silu`'s `exp` is libm's,
//! one element at a time (7% of `agentrl bench qwen3` outside the GEMMs, `perf`); here the
//! `exp` is [`super::exp`], which vectorises.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

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
}

/// `silu(gate) ⊙ up` for two tensors of one shape, recording no backward pass: the fused
/// kernel on f32 CPU tensors, candle's ops elsewhere.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.shape() != up.shape() {
        candle_core::bail!(
            "fused-silu-mul: gate {:?} and up {:?} differ in shape",
            gate.shape(),
            up.shape()
        );
    }
    if gate.device().is_cpu() && gate.dtype() == DType::F32 && up.dtype() == DType::F32 {
        return gate
            .contiguous()?
            .apply_op2_no_bwd(&up.contiguous()?, &SiluMul);
    }
    Ok((gate.silu()? * up)?.detach())
}
