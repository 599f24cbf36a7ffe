//! One pre-norm transformer block of TinyAgent (RMSNorm, causal multi-head self-attention, GELU
//! MLP, two residuals), and the dense map it is built from.
//!
//! Data flow: embeddings `[B, T, d]` → `n_layers` × [`Block::forward`] → the final norm and the
//! heads in [`super::TinyAgent`]. The training forward calls a block with
//! [`AttentionMask::Causal`] and no cache (one fused attention op straight from the QKV
//! projection); the incremental path passes an additive mask for its ragged rows and the
//! layer's slot of the [`super::KvCache`]. Both run the same weights through the same code, so
//! their log-probs agree to float rounding.

use candle_core::Tensor;

use super::{KvCache, TinyConfig};
use crate::fused;

/// `x [N, in] @ w[out, in]^T`, on a 2-D view so candle runs one GEMM for the whole batch.
pub(super) fn dense(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let Some((last, lead)) = dims.split_last() else {
        candle_core::bail!("dense: the input is a scalar, not a batch of vectors");
    };
    let rows: usize = lead.iter().product();
    let out = w.dim(0)?;
    let y = x.reshape((rows, *last))?.matmul(&w.t()?)?;
    let mut out_dims = lead.to_vec();
    out_dims.push(out);
    y.reshape(out_dims)
}

/// How attention hides keys: the training forward is plainly causal (one fused op); the
/// incremental path needs an explicit additive mask for its ragged rows.
pub(super) enum AttentionMask<'a> {
    Causal,
    Additive(&'a Tensor),
}

pub(super) struct Block {
    pub(super) norm_attn: Tensor,
    pub(super) qkv: Tensor,
    pub(super) attn_out: Tensor,
    pub(super) norm_mlp: Tensor,
    pub(super) mlp_up: Tensor,
    pub(super) mlp_down: Tensor,
}

impl Block {
    /// One pre-norm block. `mask` is additive `[B or 1, 1, T_new, T_keys]`; `cache` (the cache
    /// and this block's layer index) holds this layer's keys/values `[B, H, S, Dh]` from earlier
    /// calls and is extended with the new ones.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        mask: AttentionMask,
        cache: Option<(&mut KvCache, usize)>,
        cfg: &TinyConfig,
    ) -> candle_core::Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let (h, dh) = (cfg.n_heads, cfg.head_dim());
        let scale = 1.0 / (dh as f64).sqrt();
        let normed = fused::rms_norm(x, &self.norm_attn, cfg.rms_eps)?;
        let projected = dense(&normed, &self.qkv)?;
        if let (AttentionMask::Causal, None) = (&mask, &cache) {
            // The training forward: one fused op, straight from the projection.
            let ctx = fused::causal_attention(&projected, h, scale)?;
            return self.finish(x, &ctx, cfg);
        }
        let qkv = projected
            .reshape((b, t, 3, h, dh))?
            .permute((2, 0, 3, 1, 4))?;
        let q = qkv.get(0)?.contiguous()?;
        let mut k = qkv.get(1)?.contiguous()?;
        let mut v = qkv.get(2)?.contiguous()?;
        if let Some((cache, layer)) = cache {
            (k, v) = cache.append(layer, &k, &v)?;
        }
        let scores = q.matmul(&k.t()?)?;
        let probs = match mask {
            AttentionMask::Causal => fused::causal_softmax(&scores, scale)?,
            AttentionMask::Additive(mask) => {
                candle_nn::ops::softmax_last_dim(&(scores * scale)?.broadcast_add(mask)?)?
            }
        };
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, d))?;
        self.finish(x, &ctx, cfg)
    }

    /// The rest of the block after attention: output projection, residual, MLP, residual.
    fn finish(&self, x: &Tensor, ctx: &Tensor, cfg: &TinyConfig) -> candle_core::Result<Tensor> {
        let x = (x + dense(ctx, &self.attn_out)?)?;
        let normed = fused::rms_norm(&x, &self.norm_mlp, cfg.rms_eps)?;
        let hidden = fused::gelu(&dense(&normed, &self.mlp_up)?)?;
        x + dense(&hidden, &self.mlp_down)?
    }
}
