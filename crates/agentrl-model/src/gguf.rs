//! GGUF model files (llama.cpp's format) as the decoder's config and HF-named f32/bf16 tensors.
//!
//! Where it sits: a `.gguf` path given as `--model` → [`read_model`] → [`Qwen3Config`] and the
//! tensors [`crate::qwen3::Qwen3::from_tensors`] is built from, exactly as from an HF folder.
//! candle's `gguf_file` parses the file and dequantizes each tensor (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, the K-quants, F16, BF16 and F32 alike) to f32 on the CPU; the trainer's dtype is then
//! whatever `dtype` asks. The trainer never runs a quantized kernel: llama.cpp's and candle's
//! quantized matmuls round activations to 8 bits, which moves log-probs by far more than the
//! 1e-4 the trainer is held to (the measured gap is in `experiments/smollm2-phenomena.md`).
//!
//! Two things differ from HF's layout and are undone here:
//! * **Names**: `token_embd`, `blk.N.attn_q`, `ffn_gate`, `output_norm`, … ([`hf_name`]).
//! * **Llama's q/k rows**: llama.cpp's converter permutes the rows of `attn_q` and `attn_k` of
//!   a `llama` model so that its interleaved RoPE applies (`convert_hf_to_gguf.py`'s
//!   `LlamaModel.permute`); [`unpermute_rows`] restores HF's half-split layout, as transformers'
//!   GGUF loader does (`reverse_permute_weights`). Qwen2 and Qwen3 files are not permuted.
//!
//! The config comes from `{arch}.*` metadata keys (`block_count`, `embedding_length`,
//! `attention.head_count_kv`, `rope.freq_base`, …); an untied output projection is the
//! presence of `output.weight`.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};

use crate::qwen3::{Architecture, Qwen3Config, RopeScaling};

/// Whether `path` is a regular file that starts with GGUF's magic bytes. (The chat crate has
/// the same four-byte check: it builds without this crate, and this crate never depends on it.)
pub fn is_gguf_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut file| file.read_exact(&mut magic))
            .is_ok()
        && &magic == b"GGUF"
}

/// The GGUF metadata of one file, with errors that name the file and the key.
struct Metadata<'a> {
    content: &'a Content,
    path: &'a Path,
    arch: String,
}

impl Metadata<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn arch_key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        let full = self.arch_key(key);
        self.get(&full)
            .map(|value| {
                value
                    .to_u64()
                    .or_else(|_| value.to_u32().map(u64::from))
                    .map_err(anyhow::Error::from)
                    .and_then(|v| Ok(usize::try_from(v)?))
                    .with_context(|| format!("{}: `{full}` is not an integer", self.path.display()))
            })
            .transpose()
    }

    fn require_usize(&self, key: &str) -> Result<usize> {
        self.usize(key)?.with_context(|| {
            format!(
                "{}: GGUF metadata `{}` is missing",
                self.path.display(),
                self.arch_key(key)
            )
        })
    }

    fn f64(&self, key: &str) -> Result<Option<f64>> {
        let full = self.arch_key(key);
        self.get(&full)
            .map(|value| {
                value
                    .to_f32()
                    .map(f64::from)
                    .or_else(|_| value.to_f64())
                    .with_context(|| format!("{}: `{full}` is not a number", self.path.display()))
            })
            .transpose()
    }
}

