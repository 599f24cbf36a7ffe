//! TinyAgent's trunk for training (the embeddings and the blocks, before the final norm) as
//! explicit loops: a forward pass that keeps what its backward pass needs, and that backward
//! pass, over plain `f32` buffers, with every matmul one call to the `gemm` crate (the GEMM
//! candle itself uses) and every other op one of [`crate::fused`]'s slice kernels.
//!
//! Data flow: the update's scoring pass (`Policy::forward_at_for_update`) → [`forward`] →
//! the final hidden states `[B, T, d]`, which enter candle's graph as a leaf variable; the
//! final norm, the heads, the pointer head and the loss stay in candle. After candle's
//! backward pass, [`Tape::backward`] takes that leaf's gradient and returns every trunk
//! weight's gradient, which the caller adds into candle's gradient store.
//!
//! Why not candle's autograd here: on TinyAgent's shapes (`[4096, 64] × [64, 192]`) a step
//! through candle's graph is bound by per-op costs (a fresh output buffer per op, gradients
//! accumulated by zero-and-add, thread hand-offs between candle's pool and rayon's), not by
//! arithmetic; the trunk is about 95% of the step's FLOPs. Here the residual stream is updated
//! in place, the matmuls accumulate straight into their outputs, and the batch runs as up to
//! [`SHARDS`] shards of whole sequences, each forward and backward on one thread of the
//! current rayon pool, with no hand-off between ops. candle's autograd stays the oracle: the tests check this pass's
//! hidden states and every gradient against it.

use rayon::prelude::*;

use crate::fused::{
    attention_backward, attention_forward, gelu_backward, gelu_forward, gemm_into,
    rms_norm_backward, rms_norm_forward, Operand,
};

use super::TinyConfig;

/// One block's weights, row-major as candle stores them (`[out, in]` for a projection).
#[derive(Clone)]
pub(super) struct BlockWeights {
    pub norm_attn: Vec<f32>,
    pub qkv: Vec<f32>,
    pub attn_out: Vec<f32>,
    pub norm_mlp: Vec<f32>,
    pub mlp_up: Vec<f32>,
    pub mlp_down: Vec<f32>,
}

/// The trunk's weights, copied out of the model's variables for one pass.
#[derive(Clone)]
pub(super) struct TrunkWeights {
    pub tok_emb: Vec<f32>,
    pub pos_emb: Vec<f32>,
    pub blocks: Vec<BlockWeights>,
}

impl TrunkWeights {
    /// Every buffer, in the order of `TinyAgent::trunk_params`: the two embeddings, then each
    /// block's norm, QKV, output, norm, up and down projections.
    pub(super) fn into_buffers(self) -> Vec<Vec<f32>> {
        let mut buffers = vec![self.tok_emb, self.pos_emb];
        for b in self.blocks {
            buffers.extend([
                b.norm_attn,
                b.qkv,
                b.attn_out,
                b.norm_mlp,
                b.mlp_up,
                b.mlp_down,
            ]);
        }
        buffers
    }

    /// [`TrunkWeights::into_buffers`]'s buffers, borrowed, in the same order.
    fn buffers(&self) -> impl Iterator<Item = &Vec<f32>> {
        [&self.tok_emb, &self.pos_emb]
            .into_iter()
            .chain(self.blocks.iter().flat_map(|b| {
                [
                    &b.norm_attn,
                    &b.qkv,
                    &b.attn_out,
                    &b.norm_mlp,
                    &b.mlp_up,
                    &b.mlp_down,
                ]
            }))
    }

    /// [`TrunkWeights::into_buffers`]'s buffers, borrowed mutably, in the same order.
    fn buffers_mut(&mut self) -> impl Iterator<Item = &mut Vec<f32>> {
        [&mut self.tok_emb, &mut self.pos_emb]
            .into_iter()
            .chain(self.blocks.iter_mut().flat_map(|b| {
                [
                    &mut b.norm_attn,
                    &mut b.qkv,
                    &mut b.attn_out,
                    &mut b.norm_mlp,
                    &mut b.mlp_up,
                    &mut b.mlp_down,
                ]
            }))
    }
}

/// The trunk weights' gradients, shaped as [`TrunkWeights`].
pub(super) type TrunkGrads = TrunkWeights;

