//! Token log-probs: `log_softmax(logits)[target]` per row, without materialising the `[N, V]`
//! log-softmax, with a hand-written backward `g · (1[v = target] − softmax(logits))`.
//!
//! Data flow: a policy's logits and the tokens it sampled → the `log π_θ(a_t | s_t)` that every
//! policy-gradient loss reads.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{f32_data, for_rows, u32_data};

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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    use crate::fused::testing::{check, randn};

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
}
