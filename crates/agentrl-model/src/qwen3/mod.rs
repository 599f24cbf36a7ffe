//! The Llama-family decoder (Qwen3, Qwen2, Llama: [`Architecture`]) as the project's own candle
//! module, named after Qwen3, the first model it served: HF weight names, HF safetensors in and out,
//! differentiable end to end (so the trainer can backprop through it), plus a separate
//! KV-cached incremental path for decoding.
//!
//! Where it sits: an HF model folder → [`Qwen3::load`] → logits for the trainer (through
//! [`crate::Policy`]), token log-probs for scoring ([`Qwen3::score_sequence`], `agentrl score`),
//! and KV-cached decoding: a rectangular batch ([`Qwen3::forward_with_cache`]) or, for the
//! engine, a ragged batch of rows at different lengths ([`Qwen3::forward_step_ragged`]).
//!
//! Inside the model: token ids `[B, T]` → embedding → `num_hidden_layers` × (RMSNorm → attention with
//! per-head q/k RMSNorm *before* RoPE and grouped-query heads → residual → RMSNorm → SiLU-gated
//! MLP → residual) → final RMSNorm → `lm_head` (or the tied embedding) → logits `[B, T, V]`.
//! This mirrors transformers' `modeling_qwen3.py`; `head_dim` comes from the config and need not
//! equal `hidden_size / num_attention_heads`.
//!
//! Two forward modes ([`ForwardMode`]): `Train` uses only ops that record a backward pass
//! (`ops::softmax`, `rms_norm_slow`, a hand-written rotary), because candle's fused
//! `softmax_last_dim`, `ops::rms_norm` and `rope*` silently drop gradients (see
//! shared/DESIGN.md, "candle"). `Inference` may use the fused kernels and must only be used when
//! no gradient is needed (scoring, sampling).
//!
//! Batches are unpadded or right-padded: attention is causal, so positions before a pad never
//! see it, and log-probs of real tokens are exact.
//!
//! Layout: `config.rs` ([`Qwen3Config`], the HF `config.json`), `model.rs` ([`Qwen3`], its
//! weights and forward passes), `cache.rs` ([`KvCache`], the rectangular decoding state),
//! `ragged.rs` ([`RaggedKvCache`] and the ragged decoding step), `checkpoint.rs` (gradient
//! checkpointing of the update's forward).

mod cache;
mod checkpoint;
mod config;
mod model;
mod ragged;

pub use cache::KvCache;
pub use checkpoint::CheckpointedLayers;
pub use config::{Architecture, Qwen3Config, RopeScaling};
pub use model::{gather_logprobs, ForwardMode, LoadOptions, Qwen3};
pub use ragged::RaggedKvCache;
