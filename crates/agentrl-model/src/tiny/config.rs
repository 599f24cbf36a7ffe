//! TinyAgent's shape: [`TinyConfig`], the hyperparameters that fix every weight's size.
//!
//! Data flow: the trainer's config (or a test) builds one, usually with
//! [`TinyConfig::for_vocab`] over the tiny codec's vocabulary; [`super::TinyAgent::new`] checks
//! it with [`TinyConfig::validate`] and sizes its weights from it, and [`super::KvCache::new`]
//! sizes the cache from it.

use serde::{Deserialize, Serialize};

/// TinyAgent's shape. [`TinyConfig::for_vocab`] gives the shape sized for a 2-core CPU
/// (about 160k parameters) over a given vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinyConfig {
    /// Output/input vocabulary size (set from the tiny tokenizer).
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// MLP hidden width = `mlp_ratio * d_model`.
    pub mlp_ratio: usize,
    /// Longest sequence (number of learned positions).
    pub max_seq: usize,
    pub rms_eps: f64,
    /// Pointer head: the ids of the candidate markers `C0, C1, …`; empty means no pointer head.
    /// See [`TinyAgent`](super::TinyAgent) ("Pointer head").
    pub pointer_markers: Vec<u32>,
    /// The token that closes the segment holding the candidates (the task observation's
    /// `</obs>`); pointer logits apply from its position on.
    pub pointer_segment_end: u32,
}

impl TinyConfig {
    /// The default shape (d 64, 2 layers, 4 heads) over a vocabulary of `vocab_size` words;
    /// the vocabulary comes from the codec (`agentrl_chat::tiny`), which this crate does not
    /// know about.
    pub fn for_vocab(vocab_size: usize) -> Self {
        Self {
            vocab_size,
            d_model: 64,
            n_layers: 2,
            n_heads: 4,
            mlp_ratio: 4,
            max_seq: 512,
            rms_eps: 1e-5,
            pointer_markers: Vec::new(),
            pointer_segment_end: 0,
        }
    }
}

impl TinyConfig {
    /// Checks that the shape makes sense; names the field at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.vocab_size > 0, "tiny config: vocab_size must be > 0");
        anyhow::ensure!(self.d_model > 0, "tiny config: d_model must be > 0");
        anyhow::ensure!(self.n_layers > 0, "tiny config: n_layers must be > 0");
        anyhow::ensure!(
            self.d_model.checked_rem(self.n_heads) == Some(0),
            "tiny config: n_heads ({}) must be > 0 and divide d_model ({})",
            self.n_heads,
            self.d_model
        );
        anyhow::ensure!(self.mlp_ratio > 0, "tiny config: mlp_ratio must be > 0");
        anyhow::ensure!(self.max_seq > 0, "tiny config: max_seq must be > 0");
        anyhow::ensure!(self.rms_eps > 0.0, "tiny config: rms_eps must be > 0");
        for &id in self
            .pointer_markers
            .iter()
            .chain(std::iter::once(&self.pointer_segment_end))
        {
            anyhow::ensure!(
                (id as usize) < self.vocab_size,
                "tiny config: pointer token id {id} is outside the vocabulary ({})",
                self.vocab_size
            );
        }
        anyhow::ensure!(
            !self.pointer_markers.contains(&self.pointer_segment_end),
            "tiny config: pointer_segment_end must not also be a pointer marker"
        );
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }
}
