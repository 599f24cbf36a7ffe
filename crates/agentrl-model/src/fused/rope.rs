//! Rotary position embedding (the rotate-half convention of Llama, Qwen2 and Qwen3) on
//! `x: [B, T, heads, head_dim]` with tables `cos, sin: [T, head_dim / 2]`, with a hand-written
//! backward pass.
//!
//! Data flow: Qwen3's attention, training forward: `q_proj`, `k_proj` (and the QK norm) → this
//! → the fused causal attention. candle's `rope_thd` (the inference forward's) records no
//! backward pass, and the composed version (`narrow`, `neg`, `cat`, two broadcast products and
//! a sum) is about five passes forward and a dozen backward, `narrow`'s gradient among them
//! zero-padding a full-size buffer per half. Here each direction is one pass.
//!
//! With `x = [x₁, x₂]` (the two halves of a head) and `c, s` the row's tables:
//! `y₁ = x₁c − x₂s`, `y₂ = x₂c + x₁s`. Its backward pass is the same map with `−s`
//! (`dx₁ = dy₁c + dy₂s`, `dx₂ = dy₂c − dy₁s`), so one kernel serves both. Each output is one
//! product and one sum of two products, as candle's `rope_thd` computes them (no fused
//! multiply-add), so this and the inference forward give the same bits.

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};

use super::{f32_data, for_rows, with_simd};

/// The forward map, or with `inverse` its transpose (the backward pass: `sin` negated).
struct Rope {
    inverse: bool,
}

impl CustomOp3 for Rope {
    fn name(&self) -> &'static str {
        if self.inverse {
            "fused-rope-backward"
        } else {
            "fused-rope"
        }
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
        let cos = f32_data(self.name(), s2, l2)?;
        let sin = f32_data(self.name(), s3, l3)?;
        let (_, seq, heads, head_dim) = l1.shape().dims4()?;
        let half = head_dim / 2;
        if head_dim % 2 != 0 || cos.len() != seq * half || sin.len() != seq * half {
            candle_core::bail!(
                "{}: tables {:?} and {:?} do not fit x {:?} ([T, head_dim / 2] expected)",
                self.name(),
                l2.shape(),
                l3.shape(),
                l1.shape()
            );
        }
        let sign = if self.inverse { -1.0f32 } else { 1.0 };
        let row = heads * head_dim;
        let mut out = vec![0f32; x.len()];
        for_rows(&mut out, row.max(1), |r, out| {
            let t = r % seq;
            let (cos, sin) = (&cos[t * half..][..half], &sin[t * half..][..half]);
            let x = &x[r * row..][..row];
            with_simd(|| {
                for (out, x) in out.chunks_exact_mut(head_dim).zip(x.chunks_exact(head_dim)) {
                    let (x1, x2) = x.split_at(half);
                    let (y1, y2) = out.split_at_mut(half);
                    for i in 0..half {
                        let (c, s) = (cos[i], sign * sin[i]);
                        y1[i] = x1[i] * c - x2[i] * s;
                        y2[i] = x1[i] * s + x2[i] * c;
                    }
                }
            })
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dx = grad_res
            .contiguous()?
            .apply_op3_no_bwd(cos, sin, &Rope { inverse: true })?;
        // The tables are positions' constants: no gradient.
        Ok((Some(dx), None, None))
    }
}

/// RoPE on `x: [B, T, heads, head_dim]` with `cos, sin: [T, head_dim / 2]`, recording its
/// backward pass (to `x` only): the fused kernel on f32 CPU tensors, candle's composed ops
/// elsewhere.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let on_cpu_f32 = [x, cos, sin]
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32);
    if on_cpu_f32 {
        return x.contiguous()?.apply_op3(
            &cos.contiguous()?.detach(),
            &sin.contiguous()?.detach(),
            Rope { inverse: false },
        );
    }
    let (_, seq, _, head_dim) = x.dims4()?;
    let half = head_dim / 2;
    let cos = Tensor::cat(&[cos, cos], 1)?.reshape((1, seq, 1, head_dim))?;
    let sin = Tensor::cat(&[sin, sin], 1)?.reshape((1, seq, 1, head_dim))?;
    let first = x.narrow(3, 0, half)?;
    let second = x.narrow(3, half, half)?;
    let rotated = Tensor::cat(&[&second.neg()?, &first], 3)?;
    x.broadcast_mul(&cos)? + rotated.broadcast_mul(&sin)?
}
