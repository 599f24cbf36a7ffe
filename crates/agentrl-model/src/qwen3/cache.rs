//! Qwen3's decoding state: [`KvCache`], every layer's keys and values (after RoPE) for the
//! positions seen so far.
//!
//! Data flow: created empty by the caller (the engine, a scorer), extended by
//! [`super::Qwen3::forward_with_cache`] with every fed token; the training forward never uses it.

use candle_core::Tensor;

/// Keys and values of every layer for the positions seen so far, `[B, kv_heads, S, head_dim]`
/// each, after RoPE. Owned by the caller, so the model itself has no hidden state.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    pub(super) layers: Vec<Option<(Tensor, Tensor)>>,
    pub(super) len: usize,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of positions already cached (the position of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