/// What one block's backward pass reads, saved by the forward pass.
#[derive(Default)]
struct BlockTape {
    /// The block's input `[N, d]` (the residual stream before attention).
    x_in: Vec<f32>,
    /// `rms_norm(x_in)` `[N, d]`.
    normed_attn: Vec<f32>,
    /// The QKV projection `[N, 3d]`.
    qkv: Vec<f32>,
    /// The attention probabilities, `[B·H, T, T]` (lower triangle).
    probs: Vec<f32>,
    /// The attention output `[N, d]`, before the output projection.
    ctx: Vec<f32>,
    /// The residual stream after attention `[N, d]`.
    x_mid: Vec<f32>,
    /// `rms_norm(x_mid)` `[N, d]`.
    normed_mlp: Vec<f32>,
    /// The MLP's up projection `[N, h]` and its GELU.
    up: Vec<f32>,
    act: Vec<f32>,
}

/// The backward pass's working buffers.
#[derive(Default)]
struct Scratch {
    dx: Vec<f32>,
    d_act: Vec<f32>,
    d_up: Vec<f32>,
    d_normed: Vec<f32>,
    d_norm_in: Vec<f32>,
    d_ctx: Vec<f32>,
    d_qkv: Vec<f32>,
}

/// `buf` resized to `len` elements, as a slice to overwrite: what it held before is stale,
/// and only growth is zeroed.
pub(super) fn fit(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    buf
}

/// `out [d]` = token `id`'s embedding plus position `position`'s (`d = out.len()`).
pub(super) fn embed(out: &mut [f32], tok_emb: &[f32], pos_emb: &[f32], id: u32, position: usize) {
    let d = out.len();
    let tok = &tok_emb[id as usize * d..][..d];
    let pos = &pos_emb[position * d..][..d];
    for ((o, &a), &b) in out.iter_mut().zip(tok).zip(pos) {
        *o = a + b;
    }
}

/// `y [N, out] = x [N, in] · Wᵀ` for a projection `W [out, in]`; `accumulate` adds to `y`.
pub(super) fn project(
    y: &mut [f32],
    x: &[f32],
    w: &[f32],
    rows: usize,
    out: usize,
    accumulate: bool,
) {
    let inp = w.len() / out;
    gemm_into(
        y,
        out,
        (rows, out, inp),
        Operand::rows(x, inp),
        Operand::transposed(w, inp),
        accumulate,
        false,
    );
}

/// The backward pass of [`project`]: `dx [N, in] = dy · W` and `dW [out, in] = dyᵀ · x`.
fn project_backward(
    dx: &mut [f32],
    dw: &mut [f32],
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    rows: usize,
    out: usize,
) {
    let inp = w.len() / out;
    gemm_into(
        dx,
        inp,
        (rows, inp, out),
        Operand::rows(dy, out),
        Operand::rows(w, inp),
        false,
        false,
    );
    gemm_into(
        dw,
        inp,
        (out, inp, rows),
        Operand::transposed(dy, out),
        Operand::rows(x, inp),
        false,
        false,
    );
}

/// A forward pass's saved activations (enough to compute every trunk gradient) and the
/// backward pass's buffers, one [`ShardTape`] per shard of the batch. A tape is handed back to
/// the next forward pass, which refills its buffers in place: one allocation per shape (as
/// llm.c does), not one per op and step, and no zeroing of buffers every kernel overwrites
/// anyway.
#[derive(Default)]
pub(super) struct Tape {
    seq: usize,
    shards: Vec<ShardTape>,
}

/// One shard's part of a [`Tape`]: its sequences' ids, activations, working buffers, and the
/// gradients its backward pass wrote.
#[derive(Default)]
struct ShardTape {
    ids: Vec<u32>,
    /// Sequences in this shard.
    batch: usize,
    blocks: Vec<BlockTape>,
    scratch: Scratch,
    grads: Option<TrunkGrads>,
}

/// The batch's sequences are split into at most this many shards, each run start to finish
/// on one thread (forward, then backward), with the shards' weight gradients summed in shard
/// order at the end.
///
/// Why shards and not a parallel split of every op: on TinyAgent's shapes each op is a few
/// hundred microseconds, so splitting each one over the pool put a fork, a join and a thread
/// wake-up between every two kernels (rayon's sleep and wake-up were about 8% of a step,
/// `perf`); a shard's activations also stay in the core's own cache from op to op. The count
/// is fixed, not the thread count, so the gradients' summation order, and with it the result,
/// does not depend on how many threads run the shards.
const SHARDS: usize = 8;

/// The number of sequences in each shard of a batch of `batch`: as even as possible, the
/// larger shards first.
fn shard_sizes(batch: usize) -> Vec<usize> {
    let n = SHARDS.min(batch).max(1);
    (0..n)
        .map(|i| batch / n + usize::from(i < batch % n))
        .collect()
}

