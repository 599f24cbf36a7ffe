//! A token distribution's two statistics in one pass: `log π(target)` and the entropy
//! `H = −Σ_v π(v) log π(v)` of `π = softmax(logits)`, per row of `logits [N, V]`, with a
//! hand-written backward for both.
//!
//! Data flow: an update's scored logits (the trainer's `score`, at the loss positions) → the
//! policy loss's log-probs and the entropy bonus (ALGORITHMS.md §12). Composed from candle ops,
//! the two cost about ten `[N, V]` tensors forward and as many backward (two log-softmaxes,
//! a gather, `exp`, a product, a sum, and their gradients), each a fresh buffer; here the row's
//! exponentials stay in a block that fits in L1, and the backward pass writes each gradient
//! element once:
//!
//! `∂ log π(t) / ∂z_v = 1[v = t] − π(v)` and `∂H / ∂z_v = −π(v) (log π(v) + H)`.
//!
//! [`super::log_softmax_gather`] stays the op for the log-prob alone (Qwen3's scoring, over a
//! vocabulary of 151k, needs no entropy). `agentrl_rl::entropy_from_logits` and
//! `agentrl_rl::token_log_probs` compose the same functions from candle ops for any device;
//! the tests check this op against them.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::exp::exp;
use super::{check_targets, f32_data, for_rows, lane_max, lane_sum, u32_data, with_simd};

/// One row's softmax statistics: the row max, `ln Σ exp(z − max)`, and the entropy.
struct RowStats {
    max: f32,
    log_norm: f32,
    entropy: f32,
}

/// Elements per block of exponentials (1 KiB: stays in L1 at any vocabulary).
const BLOCK: usize = 256;

/// `x − max` weighted by its exponential `e`, with `0 · (−∞)` taken as 0 (a logit of `−∞`
/// has probability 0 and adds nothing to the entropy).
#[inline(always)]
fn weighted(e: f32, shifted: f32) -> f32 {
    if e > 0.0 {
        e * shifted
    } else {
        0.0
    }
}

/// The statistics of one row, from `S = Σ e_v` and `W = Σ e_v (z_v − max)` with
/// `e_v = exp(z_v − max)`: `log π(v) = z_v − max − ln S` and `H = ln S − W / S`.
#[inline(always)]
fn row_stats(row: &[f32]) -> RowStats {
    let max = lane_max(row);
    let (mut sum, mut weighted_sum) = (0f32, 0f32);
    let mut block = [0f32; BLOCK];
    let mut weights = [0f32; BLOCK];
    for chunk in row.chunks(BLOCK) {
        let (block, weights) = (&mut block[..chunk.len()], &mut weights[..chunk.len()]);
        for ((e, w), &x) in block.iter_mut().zip(weights.iter_mut()).zip(chunk) {
            *e = exp(x - max);
            *w = weighted(*e, x - max);
        }
        sum += lane_sum(block);
        weighted_sum += lane_sum(weights);
    }
    let log_norm = sum.ln();
    RowStats {
        max,
        log_norm,
        entropy: log_norm - weighted_sum / sum,
    }
}

/// The forward op's output columns: `log π(t)`, `H`, and the row's `max + ln Σ exp(z − max)`
/// (so `log π(v) = z_v − shift`), kept for the backward pass; only the first two are returned.
struct LogProbEntropy;

const COLUMNS: usize = 3;

impl CustomOp2 for LogProbEntropy {
    fn name(&self) -> &'static str {
        "log-prob-entropy"
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
        let out: Vec<[f32; COLUMNS]> = (0..n)
            .into_par_iter()
            .with_min_len(64)
            .map(|r| {
                let row = &logits[r * v..(r + 1) * v];
                let stats = with_simd(|| row_stats(row));
                let shift = stats.max + stats.log_norm;
                [row[targets[r] as usize] - shift, stats.entropy, shift]
            })
            .collect();
        Ok((
            CpuStorage::F32(out.into_iter().flatten().collect()),
            Shape::from((n, COLUMNS)),
        ))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // The backward pass reads the forward's entropy and shift beside the gradient.
        let grad_and_res = Tensor::cat(&[grad_res, res], 1)?;
        let d_logits = logits.apply_op3_no_bwd(targets, &grad_and_res, &LogProbEntropyBackward)?;
        Ok((Some(d_logits), None))
    }
}

/// `d z_v = g_lp · (1[v = t] − π(v)) − g_H · π(v) (log π(v) + H)`, from `[N, 6]`: the upstream
/// gradient of the forward's three columns, then those columns.
struct LogProbEntropyBackward;

impl CustomOp3 for LogProbEntropyBackward {
    fn name(&self) -> &'static str {
        "log-prob-entropy-backward"
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
        let grad_and_res = f32_data(self.name(), s3, l3)?;
        let (n, v) = l1.shape().dims2()?;
        check_targets(self.name(), targets, n, v)?;
        if grad_and_res.len() != 2 * COLUMNS * n {
            candle_core::bail!(
                "{}: {} gradient and result values for {n} rows",
                self.name(),
                grad_and_res.len()
            );
        }
        let mut out = vec![0f32; logits.len()];
        for_rows(&mut out, v, |r, row| {
            let at = &grad_and_res[2 * COLUMNS * r..2 * COLUMNS * (r + 1)];
            let (g_lp, g_h) = (at[0], at[1]);
            let (entropy, shift) = (at[COLUMNS + 1], at[COLUMNS + 2]);
            let lr = &logits[r * v..(r + 1) * v];
            with_simd(|| {
                for (o, &x) in row.iter_mut().zip(lr) {
                    let log_p = x - shift;
                    let p = exp(log_p);
                    // p = 0 (a logit of −∞) gets no gradient, where log p · p would be NaN.
                    *o = if p > 0.0 {
                        -p * (g_lp + g_h * (log_p + entropy))
                    } else {
                        0.0
                    };
                }
            });
            row[targets[r] as usize] += g_lp;
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `(log softmax(logits)[target], entropy(softmax(logits)))` per row: `logits [N, V]` f32 on
/// the CPU and `targets [N]` (integer ids) → two `[N]` f32 tensors, both differentiable in
/// `logits`. A target outside the vocabulary is an error; so is another device or dtype (the
/// caller composes candle's ops there).
pub fn log_prob_and_entropy(logits: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor)> {
    let (n, _) = logits.dims2()?;
    if targets.dims() != [n] {
        candle_core::bail!(
            "log-prob-entropy: targets {:?} must be [{n}], one per row of logits {:?}",
            targets.dims(),
            logits.dims()
        );
    }
    if !logits.device().is_cpu() || logits.dtype() != DType::F32 {
        candle_core::bail!(
            "log-prob-entropy: f32 logits on the CPU only, got {:?} on {:?}",
            logits.dtype(),
            logits.device().location()
        );
    }
    let both = logits
        .contiguous()?
        .apply_op2(&targets.to_dtype(DType::U32)?.contiguous()?, LogProbEntropy)?;
    Ok((
        both.narrow(1, 0, 1)?.squeeze(1)?,
        both.narrow(1, 1, 1)?.squeeze(1)?,
    ))
}
