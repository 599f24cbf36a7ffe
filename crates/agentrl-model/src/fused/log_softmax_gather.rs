//! Token log-probs: `log_softmax(logits)[target]` per position, without materialising the
//! `[.., V]` log-softmax, with a hand-written backward `g · (1[v = target] − softmax(logits))`.
//!
//! Data flow: a policy's logits and the tokens it sampled (or is scored on) → `log π(a_t | s_t)`.
//! This is the model crate's one log-prob gather: [`crate::qwen3::gather_logprobs`] (and so
//! `Qwen3::token_logprobs`, `token_logprobs_mode` and `score_sequence`) calls it.
//!
//! `agentrl_rl::token_log_probs` computes the same function for the losses. It stays separate
//! because agentrl-rl is pure RL math that depends on candle only, never on this crate: it
//! composes candle's differentiable ops (any device, any float dtype) and reports shape and
//! vocabulary errors as `RlError`s naming the argument. Code that depends on both crates (the
//! trainer) may call either; they agree to float rounding.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

use super::exp::exp;
use super::{check_targets, f32_data, for_rows, lane_max, lane_sum, u32_data, with_simd};

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
        check_targets(self.name(), targets, n, v)?;
        let out: Vec<f32> = (0..n)
            .into_par_iter()
            .with_min_len(64)
            .map(|r| {
                let row = &logits[r * v..(r + 1) * v];
                with_simd(|| {
                    let max = lane_max(row);
                    let mut sum = 0f32;
                    // In blocks, so the exps vectorise and the buffer stays in L1 at any
                    // vocabulary.
                    let mut block = [0f32; 256];
                    for chunk in row.chunks(block.len()) {
                        let block = &mut block[..chunk.len()];
                        for (e, &x) in block.iter_mut().zip(chunk) {
                            *e = exp(x - max);
                        }
                        sum += lane_sum(block);
                    }
                    row[targets[r] as usize] - max - sum.ln()
                })
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
            with_simd(|| {
                let max = lane_max(lr);
                for (o, &x) in row.iter_mut().zip(lr) {
                    *o = exp(x - max);
                }
                let k = -g / lane_sum(row);
                row.iter_mut().for_each(|o| *o *= k);
            });
            row[targets[r] as usize] += g;
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `log_softmax(logits)[.., targets[..]]` in f32: `logits [.., V]` (any float dtype, computed in
/// f32) and integer `targets [..]` (the same leading dims) → `[..]`, e.g. `[B, T, V]`, `[B, T]`
/// → `[B, T]`. Differentiable in `logits`; a target outside the vocabulary is an error.
///
/// On the CPU this is one fused op; on other devices (which have no kernel for it) the same
/// function composed from differentiable candle ops, so gradients flow everywhere.
pub fn log_softmax_gather(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let Some((&vocab, lead)) = logits.dims().split_last() else {
        candle_core::bail!("log-softmax-gather: logits must end in a vocabulary dim, got a scalar");
    };
    if targets.dims() != lead {
        candle_core::bail!(
            "log-softmax-gather: targets {:?} must have the shape of logits {:?} without its last dim",
            targets.dims(),
            logits.dims()
        );
    }
    let rows: usize = lead.iter().product();
    let logits = logits.to_dtype(DType::F32)?.reshape((rows, vocab))?;
    let targets = targets.to_dtype(DType::U32)?.reshape(rows)?;
    let picked = if logits.device().is_cpu() {
        logits
            .contiguous()?
            .apply_op2(&targets.contiguous()?, LogSoftmaxGather)?
    } else {
        composed(&logits, &targets)?
    };
    picked.reshape(lead)
}

/// [`log_softmax_gather`] on `[N, V]`, `[N]` from differentiable candle ops, for devices without
/// the CPU kernel. The (detached) row max is subtracted first: it changes nothing mathematically
/// and keeps `exp` finite.
// Public for the integration tests (tests/model/fused_log_softmax_gather.rs).
#[doc(hidden)]
pub fn composed(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let vocab = logits.dim(D::Minus1)?;
    let max_id = targets.max_all()?.to_scalar::<u32>()?;
    if targets.elem_count() > 0 && max_id as usize >= vocab {
        candle_core::bail!("log-softmax-gather: target {max_id} out of vocabulary {vocab}");
    }
    let max = logits.max_keepdim(D::Minus1)?.detach();
    let shifted = logits.broadcast_sub(&max)?;
    let log_norm = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let picked = shifted.gather(&targets.unsqueeze(D::Minus1)?.contiguous()?, D::Minus1)?;
    (picked - log_norm)?.squeeze(D::Minus1)
}
