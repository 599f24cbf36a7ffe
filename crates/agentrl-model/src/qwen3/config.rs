//! The decoder's shape: [`Qwen3Config`], read from (and written as) an HF `config.json`, or from
//! a GGUF file's metadata ([`crate::gguf`]).
//!
//! One Llama-family decoder serves three architectures; what differs between them is data here,
//! not code elsewhere ([`Architecture`]): Qwen3's per-head q/k RMSNorm, Qwen2's q/k/v biases,
//! and Llama's neither. Tied embeddings and rope scaling ([`RopeScaling`]) are per model.
//!
//! Data flow: a model folder's `config.json` → [`Qwen3Config::from_file`] (unsupported options
//! are errors, not silently different math) → [`super::Qwen3::load`] checks every tensor's
//! shape against [`Qwen3Config::weight_shapes`]; [`super::Qwen3::save`] writes it back with
//! [`Qwen3Config::to_hf_json`] so transformers can load the folder.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// Which member of the Llama family a network is; each differs from Llama by one thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// transformers' `modeling_llama.py` (SmolLM2, Llama 2/3, Mistral without sliding window).
    Llama,
    /// Llama plus biases on the q, k and v projections (`modeling_qwen2.py`).
    Qwen2,
    /// Llama plus a per-head RMSNorm on queries and keys before RoPE (`modeling_qwen3.py`).
    Qwen3,
}

impl Architecture {
    /// From `config.json`'s `architectures[0]` (or `model_type`).
    pub fn from_hf_name(name: &str) -> Option<Self> {
        match name {
            "LlamaForCausalLM" | "llama" | "MistralForCausalLM" | "mistral" => Some(Self::Llama),
            "Qwen2ForCausalLM" | "qwen2" => Some(Self::Qwen2),
            "Qwen3ForCausalLM" | "qwen3" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// From a GGUF file's `general.architecture`.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// transformers' class name, written to `config.json`'s `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// `config.json`'s `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// Whether queries and keys get a per-head RMSNorm before RoPE (`q_norm`, `k_norm`).
    pub fn qk_norm(self) -> bool {
        self == Self::Qwen3
    }

    /// Whether the q, k and v projections carry biases.
    pub fn qkv_bias(self) -> bool {
        self == Self::Qwen2
    }
}

/// How RoPE's frequencies are rescaled for long contexts (`config.json`'s `rope_scaling`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (`rope_type = "linear"`).
    Linear { factor: f64 },
    /// Llama 3.1's frequency-dependent rule (`rope_type = "llama3"`, transformers'
    /// `_compute_llama3_parameters`).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// Parses an HF `rope_scaling` (or `rope_parameters`) object; `None` for the default rule.
    pub fn from_hf(value: &serde_json::Value) -> Result<Option<Self>> {
        if value.is_null() {
            return Ok(None);
        }
        let kind = value
            .get("rope_type")
            .or_else(|| value.get("type"))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let number = |key: &str| -> Result<f64> {
            value
                .get(key)
                .and_then(|v| v.as_f64())
                .with_context(|| format!("rope_scaling ({kind}) needs a number `{key}`"))
        };
        match kind {
            "default" => Ok(None),
            "linear" => Ok(Some(Self::Linear {
                factor: number("factor")?,
            })),
            "llama3" => Ok(Some(Self::Llama3 {
                factor: number("factor")?,
                low_freq_factor: number("low_freq_factor")?,
                high_freq_factor: number("high_freq_factor")?,
                original_max_position_embeddings: number("original_max_position_embeddings")?,
            })),
            other => bail!(
                "rope_scaling type {other:?} is not supported (supported: default, linear, llama3)"
            ),
        }
    }

    /// The HF `rope_scaling` object.
    pub fn to_hf(self) -> serde_json::Value {
        match self {
            Self::Linear { factor } => serde_json::json!({"rope_type": "linear", "factor": factor}),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => serde_json::json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
        }
    }

    /// Rescales one inverse frequency (in f64, as transformers computes it before casting).
    pub fn apply(self, inv_freq: f64) -> f64 {
        match self {
            Self::Linear { factor } => inv_freq / factor,
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old_context,
            } => {
                let low_freq_wavelen = old_context / low_freq_factor;
                let high_freq_wavelen = old_context / high_freq_factor;
                let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
                if wavelen < high_freq_wavelen {
                    inv_freq
                } else if wavelen > low_freq_wavelen {
                    inv_freq / factor
                } else {
                    let smooth = (old_context / wavelen - low_freq_factor)
                        / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
                }
            }
        }
    }
}