/// The network's shape from a GGUF file's metadata (see the module doc).
pub fn config_from_content(content: &Content, path: &Path) -> Result<Qwen3Config> {
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .with_context(|| format!("{}: no `general.architecture` string", path.display()))?
        .clone();
    let architecture = Architecture::from_gguf_name(&arch).with_context(|| {
        format!(
            "{}: general.architecture {arch:?} is not supported (llama, qwen2, qwen3)",
            path.display()
        )
    })?;
    let meta = Metadata {
        content,
        path,
        arch,
    };
    let hidden_size = meta.require_usize("embedding_length")?;
    let num_attention_heads = meta.require_usize("attention.head_count")?;
    let num_key_value_heads = meta
        .usize("attention.head_count_kv")?
        .unwrap_or(num_attention_heads);
    if num_attention_heads == 0
        || num_key_value_heads == 0
        || num_attention_heads % num_key_value_heads != 0
    {
        bail!(
            "{}: attention.head_count ({num_attention_heads}) must be a positive multiple of \
             attention.head_count_kv ({num_key_value_heads})",
            path.display()
        );
    }
    let head_dim = meta
        .usize("attention.key_length")?
        .unwrap_or(hidden_size / num_attention_heads);
    let embedding = content
        .tensor_infos
        .get("token_embd.weight")
        .with_context(|| format!("{}: no tensor `token_embd.weight`", path.display()))?;
    let vocab_size = match meta.usize("vocab_size")? {
        Some(size) => size,
        None => embedding.shape.dims()[0],
    };
    let rope_scaling = match meta
        .get(&meta.arch_key("rope.scaling.type"))
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
    {
        None | Some("none") => None,
        Some("linear") => Some(RopeScaling::Linear {
            factor: meta.f64("rope.scaling.factor")?.with_context(|| {
                format!("{}: linear rope scaling without a factor", path.display())
            })?,
        }),
        Some(other) => bail!(
            "{}: rope scaling {other:?} is not supported (none, linear)",
            path.display()
        ),
    };
    if content.tensor_infos.contains_key("rope_freqs.weight") {
        bail!(
            "{}: per-frequency rope factors (`rope_freqs.weight`, Llama 3.1) are not supported",
            path.display()
        );
    }
    Ok(Qwen3Config {
        architecture,
        rope_scaling,
        vocab_size,
        hidden_size,
        intermediate_size: meta.require_usize("feed_forward_length")?,
        num_hidden_layers: meta.require_usize("block_count")?,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: meta
            .f64("attention.layer_norm_rms_epsilon")?
            .unwrap_or(1e-6),
        rope_theta: meta.f64("rope.freq_base")?.unwrap_or(10_000.0),
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        max_position_embeddings: meta.usize("context_length")?.unwrap_or(4096),
    })
}

/// The HF name of a GGUF tensor (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`),
/// or `None` for a tensor this decoder has no use for.
pub fn hf_name(gguf_name: &str) -> Option<String> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let module = match module {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{kind}"))
}

/// Undoes llama.cpp's row permutation of a `llama` model's q or k projection `[out, in]`
/// (`heads` = query or key/value heads): rows `(head, pair, 2)` go back to `(head, 2, pair)`,
/// so each head's first half of dimensions precedes its second half, as HF's RoPE expects.
pub fn unpermute_rows(weight: &Tensor, heads: usize) -> Result<Tensor> {
    let dims = weight.dims().to_vec();
    let out = dims[0];
    if heads == 0 || out % (2 * heads) != 0 {
        bail!("cannot un-permute {out} rows into {heads} heads of rotary pairs");
    }
    let half = out / heads / 2;
    let rest: usize = dims[1..].iter().product();
    Ok(weight
        .reshape((heads, half, 2, rest))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)?)
}

/// The config of a GGUF model file, from its header alone (no tensor is read).
pub fn read_config(path: &Path) -> Result<Qwen3Config> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let content = Content::read(&mut BufReader::new(file))
        .with_context(|| format!("{}: not a readable GGUF file", path.display()))?;
    config_from_content(&content, path)
}

/// Reads a GGUF model: its config and every tensor under its HF name, dequantized to f32 and
/// converted to `dtype` on `device`. Errors name the file and the tensor.
pub fn read_model(
    path: &Path,
    dtype: DType,
    device: &Device,
) -> Result<(Qwen3Config, HashMap<String, Tensor>)> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader)
        .with_context(|| format!("{}: not a readable GGUF file", path.display()))?;
    let config = config_from_content(&content, path)?;
    let permuted = config.architecture == Architecture::Llama;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = HashMap::with_capacity(names.len());
    for gguf_name in names {
        let Some(name) = hf_name(gguf_name) else {
            continue;
        };
        let quantized = content
            .tensor(&mut reader, gguf_name, &Device::Cpu)
            .with_context(|| format!("{}: reading tensor `{gguf_name}`", path.display()))?;
        let mut tensor = quantized.dequantize(&Device::Cpu).with_context(|| {
            format!(
                "{}: dequantizing tensor `{gguf_name}` ({:?})",
                path.display(),
                quantized.dtype()
            )
        })?;
        if permuted && gguf_name.ends_with(".weight") {
            if gguf_name.contains(".attn_q.") {
                tensor = unpermute_rows(&tensor, config.num_attention_heads)?;
            } else if gguf_name.contains(".attn_k.") {
                tensor = unpermute_rows(&tensor, config.num_key_value_heads)?;
            }
        }
        tensors.insert(name, tensor.to_dtype(dtype)?.to_device(device)?);
    }
    Ok((config, tensors))
}