/// The trunk over `ids` (`[batch, seq]` row-major, positions `0..seq` in every row): returns the
/// residual stream after the last block, `[batch·seq, d]`, and the tape for [`Tape::backward`],
/// refilling `reuse`'s buffers where given.
pub(super) fn forward(
    weights: &TrunkWeights,
    cfg: &TinyConfig,
    ids: &[u32],
    (batch, seq): (usize, usize),
    reuse: Option<Tape>,
) -> (Vec<f32>, Tape) {
    let d = cfg.d_model;
    let mut tape = reuse.unwrap_or_default();
    tape.seq = seq;
    let sizes = shard_sizes(batch);
    tape.shards.resize_with(sizes.len(), ShardTape::default);
    let mut x = vec![0f32; batch * seq * d];
    let mut jobs = Vec::with_capacity(sizes.len());
    let (mut x_rest, mut ids_rest) = (&mut x[..], ids);
    for (shard, &n) in tape.shards.iter_mut().zip(&sizes) {
        let (x_shard, x_next) = x_rest.split_at_mut(n * seq * d);
        let (ids_shard, ids_next) = ids_rest.split_at(n * seq);
        (x_rest, ids_rest) = (x_next, ids_next);
        jobs.push((shard, x_shard, ids_shard, n));
    }
    jobs.into_par_iter()
        .for_each(|(shard, x_shard, ids_shard, n)| {
            shard.forward(weights, cfg, ids_shard, (n, seq), x_shard);
        });
    (x, tape)
}

impl ShardTape {
    /// The trunk over this shard's `ids` (`[batch, seq]`) into `x` (`[batch·seq, d]`, every
    /// element written), on the calling thread, keeping what the backward pass reads.
    fn forward(
        &mut self,
        weights: &TrunkWeights,
        cfg: &TinyConfig,
        ids: &[u32],
        (batch, seq): (usize, usize),
        x: &mut [f32],
    ) {
        let d = cfg.d_model;
        let hidden = cfg.mlp_ratio * d;
        let rows = batch * seq;
        let eps = cfg.rms_eps as f32;
        let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
        self.ids.clear();
        self.ids.extend_from_slice(ids);
        self.batch = batch;
        self.blocks
            .resize_with(weights.blocks.len(), BlockTape::default);
        for (row, (xr, &id)) in x.chunks_exact_mut(d).zip(ids).enumerate() {
            embed(xr, &weights.tok_emb, &weights.pos_emb, id, row % seq);
        }
        for (w, t) in weights.blocks.iter().zip(&mut self.blocks) {
            t.x_in.clear();
            t.x_in.extend_from_slice(x);
            rms_norm_forward(
                x,
                &w.norm_attn,
                eps,
                fit(&mut t.normed_attn, rows * d),
                false,
            );
            let qkv = fit(&mut t.qkv, rows * 3 * d);
            project(qkv, &t.normed_attn, &w.qkv, rows, 3 * d, false);
            attention_forward(
                &t.qkv,
                (batch, seq, d),
                cfg.n_heads,
                scale,
                fit(&mut t.ctx, rows * d),
                Some(fit(&mut t.probs, batch * cfg.n_heads * seq * seq)),
                false,
            );
            project(x, &t.ctx, &w.attn_out, rows, d, true);
            t.x_mid.clear();
            t.x_mid.extend_from_slice(x);
            rms_norm_forward(x, &w.norm_mlp, eps, fit(&mut t.normed_mlp, rows * d), false);
            let up = fit(&mut t.up, rows * hidden);
            project(up, &t.normed_mlp, &w.mlp_up, rows, hidden, false);
            gelu_forward(&t.up, fit(&mut t.act, rows * hidden), false);
            project(x, &t.act, &w.mlp_down, rows, d, true);
        }
    }