/// The fields of an HF `config.json` that define a Llama-family network (the name is Qwen3's,
/// the first architecture this decoder served).
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Config {
    pub architecture: Architecture,
    pub rope_scaling: Option<RopeScaling>,
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
    #[serde(default)]
    architectures: Vec<String>,
    model_type: Option<String>,
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
    /// transformers 5.x: `{"rope_theta": …, "rope_type": …, <scaling fields>}`.
    rope_parameters: Option<serde_json::Value>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default = "default_max_positions")]
    max_position_embeddings: usize,
    attention_bias: Option<bool>,
    #[serde(default)]
    mlp_bias: bool,
    hidden_act: Option<String>,
    #[serde(default)]
    use_sliding_window: bool,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_max_positions() -> usize {
    40960
}

impl Qwen3Config {
    /// Reads and validates `config.json`; unsupported options (an architecture outside the
    /// Llama family, biases it does not have, other rope scaling, sliding window, other
    /// activations) are errors rather than silently different math.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in {}", path.display()))
    }

    /// The config of a model: a folder's `config.json`, or a GGUF file's metadata.
    pub fn from_model_path(path: &Path) -> Result<Self> {
        if crate::gguf::is_gguf_file(path) {
            crate::gguf::read_config(path)
        } else {
            Self::from_file(&path.join("config.json"))
        }
    }

    /// Parses the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawConfig = serde_json::from_str(text).context("parsing config.json")?;
        let named = raw
            .architectures
            .first()
            .cloned()
            .or_else(|| raw.model_type.clone())
            .unwrap_or_else(|| "Qwen3ForCausalLM".to_string());
        let architecture = Architecture::from_hf_name(&named).with_context(|| {
            format!(
                "architecture {named:?} is not supported (LlamaForCausalLM, Qwen2ForCausalLM, \
                 Qwen3ForCausalLM)"
            )
        })?;
        // Qwen2 always has q/k/v biases and no `attention_bias` key; the others have none
        // unless the key says so, which this decoder does not implement.
        if raw.attention_bias == Some(true) && architecture != Architecture::Qwen2 {
            bail!("attention_bias = true is not supported for {named}");
        }
        if raw.mlp_bias {
            bail!("mlp_bias = true is not supported");
        }
        if let Some(act) = &raw.hidden_act {
            if act != "silu" {
                bail!("hidden_act {act:?} is not supported (only \"silu\")");
            }
        }
        if raw.use_sliding_window {
            bail!("use_sliding_window = true is not supported");
        }
        let mut rope_theta = raw.rope_theta;
        let mut rope_scaling = match &raw.rope_scaling {
            Some(value) => RopeScaling::from_hf(value)?,
            None => None,
        };
        if let Some(params) = &raw.rope_parameters {
            rope_theta = rope_theta.or(params.get("rope_theta").and_then(|v| v.as_f64()));
            if rope_scaling.is_none() {
                rope_scaling = RopeScaling::from_hf(params)?;
            }
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
            architecture,
            rope_scaling,
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
            "architectures": [self.architecture.hf_class()],
            "model_type": self.architecture.model_type(),
            "attention_bias": self.architecture.qkv_bias(),
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
            "rope_scaling": self.rope_scaling.map(RopeScaling::to_hf),
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": false,
            "sliding_window": null,
            "torch_dtype": "float32",
        })
    }

    /// RoPE's inverse frequencies, `head_dim / 2` of them: `theta^(-2i/d)` in f32 as
    /// transformers computes them, rescaled by [`RopeScaling`] when the model has one.
    pub fn inv_freq(&self) -> Vec<f32> {
        (0..self.head_dim / 2)
            .map(|i| {
                let exponent = (2 * i) as f32 / self.head_dim as f32;
                let inv = 1.0 / (self.rope_theta as f32).powf(exponent);
                match self.rope_scaling {
                    None => inv,
                    Some(scaling) => scaling.apply(f64::from(inv)) as f32,
                }
            })
            .collect()
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
                (format!("{p}.post_attention_layernorm.weight"), vec![h]),
                (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
            ]);
            if self.architecture.qk_norm() {
                shapes.push((format!("{p}.self_attn.q_norm.weight"), vec![hd]));
                shapes.push((format!("{p}.self_attn.k_norm.weight"), vec![hd]));
            }
            if self.architecture.qkv_bias() {
                shapes.push((format!("{p}.self_attn.q_proj.bias"), vec![nq * hd]));
                shapes.push((format!("{p}.self_attn.k_proj.bias"), vec![nkv * hd]));
                shapes.push((format!("{p}.self_attn.v_proj.bias"), vec![nkv * hd]));
            }
        }
        shapes.push(("model.norm.weight".to_string(), vec![h]));
        if !self.tie_word_embeddings {
            shapes.push(("lm_head.weight".to_string(), vec![self.vocab_size, h]));
        }
        shapes
    }
}
