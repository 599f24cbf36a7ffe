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
//! in place, the matmuls accumulate straight into their outputs, and everything runs on the
//! current rayon pool. candle's autograd stays the oracle: the tests check this pass's
//! hidden states and every gradient against it.

use crate::fused::{
    attention_backward, attention_forward, gelu_backward, gelu_forward, gemm_into,
    rms_norm_backward, rms_norm_forward, Operand,
};

use super::TinyConfig;

/// One block's weights, row-major as candle stores them (`[out, in]` for a projection).
pub(super) struct BlockWeights {
    pub norm_attn: Vec<f32>,
    pub qkv: Vec<f32>,
    pub attn_out: Vec<f32>,
    pub norm_mlp: Vec<f32>,
    pub mlp_up: Vec<f32>,
    pub mlp_down: Vec<f32>,
}

/// The trunk's weights, copied out of the model's variables for one pass.
pub(super) struct TrunkWeights {
    pub tok_emb: Vec<f32>,
    pub pos_emb: Vec<f32>,
    pub blocks: Vec<BlockWeights>,
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

/// A forward pass's saved activations (enough to compute every trunk gradient) and the
/// backward pass's buffers. A tape is handed back to the next forward pass, which refills its
/// buffers in place: one allocation per shape (as llm.c does), not one per op and step, and no
/// zeroing of buffers every kernel overwrites anyway.
#[derive(Default)]
pub(super) struct Tape {
    ids: Vec<u32>,
    batch: usize,
    seq: usize,
    blocks: Vec<BlockTape>,
    scratch: Scratch,
}

/// `buf` resized to `len` elements, as a slice to overwrite: what it held before is stale,
/// and only growth is zeroed.
fn fit(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    buf
}

/// `y [N, out] = x [N, in] · Wᵀ` for a projection `W [out, in]`; `accumulate` adds to `y`.
fn project(y: &mut [f32], x: &[f32], w: &[f32], rows: usize, out: usize, accumulate: bool) {
    let inp = w.len() / out;
    gemm_into(
        y,
        out,
        (rows, out, inp),
        Operand::rows(x, inp),
        Operand::transposed(w, inp),
        accumulate,
        true,
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
        true,
    );
    gemm_into(
        dw,
        inp,
        (out, inp, rows),
        Operand::transposed(dy, out),
        Operand::rows(x, inp),
        false,
        true,
    );
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
    let hidden = cfg.mlp_ratio * d;
    let rows = batch * seq;
    let eps = cfg.rms_eps as f32;
    let scale = 1.0 / (cfg.head_dim() as f32).sqrt();
    let mut tape = reuse.unwrap_or_default();
    tape.ids.clear();
    tape.ids.extend_from_slice(ids);
    (tape.batch, tape.seq) = (batch, seq);
    tape.blocks
        .resize_with(weights.blocks.len(), BlockTape::default);
    let mut x = vec![0f32; rows * d];
    for (row, (xr, &id)) in x.chunks_exact_mut(d).zip(ids).enumerate() {
        let tok = &weights.tok_emb[id as usize * d..][..d];
        let pos = &weights.pos_emb[(row % seq) * d..][..d];
        for ((o, &a), &b) in xr.iter_mut().zip(tok).zip(pos) {
            *o = a + b;
        }
    }
    for (w, t) in weights.blocks.iter().zip(&mut tape.blocks) {
        t.x_in.clear();
        t.x_in.extend_from_slice(&x);
        rms_norm_forward(&x, &w.norm_attn, eps, fit(&mut t.normed_attn, rows * d));
        let qkv = fit(&mut t.qkv, rows * 3 * d);
        project(qkv, &t.normed_attn, &w.qkv, rows, 3 * d, false);
        attention_forward(
            &t.qkv,
            (batch, seq, d),
            cfg.n_heads,
            scale,
            fit(&mut t.ctx, rows * d),
            Some(fit(&mut t.probs, batch * cfg.n_heads * seq * seq)),
        );
        project(&mut x, &t.ctx, &w.attn_out, rows, d, true);
        t.x_mid.clear();
        t.x_mid.extend_from_slice(&x);
        rms_norm_forward(&x, &w.norm_mlp, eps, fit(&mut t.normed_mlp, rows * d));
        let up = fit(&mut t.up, rows * hidden);
        project(up, &t.normed_mlp, &w.mlp_up, rows, hidden, false);
        gelu_forward(&t.up, fit(&mut t.act, rows * hidden));
        project(&mut x, &t.act, &w.mlp_down, rows, d, true);
    }
    (x, tape)
}

impl Tape {
    /// Every trunk weight's gradient, given the gradient of the forward pass's output
    /// `d_out [batch·seq, d]`.
    pub(super) fn backward(
        &mut self,
        weights: &TrunkWeights,
        cfg: &TinyConfig,
        d_out: &[f32],
    ) -> TrunkGrads {
        let d = cfg.d_model;
        let hidden = cfg.mlp_ratio * d;
        let (batch, seq) = (self.batch, self.seq);
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
        let mut grads: Vec<BlockWeights> = Vec::with_capacity(weights.blocks.len());
        for (w, t) in weights.blocks.iter().zip(&self.blocks).rev() {
            let mut g = BlockWeights {
                norm_attn: vec![0f32; d],
                qkv: vec![0f32; w.qkv.len()],
                attn_out: vec![0f32; w.attn_out.len()],
                norm_mlp: vec![0f32; d],
                mlp_up: vec![0f32; w.mlp_up.len()],
                mlp_down: vec![0f32; w.mlp_down.len()],
            };
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
            gelu_backward(&t.up, &s.d_act, &mut s.d_up);
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
            );
            add_into(&mut s.dx, &s.d_norm_in);
            grads.push(g);
        }
        grads.reverse();
        // The embeddings: each position's gradient lands on its token's row and its
        // position's row, summed in row order so the result does not depend on scheduling.
        let mut tok_emb = vec![0f32; weights.tok_emb.len()];
        let mut pos_emb = vec![0f32; weights.pos_emb.len()];
        for (row, (g, &id)) in s.dx.chunks_exact(d).zip(&self.ids).enumerate() {
            add_into(&mut tok_emb[id as usize * d..][..d], g);
            add_into(&mut pos_emb[(row % seq) * d..][..d], g);
        }
        TrunkGrads {
            tok_emb,
            pos_emb,
            blocks: grads,
        }
    }
}

/// `acc += x`, elementwise.
fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a += b;
    }
}