    /// This shard's part of every trunk weight's gradient, given the gradient of its forward
    /// output `d_out [batch·seq, d]`, into `self.grads` (every element written).
    fn backward(&mut self, weights: &TrunkWeights, cfg: &TinyConfig, seq: usize, d_out: &[f32]) {
        let d = cfg.d_model;
        let hidden = cfg.mlp_ratio * d;
        let batch = self.batch;
        let rows = batch * seq;
        let eps = cfg.rms_eps as f32;
        let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
        let s = &mut self.scratch;
        s.dx.clear();
        s.dx.extend_from_slice(d_out);
        fit(&mut s.d_act, rows * hidden);
        fit(&mut s.d_up, rows * hidden);
        fit(&mut s.d_normed, rows * d);
        fit(&mut s.d_norm_in, rows * d);
        fit(&mut s.d_ctx, rows * d);
        fit(&mut s.d_qkv, rows * 3 * d);
        let grads = self.grads.get_or_insert_with(|| zeros_like(weights));
        for ((w, t), g) in weights
            .blocks
            .iter()
            .zip(&self.blocks)
            .zip(&mut grads.blocks)
            .rev()
        {
            // x_out = x_mid + gelu(norm(x_mid) W_upᵀ) W_downᵀ
            project_backward(
                &mut s.d_act,
                &mut g.mlp_down,
                &s.dx,
                &t.act,
                &w.mlp_down,
                rows,
                d,
            );
            gelu_backward(&t.up, &s.d_act, &mut s.d_up, false);
            project_backward(
                &mut s.d_normed,
                &mut g.mlp_up,
                &s.d_up,
                &t.normed_mlp,
                &w.mlp_up,
                rows,
                hidden,
            );
            rms_norm_backward(
                &t.x_mid,
                &w.norm_mlp,
                &s.d_normed,
                eps,
                &mut s.d_norm_in,
                &mut g.norm_mlp,
                false,
            );
            add_into(&mut s.dx, &s.d_norm_in);
            // x_mid = x_in + attention(norm(x_in) W_qkvᵀ) W_outᵀ
            project_backward(
                &mut s.d_ctx,
                &mut g.attn_out,
                &s.dx,
                &t.ctx,
                &w.attn_out,
                rows,
                d,
            );
            attention_backward(
                &t.qkv,
                &s.d_ctx,
                Some(&t.probs),
                (batch, seq, d),
                cfg.n_heads,
                scale,
                &mut s.d_qkv,
                false,
            );
            project_backward(
                &mut s.d_normed,
                &mut g.qkv,
                &s.d_qkv,
                &t.normed_attn,
                &w.qkv,
                rows,
                3 * d,
            );
            rms_norm_backward(
                &t.x_in,
                &w.norm_attn,
                &s.d_normed,
                eps,
                &mut s.d_norm_in,
                &mut g.norm_attn,
                false,
            );
            add_into(&mut s.dx, &s.d_norm_in);
        }
        // The embeddings: each position's gradient lands on its token's row and its
        // position's row, summed in row order so the result does not depend on scheduling.
        grads.tok_emb.fill(0.0);
        grads.pos_emb.fill(0.0);
        for (row, (g, &id)) in s.dx.chunks_exact(d).zip(&self.ids).enumerate() {
            add_into(&mut grads.tok_emb[id as usize * d..][..d], g);
            add_into(&mut grads.pos_emb[(row % seq) * d..][..d], g);
        }
    }
}

impl Tape {
    /// Every trunk weight's gradient, given the gradient of the forward pass's output
    /// `d_out [batch·seq, d]`: each shard's backward pass on its own thread, then the shards'
    /// gradients summed in shard order.
    pub(super) fn backward(
        &mut self,
        weights: &TrunkWeights,
        cfg: &TinyConfig,
        d_out: &[f32],
    ) -> TrunkGrads {
        let (seq, d) = (self.seq, cfg.d_model);
        let mut jobs = Vec::with_capacity(self.shards.len());
        let mut rest = d_out;
        for shard in &mut self.shards {
            let (mine, next) = rest.split_at(shard.batch * seq * d);
            rest = next;
            jobs.push((shard, mine));
        }
        jobs.into_par_iter()
            .for_each(|(shard, d_shard)| shard.backward(weights, cfg, seq, d_shard));
        let mut shards = self.shards.iter().filter_map(|shard| shard.grads.as_ref());
        let mut total = match shards.next() {
            Some(first) => first.clone(),
            None => zeros_like(weights),
        };
        for grads in shards {
            add_grads(&mut total, grads);
        }
        total
    }
}

/// Buffers shaped as `weights`, zeroed.
fn zeros_like(weights: &TrunkWeights) -> TrunkGrads {
    let mut zeros = weights.clone();
    zeros.buffers_mut().for_each(|buffer| buffer.fill(0.0));
    zeros
}

/// `acc += g`, buffer by buffer.
fn add_grads(acc: &mut TrunkGrads, g: &TrunkGrads) {
    for (a, b) in acc.buffers_mut().zip(g.buffers()) {
        add_into(a, b);
    }
}

/// `acc += x`, elementwise.
fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a += b;
    }
}
