//! `x · Wᵀ` for a frozen weight `W`, whose backward pass computes the gradient of `x` only.
//!
//! Data flow: Qwen3's frozen projections (LoRA's base, the tied LM head) in a training forward
//! (`ForwardMode::Train`): the update's `x` needs a gradient (LoRA's factors sit before it),
//! `W` does not. candle's `Op::Matmul` backward computes both operands' gradients whatever
//! they are (`candle_core::backprop`, `Op::Matmul`): for a frozen `W` it zero-fills a
//! `[in, out]` buffer, runs `xᵀ · dy` (as many FLOPs as the forward) and adds the two, then
//! drops the result. On SmolLM2's SFT step that dead work was most of the 8% of samples in
//! `memset` and 14% in `binary_map` (`perf`, `docs/real-model.md`), besides a quarter of the
//! GEMM time. Here the forward is candle's own CPU matmul on the same layouts (so the same
//! bits), and the backward is candle's own expression for `x`'s gradient, `dy · W`.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Storage, Tensor};

/// The op: holds `Wᵀ` (a `[in, out]` view), so that `W` is not an operand of the graph.
struct FrozenMatmul {
    weight_t: Tensor,
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, k) = layout.shape().dims2()?;
        let (k2, n) = self.weight_t.dims2()?;
        if k != k2 {
            candle_core::bail!(
                "frozen-matmul: x [{m}, {k}] does not match the weight's {k2} input features"
            );
        }
        let (weight_storage, weight_layout) = self.weight_t.storage_and_layout();
        let Storage::Cpu(weight) = &*weight_storage else {
            candle_core::bail!("frozen-matmul: the weight is not on the CPU");
        };
        let out = storage.matmul(weight, (1, m, n, k), layout, weight_layout)?;
        Ok((out, Shape::from((m, n))))
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.weight_t.t()?)?))
    }
}

/// `x · weight_t` for `x: [N, in]` and a frozen `weight_t: [in, out]` (a view of `W [out, in]`),
/// recording a backward pass for `x` only. A trainable weight (a `Var`), a non-CPU tensor or
/// an `x` that records no graph takes candle's matmul, whose backward `W` then needs or whose
/// cost is the same.
pub fn frozen_matmul(x: &Tensor, weight_t: &Tensor) -> Result<Tensor> {
    let frozen_cpu = x.device().is_cpu()
        && weight_t.device().is_cpu()
        && !weight_t.is_variable()
        && !weight_t.track_op()
        && x.dtype() == weight_t.dtype()
        && x.rank() == 2;
    if frozen_cpu && x.track_op() {
        return x.apply_op1(FrozenMatmul {
            weight_t: weight_t.clone(),
        });
    }
    x.matmul(weight_t)
}
