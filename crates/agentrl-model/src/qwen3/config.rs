//! The Qwen3 network's shape: [`Qwen3Config`], read from (and written as) an HF `config.json`.
//!
//! Data flow: a model folder's `config.json` → [`Qwen3Config::from_file`] (unsupported options
//! are errors, not silently different math) → [`super::Qwen3::load`] checks every tensor's
//! shape against [`Qwen3Config::weight_shapes`]; [`super::Qwen3::save`] writes it back with
//! [`Qwen3Config::to_hf_json`] so transformers can load the folder.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The fields of an HF `config.json` that define a Qwen3 network.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: usize,
}

/// `config.json` as written by transformers 4.x (`rope_theta` at top level) or 5.x
/// (`rope_parameters.rope_theta`).
#[derive(Debug, Deserialize)]
struct RawConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<RawRopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default = "default_max_positions")]
    max_position_embeddings: usize,
    #[serde(default)]
    attention_bias: bool,
    hidden_act: Option<String>,
    #[serde(default)]
    use_sliding_window: bool,
}

#[derive(Debug, Deserialize)]
struct RawRopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_max_positions() -> usize {
    40960
}

impl Qwen3Config {
    /// Reads and validates `config.json`; unsupported options (bias, rope scaling, sliding
    /// window, other activations) are errors rather than silently different math.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawConfig = serde_json::from_str(text).context("parsing Qwen3 config.json")?;
        if raw.attention_bias {
            bail!("attention_bias = true is not supported (Qwen3 has none)");
        }
        if let Some(act) = &raw.hidden_act {
            if act != "silu" {
                bail!("hidden_act {act:?} is not supported (only \"silu\")");
            }
        }
        if raw.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            bail!("rope_scaling is not supported");
        }
        if raw.use_sliding_window {
            bail!("use_sliding_window = true is not supported");
        }
        let mut rope_theta = raw.rope_theta;
        if let Some(params) = &raw.rope_parameters {
            if let Some(kind) = &params.rope_type {
                if kind != "default" {
                    bail!("rope_parameters.rope_type {kind:?} is not supported");
                }
            }
            rope_theta = rope_theta.or(params.rope_theta);
        }
        let num_key_value_heads = raw.num_key_value_heads.unwrap_or(raw.num_attention_heads);
        if raw.num_attention_heads == 0
            || num_key_value_heads == 0
            || raw.num_attention_heads % num_key_value_heads != 0
        {
            bail!(
                "num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})",
                raw.num_attention_heads,
                num_key_value_heads
            );
        }
        let head_dim = raw
            .head_dim
            .unwrap_or(raw.hidden_size / raw.num_attention_heads);
        if head_dim == 0 || head_dim % 2 != 0 {
            bail!("head_dim must be positive and even for rotary embeddings, got {head_dim}");
        }
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta: rope_theta.unwrap_or(10_000.0),
            tie_word_embeddings: raw.tie_word_embeddings,
            max_position_embeddings: raw.max_position_embeddings,
        })
    }

    /// The config as an HF `config.json` object (transformers-loadable).
    pub fn to_hf_json(&self) -> serde_json::Value {
        serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "attention_bias": false,
            "attention_dropout": 0.0,
            "hidden_act": "silu",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": null,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": false,
            "sliding_window": null,
            "torch_dtype": "float32",
        })
    }

    /// Every weight of the network: HF name and shape.
    pub fn weight_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i, hd) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let (nq, nkv) = (self.num_attention_heads, self.num_key_value_heads);
        let mut shapes = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![self.vocab_size, h],
        )];
        for layer in 0..self.num_hidden_layers {
            let p = format!("model.layers.{layer}");
            shapes.extend([
                (format!("{p}.input_layernorm.weight"), vec![h]),
                (format!("{p}.self_attn.q_proj.weight"), vec![nq * hd, h]),
                (format!("{p}.self_attn.k_proj.weight"), vec![nkv * hd, h]),
                (format!("{p}.self_attn.v_proj.weight"), vec![nkv * hd, h]),
                (format!("{p}.self_attn.o_proj.weight"), vec![h, nq * hd]),
                (format!("{p}.self_attn.q_norm.weight"), vec![hd]),
                (format!("{p}.self_attn.k_norm.weight"), vec![hd]),
                (format!("{p}.post_attention_layernorm.weight"), vec![h]),
                (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
            ]);
        }
        shapes.push(("model.norm.weight".to_string(), vec![h]));
        if !self.tie_word_embeddings {
            shapes.push(("lm_head.weight".to_string(), vec![self.vocab_size, h]));
        }
        shapes
    }
}
