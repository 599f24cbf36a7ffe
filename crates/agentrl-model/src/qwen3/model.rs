//! The Qwen3 causal language model ([`Qwen3`]): weights, load/save in HF and PEFT layouts, LoRA,
//! and the forward passes (differentiable training, fused inference, KV-cached decoding).
//!
//! Data flow: see the [`super`] module doc; this file is the code of that data flow, from token
//! ids to logits and token log-probs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, TensorId, Var, D};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{KvCache, Qwen3Config};
use crate::fused::amx_matmul::{self, PackedWeight};
use crate::fused::thin_matmul::{self, ThinWeight};
use crate::lora::{self, Factor, LoraConfig, LoraWeights};
use crate::weights;

/// Which kernels the forward pass may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardMode {
    /// Differentiable ops only: every parameter receives its gradient.
    Train,
    /// Fused, faster kernels that record no backward pass. Only for scoring and sampling.
    Inference,
}

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Compute and storage dtype (checkpoints are converted on load).
    pub dtype: DType,
    pub device: Device,
    /// Register the base weights as trainable variables. Off for inference and for LoRA
    /// training, where the base stays frozen.
    pub trainable: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            dtype: DType::F32,
            device: Device::Cpu,
            trainable: false,
        }
    }
}

/// A linear layer `y = x W^T (+ b)`, optionally with a LoRA update. Only Qwen2's q, k and v
/// projections have a bias.
#[derive(Debug, Clone)]
pub(super) struct Linear {
    /// `[out, in]`, HF layout; frozen on the CPU, a view of `[in, out]` storage
    /// ([`matmul_layout`]).
    weight: Tensor,
    /// `[out]`.
    bias: Option<Tensor>,
    /// The same frozen weight packed for the AMX path ([`Qwen3::pack_for_amx`]), when it applies.
    packed: Option<Arc<PackedWeight>>,
    /// The same frozen weight packed for decoding's few-row products ([`ThinSlot`]).
    thin: ThinSlot,
    lora: Option<LoraWeights>,
}

impl Linear {
    /// `x: [N, in]` → `[N, out]`.
    pub(super) fn forward(&self, x: &Tensor, mode: ForwardMode) -> Result<Tensor> {
        let base = frozen_matmul(x, &self.weight, self.packed.as_deref(), &self.thin, mode)?;
        let base = match &self.bias {
            None => base,
            Some(bias) => base.broadcast_add(bias)?,
        };
        match &self.lora {
            None => Ok(base),
            Some(lora) => Ok((base + lora.delta(x)?)?),
        }
    }

    fn dims(&self) -> Result<(usize, usize)> {
        let (out_features, in_features) = self.weight.dims2()?;
        Ok((in_features, out_features))
    }
}

#[derive(Debug, Clone)]
pub(super) struct Attention {
    pub(super) q_proj: Linear,
    pub(super) k_proj: Linear,
    pub(super) v_proj: Linear,
    pub(super) o_proj: Linear,
    /// Qwen3's per-head RMSNorm weights (`None` for Llama and Qwen2).
    pub(super) q_norm: Option<Tensor>,
    pub(super) k_norm: Option<Tensor>,
}

#[derive(Debug, Clone)]
pub(super) struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

#[derive(Debug, Clone)]
pub(super) struct DecoderLayer {
    pub(super) input_layernorm: Tensor,
    pub(super) self_attn: Attention,
    post_attention_layernorm: Tensor,
    mlp: Mlp,
}

/// The Qwen3 causal language model.
#[derive(Debug, Clone)]
pub struct Qwen3 {
    pub(super) config: Qwen3Config,
    pub(super) embed_tokens: Tensor,
    pub(super) layers: Vec<DecoderLayer>,
    pub(super) norm: Tensor,
    /// `None` when the output projection is tied to `embed_tokens`.
    lm_head: Option<Tensor>,
    /// The output projection (tied or not) packed for the AMX path, when it applies.
    head_packed: Option<Arc<PackedWeight>>,
    /// The output projection packed for decoding's few-row products ([`ThinSlot`]).
    head_thin: ThinSlot,
    /// RoPE inverse frequencies, `head_dim / 2` of them, computed in f32 as transformers does.
    pub(super) inv_freq: Vec<f32>,
    /// Base weights registered as variables (empty when the base is frozen).
    base_vars: Vec<(String, Var)>,
    /// For an inference copy of a model with a frozen base: the ids of the source's base
    /// tensors it was copied from. A frozen tensor never changes, so while the source still
    /// holds the same ones, [`Qwen3::copy_weights_from`] keeps this copy's base (and its AMX
    /// packing) and refreshes only the adapters.
    base_source: Option<Vec<TensorId>>,
    /// The update's forward keeps one decoder layer's activations at a time
    /// ([`Qwen3::set_gradient_checkpointing`], `super::checkpoint`).
    pub(super) gradient_checkpointing: bool,
    pub(super) dtype: DType,
    pub(super) device: Device,
}

impl Qwen3 {
    /// Loads an HF model folder (`config.json` plus `model.safetensors` or a sharded
    /// `model.safetensors.index.json`), or a GGUF file ([`crate::gguf`]: its metadata is the
    /// config, its tensors are dequantized to `options.dtype`).
    pub fn load(dir: &Path, options: &LoadOptions) -> Result<Self> {
        if crate::gguf::is_gguf_file(dir) {
            let (config, tensors) = crate::gguf::read_model(dir, options.dtype, &options.device)?;
            return Self::from_tensors(config, tensors, options, dir);
        }
        let config = Qwen3Config::from_file(&dir.join("config.json"))?;
        let tensors = weights::load_folder(dir, options.dtype, &options.device)?;
        Self::from_tensors(config, tensors, options, dir)
    }

    /// Builds the model from HF-named tensors (already in the wanted dtype and device).
    /// `source` only names where the tensors came from, for error messages.
    pub fn from_tensors(
        config: Qwen3Config,
        mut tensors: HashMap<String, Tensor>,
        options: &LoadOptions,
        source: &Path,
    ) -> Result<Self> {
        let mut base_vars = Vec::new();
        let mut take = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let tensor = weights::take(&mut tensors, name, source)?
                .to_dtype(options.dtype)?
                .to_device(&options.device)?;
            if tensor.dims() != shape {
                bail!(
                    "{}: tensor `{name}` has shape {:?}, config.json implies {shape:?}",
                    source.display(),
                    tensor.dims()
                );
            }
            if options.trainable {
                let var = Var::from_tensor(&tensor)?;
                let shared = var.as_tensor().clone();
                base_vars.push((name.to_string(), var));
                Ok(shared)
            } else {
                Ok(tensor)
            }
        };
        let shapes: HashMap<String, Vec<usize>> = config.weight_shapes().into_iter().collect();
        let mut get = |name: String| -> Result<Tensor> {
            let shape = shapes
                .get(&name)
                .with_context(|| format!("internal: no shape for {name}"))?;
            take(&name, shape)
        };
        let frozen_cpu = !options.trainable && options.device.is_cpu();
        let for_matmul = |weight: Tensor| matmul_layout(weight, frozen_cpu);
        let linear = |weight: Tensor, bias: Option<Tensor>| -> Result<Linear> {
            Ok(Linear {
                weight: for_matmul(weight)?,
                bias,
                packed: None,
                thin: ThinSlot::default(),
                lora: None,
            })
        };
        let (qk_norm, qkv_bias) = (
            config.architecture.qk_norm(),
            config.architecture.qkv_bias(),
        );
        let embed_tokens = get("model.embed_tokens.weight".into())?;
        // Tied, the embedding is also the output projection, the largest matmul of a small
        // Qwen3; a lookup reads one column of the transposed storage per token instead.
        let embed_tokens = if config.tie_word_embeddings {
            for_matmul(embed_tokens)?
        } else {
            embed_tokens
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for layer in 0..config.num_hidden_layers {
            let p = format!("model.layers.{layer}");
            layers.push(DecoderLayer {
                input_layernorm: get(format!("{p}.input_layernorm.weight"))?,
                self_attn: Attention {
                    q_proj: linear(
                        get(format!("{p}.self_attn.q_proj.weight"))?,
                        optional(&mut get, qkv_bias, format!("{p}.self_attn.q_proj.bias"))?,
                    )?,
                    k_proj: linear(
                        get(format!("{p}.self_attn.k_proj.weight"))?,
                        optional(&mut get, qkv_bias, format!("{p}.self_attn.k_proj.bias"))?,
                    )?,
                    v_proj: linear(
                        get(format!("{p}.self_attn.v_proj.weight"))?,
                        optional(&mut get, qkv_bias, format!("{p}.self_attn.v_proj.bias"))?,
                    )?,
                    o_proj: linear(get(format!("{p}.self_attn.o_proj.weight"))?, None)?,
                    q_norm: optional(&mut get, qk_norm, format!("{p}.self_attn.q_norm.weight"))?,
                    k_norm: optional(&mut get, qk_norm, format!("{p}.self_attn.k_norm.weight"))?,
                },
                post_attention_layernorm: get(format!("{p}.post_attention_layernorm.weight"))?,
                mlp: Mlp {
                    gate_proj: linear(get(format!("{p}.mlp.gate_proj.weight"))?, None)?,
                    up_proj: linear(get(format!("{p}.mlp.up_proj.weight"))?, None)?,
                    down_proj: linear(get(format!("{p}.mlp.down_proj.weight"))?, None)?,
                },
            });
        }
        let norm = get("model.norm.weight".into())?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(for_matmul(get("lm_head.weight".into())?)?)
        };
        let inv_freq = config.inv_freq();
        Ok(Self {
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            head_packed: None,
            head_thin: ThinSlot::default(),
            inv_freq,
            base_vars,
            base_source: None,
            gradient_checkpointing: false,
            dtype: options.dtype,
            device: options.device.clone(),
        })
    }

    /// A model with seeded random weights: linear and embedding weights uniform with standard
    /// deviation `std`, norm weights one. Used for benches and end-to-end tests.
    pub fn random(config: Qwen3Config, seed: u64, std: f32, options: &LoadOptions) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let bound = std * 3f32.sqrt();
        let mut tensors = HashMap::new();
        for (name, shape) in config.weight_shapes() {
            let count: usize = shape.iter().product();
            let values: Vec<f32> = if name.ends_with("norm.weight") || name.ends_with(".bias") {
                vec![1.0; count]
            } else {
                (0..count)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect()
            };
            let tensor = Tensor::from_vec(values, shape, &Device::Cpu)?;
            tensors.insert(name, tensor);
        }
        Self::from_tensors(config, tensors, options, Path::new("<random>"))
    }

    /// Writes an HF model folder (`config.json` + `model.safetensors`) that transformers and
    /// [`Qwen3::load`] read back. LoRA adapters are not included (see [`Qwen3::save_lora_peft`]).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config_path = dir.join("config.json");
        std::fs::write(
            &config_path,
            serde_json::to_string_pretty(&self.config.to_hf_json())?,
        )
        .with_context(|| format!("writing {}", config_path.display()))?;
        let tensors: HashMap<String, Tensor> = self.named_weights().into_iter().collect();
        weights::save_file(&tensors, &dir.join(weights::SINGLE_FILE))
    }

    pub fn config(&self) -> &Qwen3Config {
        &self.config
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Every base weight with its HF name.
    pub fn named_weights(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![(
            "model.embed_tokens.weight".to_string(),
            self.embed_tokens.clone(),
        )];
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &layer.self_attn;
            let m = &layer.mlp;
            out.extend([
                (
                    format!("{p}.input_layernorm.weight"),
                    layer.input_layernorm.clone(),
                ),
                (
                    format!("{p}.self_attn.q_proj.weight"),
                    a.q_proj.weight.clone(),
                ),
                (
                    format!("{p}.self_attn.k_proj.weight"),
                    a.k_proj.weight.clone(),
                ),
                (
                    format!("{p}.self_attn.v_proj.weight"),
                    a.v_proj.weight.clone(),
                ),
                (
                    format!("{p}.self_attn.o_proj.weight"),
                    a.o_proj.weight.clone(),
                ),
                (
                    format!("{p}.post_attention_layernorm.weight"),
                    layer.post_attention_layernorm.clone(),
                ),
                (
                    format!("{p}.mlp.gate_proj.weight"),
                    m.gate_proj.weight.clone(),
                ),
                (format!("{p}.mlp.up_proj.weight"), m.up_proj.weight.clone()),
                (
                    format!("{p}.mlp.down_proj.weight"),
                    m.down_proj.weight.clone(),
                ),
            ]);
            for (name, norm) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
                if let Some(norm) = norm {
                    out.push((format!("{p}.self_attn.{name}.weight"), norm.clone()));
                }
            }
            for (name, proj) in [
                ("q_proj", &a.q_proj),
                ("k_proj", &a.k_proj),
                ("v_proj", &a.v_proj),
            ] {
                if let Some(bias) = &proj.bias {
                    out.push((format!("{p}.self_attn.{name}.bias"), bias.clone()));
                }
            }
        }
        out.push(("model.norm.weight".to_string(), self.norm.clone()));
        if let Some(head) = &self.lm_head {
            out.push(("lm_head.weight".to_string(), head.clone()));
        }
        out
    }

    /// The trainable base weights (empty unless loaded with `trainable: true`).
    pub fn base_vars(&self) -> &[(String, Var)] {
        &self.base_vars
    }

    /// The trainable LoRA factors with PEFT tensor names.
    pub fn lora_vars(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (module, linear) in self.linears() {
            if let Some(lora) = &linear.lora {
                out.push((lora::peft_tensor_name(&module, Factor::A), lora.a.clone()));
                out.push((lora::peft_tensor_name(&module, Factor::B), lora.b.clone()));
            }
        }
        out
    }

    /// Every trainable variable: the base weights (if trainable) and the LoRA factors.
    pub fn trainable_vars(&self) -> Vec<(String, Var)> {
        let mut out = self.base_vars.clone();
        out.extend(self.lora_vars());
        out
    }

    /// Packs every frozen f32 CPU weight for the AMX path ([`amx_matmul`]: bf16x3 on the
    /// CPU's tile unit), which the inference forward then uses for products of 16 rows or more.
    /// Opt-in because it trades bit-level agreement for speed: log-probs move by up to ~1e-4
    /// (3e-5 against transformers on the 0.6B shape, `bench qwen3`), the f32 path's ~1e-6, and a
    /// sequence scored alone (few rows, f32) and in a batch (AMX) then differ at that level.
    /// Costs as much memory again as the packed weights. Returns whether anything was packed:
    /// false on a CPU without AMX, for trainable or non-f32 weights, or when no weight's shape
    /// is a whole number of 32 × 32 blocks.
    pub fn pack_for_amx(&mut self) -> Result<bool> {
        let frozen_cpu = self.base_vars.is_empty() && self.device.is_cpu();
        let mut packed_any = false;
        for (_, linear) in self.linears_mut() {
            linear.packed = pack_frozen(&linear.weight, frozen_cpu)?;
            packed_any |= linear.packed.is_some();
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        self.head_packed = pack_frozen(head, frozen_cpu)?;
        Ok(packed_any || self.head_packed.is_some())
    }

    /// Whether any weight is packed for the AMX path ([`Qwen3::pack_for_amx`]), so that its
    /// inference forwards of 16 rows or more run there.
    pub fn packed_for_amx(&self) -> bool {
        self.head_packed.is_some() || self.linears().iter().any(|(_, l)| l.packed.is_some())
    }

    /// A frozen copy of this model for an inference engine: every base weight copied into
    /// storage of its own in `dtype` on `device` (so a bf16 engine can run against an f32
    /// trainer), nothing registered as trainable, and no autograd link back to this model.
    /// LoRA adapters are copied unmerged: merging them into a bf16 base would round small
    /// updates away (ENGINES.md, "Weight sync"). Later trainer updates reach the copy only
    /// through [`Qwen3::copy_weights_from`].
    pub fn inference_copy(&self, dtype: DType, device: &Device) -> Result<Qwen3> {
        let tensors = self
            .named_weights()
            .into_iter()
            .map(|(name, tensor)| Ok((name, detached_copy(&tensor, dtype, device)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        let options = LoadOptions {
            dtype,
            device: device.clone(),
            trainable: false,
        };
        let mut copy = Self::from_tensors(
            self.config.clone(),
            tensors,
            &options,
            Path::new("<inference copy>"),
        )?;
        copy.copy_adapters_from(self)?;
        copy.base_source = self.frozen_base_ids();
        Ok(copy)
    }

    /// Overwrites this inference copy (see [`Qwen3::inference_copy`]) with `source`'s current
    /// weights and adapters, keeping this copy's dtype and device, and its AMX packing
    /// ([`Qwen3::pack_for_amx`]), so an engine opted into AMX stays on it after every weight
    /// sync: how an engine-side copy catches up after a trainer update. When `source`'s base
    /// is frozen and is still the one this copy was made from (LoRA training), only the
    /// adapters are copied: the base and its packing are kept (on the 0.6B shape a full
    /// packed refresh took 4.7 s, the plain copy 0.64 s). Otherwise the base is copied, and
    /// packed again if it was.
    pub fn copy_weights_from(&mut self, source: &Qwen3) -> Result<()> {
        if !self.base_vars.is_empty() {
            bail!(
                "copy_weights_from: this model has trainable base weights; only a frozen \
                 inference copy (Qwen3::inference_copy) may be overwritten"
            );
        }
        if self.config != source.config {
            bail!(
                "copy_weights_from: the source's config differs from this copy's \
                 (source {:?}, copy {:?})",
                source.config,
                self.config
            );
        }
        if self.base_source.is_some() && self.base_source == source.frozen_base_ids() {
            return self.copy_adapters_from(source);
        }
        let device = self.device.clone();
        let amx = self.packed_for_amx();
        *self = source.inference_copy(self.dtype, &device)?;
        if amx {
            self.pack_for_amx()?;
        }
        Ok(())
    }

    /// The ids of the base tensors when the base is frozen (`None` when it is trainable: a
    /// variable keeps its id while the optimizer changes it).
    fn frozen_base_ids(&self) -> Option<Vec<TensorId>> {
        self.base_vars.is_empty().then(|| self.base_ids())
    }

    /// The ids of the base tensors, in [`Qwen3::named_weights`]' order.
    fn base_ids(&self) -> Vec<TensorId> {
        self.named_weights()
            .iter()
            .map(|(_, tensor)| tensor.id())
            .collect()
    }

    /// Whether `self` and `other` hold the very same base tensors (not copies of them): after
    /// an adapter-only [`Qwen3::copy_weights_from`], an inference copy still shares its base
    /// with a clone taken before it.
    #[doc(hidden)]
    pub fn shares_base_with(&self, other: &Qwen3) -> bool {
        self.base_ids() == other.base_ids()
    }

    /// Replaces this model's LoRA adapters by detached copies of `source`'s, in this model's
    /// dtype and on its device. LoRA adapters are copied unmerged: merging them into a bf16
    /// base would round small updates away (ENGINES.md, "Weight sync").
    fn copy_adapters_from(&mut self, source: &Qwen3) -> Result<()> {
        let (dtype, device) = (self.dtype, self.device.clone());
        let adapters: Vec<Option<LoraWeights>> = source
            .linears()
            .into_iter()
            .map(|(_, linear)| linear.lora.clone())
            .collect();
        for ((_, linear), adapter) in self.linears_mut().into_iter().zip(adapters) {
            linear.lora = match adapter {
                None => None,
                Some(adapter) => {
                    // `Var::from_tensor` of a non-variable copies into fresh storage.
                    let convert = |var: &Var| -> Result<Var> {
                        let tensor = var.as_tensor().detach().to_dtype(dtype)?;
                        Ok(Var::from_tensor(&tensor.to_device(&device)?)?)
                    };
                    Some(LoraWeights {
                        a: convert(&adapter.a)?,
                        b: convert(&adapter.b)?,
                        scale: adapter.scale,
                    })
                }
            };
        }
        Ok(())
    }

    fn linears(&self) -> Vec<(String, &Linear)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &layer.self_attn;
            let m = &layer.mlp;
            out.extend([
                (format!("{p}.self_attn.q_proj"), &a.q_proj),
                (format!("{p}.self_attn.k_proj"), &a.k_proj),
                (format!("{p}.self_attn.v_proj"), &a.v_proj),
                (format!("{p}.self_attn.o_proj"), &a.o_proj),
                (format!("{p}.mlp.gate_proj"), &m.gate_proj),
                (format!("{p}.mlp.up_proj"), &m.up_proj),
                (format!("{p}.mlp.down_proj"), &m.down_proj),
            ]);
        }
        out
    }

    fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &mut layer.self_attn;
            let m = &mut layer.mlp;
            out.extend([
                (format!("{p}.self_attn.q_proj"), &mut a.q_proj),
                (format!("{p}.self_attn.k_proj"), &mut a.k_proj),
                (format!("{p}.self_attn.v_proj"), &mut a.v_proj),
                (format!("{p}.self_attn.o_proj"), &mut a.o_proj),
                (format!("{p}.mlp.gate_proj"), &mut m.gate_proj),
                (format!("{p}.mlp.up_proj"), &mut m.up_proj),
                (format!("{p}.mlp.down_proj"), &mut m.down_proj),
            ]);
        }
        out
    }

    /// Wraps every targeted linear layer in a fresh LoRA adapter (`B = 0`, so the model's output
    /// is unchanged). Returns how many layers were wrapped; zero is an error.
    pub fn add_lora(&mut self, config: &LoraConfig, seed: u64) -> Result<usize> {
        if config.rank == 0 {
            bail!("LoRA rank must be positive");
        }
        let mut rng = lora::init_rng(seed);
        let (dtype, device) = (self.dtype, self.device.clone());
        let mut wrapped = 0;
        for (module, linear) in self.linears_mut() {
            if config.targets(&module) {
                let (in_features, out_features) = linear.dims()?;
                linear.lora = Some(LoraWeights::init(
                    in_features,
                    out_features,
                    config,
                    &mut rng,
                    dtype,
                    &device,
                )?);
                wrapped += 1;
            }
        }
        if wrapped == 0 {
            bail!(
                "LoRA target_modules {:?} match no linear layer of Qwen3",
                config.target_modules
            );
        }
        Ok(wrapped)
    }

    /// Saves the LoRA adapters in PEFT's layout (`adapter_config.json` +
    /// `adapter_model.safetensors`).
    pub fn save_lora_peft(
        &self,
        dir: &Path,
        config: &LoraConfig,
        base_model_name_or_path: &str,
    ) -> Result<()> {
        let vars = self.lora_vars();
        if vars.is_empty() {
            bail!("the model has no LoRA adapters to save");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        config.save_peft(dir, base_model_name_or_path)?;
        let tensors: HashMap<String, Tensor> = vars
            .into_iter()
            .map(|(name, var)| (name, var.as_tensor().clone()))
            .collect();
        weights::save_file(&tensors, &dir.join(lora::ADAPTER_WEIGHTS))
    }

    /// Loads a PEFT LoRA adapter folder onto this model (replacing any adapters). Every
    /// targeted layer must have both factors in the file, and the file must hold nothing else.
    pub fn load_lora_peft(&mut self, dir: &Path) -> Result<LoraConfig> {
        let config = LoraConfig::load_peft(dir)?;
        let path = dir.join(lora::ADAPTER_WEIGHTS);
        let mut tensors = weights::load_file(&path, self.dtype, &self.device)?;
        let mut wrapped = 0;
        for (module, linear) in self.linears_mut() {
            linear.lora = None;
            if !config.targets(&module) {
                continue;
            }
            let a = weights::take(
                &mut tensors,
                &lora::peft_tensor_name(&module, Factor::A),
                &path,
            )?;
            let b = weights::take(
                &mut tensors,
                &lora::peft_tensor_name(&module, Factor::B),
                &path,
            )?;
            let (in_features, out_features) = linear.dims()?;
            linear.lora = Some(
                LoraWeights::from_tensors(a, b, in_features, out_features, &config, &module)
                    .with_context(|| format!("in {}", path.display()))?,
            );
            wrapped += 1;
        }
        if wrapped == 0 {
            bail!("{}: target_modules match no Qwen3 layer", path.display());
        }
        if !tensors.is_empty() {
            let mut extra: Vec<_> = tensors.keys().cloned().collect();
            extra.sort();
            bail!(
                "{}: tensors not used by the adapter config: {extra:?}",
                path.display()
            );
        }
        Ok(config)
    }

    /// Logits `[B, T, V]` for a whole batch of sequences `ids: [B, T]` (u32), differentiable.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        self.run(ids, None, ForwardMode::Train)
    }

    /// Logits `[B, T, V]` with the chosen kernels (see [`ForwardMode`]).
    pub fn forward_mode(&self, ids: &Tensor, mode: ForwardMode) -> Result<Tensor> {
        self.run(ids, None, mode)
    }

    /// Incremental decoding: logits `[B, T, V]` of the new tokens `ids: [B, T]` placed after the
    /// positions already in `cache`, which is extended with their keys and values. Uses the
    /// inference kernels (no gradient).
    pub fn forward_with_cache(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.run(ids, Some(cache), ForwardMode::Inference)
    }

    /// `log p(targets[b, t] | ids[b, ..=t])`, `[B, T]` in f32, differentiable. Usually
    /// `targets` is `ids` shifted left by one.
    pub fn token_logprobs(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        self.token_logprobs_mode(ids, targets, ForwardMode::Train)
    }

    /// [`Qwen3::token_logprobs`] with the chosen kernels.
    pub fn token_logprobs_mode(
        &self,
        ids: &Tensor,
        targets: &Tensor,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let logits = self.forward_mode(ids, mode)?;
        gather_logprobs(&logits, targets)
    }

    /// Log-probs of one sequence under the model: entry `i` is `log p(ids[i+1] | ids[..=i])`,
    /// so there are `ids.len() - 1` of them. Inference kernels.
    pub fn score_sequence(&self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.len() < 2 {
            return Ok(Vec::new());
        }
        let vocab = self.config.vocab_size;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            bail!("token id {bad} is outside the model's vocabulary ({vocab})");
        }
        let n = ids.len();
        let inputs = Tensor::from_slice(&ids[..n - 1], (1, n - 1), &self.device)?;
        let targets = Tensor::from_slice(&ids[1..], (1, n - 1), &self.device)?;
        let logprobs = self.token_logprobs_mode(&inputs, &targets, ForwardMode::Inference)?;
        Ok(logprobs.squeeze(0)?.to_vec1::<f32>()?)
    }

    fn run(&self, ids: &Tensor, cache: Option<&mut KvCache>, mode: ForwardMode) -> Result<Tensor> {
        let (batch, seq) = ids
            .dims2()
            .context("Qwen3 input ids must have shape [batch, seq]")?;
        let hidden = self.final_hidden(ids, cache, mode)?;
        let logits = self.project_to_vocab(&hidden, mode)?;
        Ok(logits.reshape((batch, seq, self.config.vocab_size))?)
    }

    /// The embeddings of `ids` (`[N]` u32) as `[N, H]`, from either storage of the table
    /// ([`matmul_layout`]).
    pub(super) fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        if self.embed_tokens.is_contiguous() {
            return Ok(self.embed_tokens.index_select(ids, 0)?);
        }
        Ok(self
            .embed_tokens
            .t()?
            .index_select(ids, 1)?
            .t()?
            .contiguous()?)
    }

    /// Logits `[N, V]` of the hidden states `[N, H]` (the tied or separate LM head).
    pub(super) fn project_to_vocab(&self, hidden: &Tensor, mode: ForwardMode) -> Result<Tensor> {
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        frozen_matmul(
            hidden,
            head,
            self.head_packed.as_deref(),
            &self.head_thin,
            mode,
        )
    }

    /// Differentiable logits `[N, V]` at the flat positions `positions` (u32 indices into the
    /// `B*T` positions of `ids`, row-major) only: the LM head, the largest matmul of a small
    /// Qwen3, runs on the scored positions alone.
    pub fn forward_at(&self, ids: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let hidden = self.final_hidden(ids, None, ForwardMode::Train)?;
        self.project_to_vocab(&hidden.index_select(positions, 0)?, ForwardMode::Train)
    }

    /// What every decoder layer of one forward pass over `ids: [B, T]` shares, with the
    /// sequence starting at `offset` (the tokens already in a KV cache): the shape, the rotary
    /// tables at its positions, and the causal mask (none for a single token).
    #[allow(clippy::type_complexity)]
    pub(super) fn layer_inputs(
        &self,
        ids: &Tensor,
        offset: usize,
    ) -> Result<(usize, usize, (Tensor, Tensor), Option<Tensor>)> {
        let (batch, seq) = ids
            .dims2()
            .context("Qwen3 input ids must have shape [batch, seq]")?;
        if seq == 0 {
            bail!("Qwen3 input has no tokens");
        }
        let rotary = self.rotary_tables(offset, seq)?;
        let mask = if seq > 1 {
            Some(causal_mask(seq, offset, self.dtype, &self.device)?)
        } else {
            None
        };
        Ok((batch, seq, rotary, mask))
    }

    /// Hidden states `[B*T, H]` after the final norm.
    fn final_hidden(
        &self,
        ids: &Tensor,
        cache: Option<&mut KvCache>,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let offset = cache.as_ref().map_or(0, |c| c.len);
        let (batch, seq, (cos, sin), mask) = self.layer_inputs(ids, offset)?;
        let flat_ids = ids.flatten_all()?;
        let mut hidden = self.embed(&flat_ids)?; // [B*T, H]
        let mut cache = cache;
        if let Some(cache) = cache.as_deref_mut() {
            if cache.layers.len() != self.layers.len() {
                cache.layers = vec![None; self.layers.len()];
            }
        }
        for (index, layer) in self.layers.iter().enumerate() {
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[index]);
            hidden = self.decoder_layer(
                layer,
                &hidden,
                (batch, seq),
                (&cos, &sin),
                mask.as_ref(),
                layer_cache,
                mode,
            )?;
        }
        if let Some(cache) = cache {
            cache.len += seq;
        }
        self.rms_norm(&hidden, &self.norm, mode)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn decoder_layer(
        &self,
        layer: &DecoderLayer,
        hidden: &Tensor,
        (batch, seq): (usize, usize),
        rotary: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let normed = self.rms_norm(hidden, &layer.input_layernorm, mode)?;
        let attended = self.attention(
            &layer.self_attn,
            &normed,
            (batch, seq),
            rotary,
            mask,
            cache,
            mode,
        )?;
        let hidden = (hidden + attended)?;
        self.mlp_residual(layer, &hidden, mode)
    }

    /// The second half of a decoder layer on `hidden: [N, H]`: RMSNorm, the SiLU-gated MLP, and
    /// the residual.
    pub(super) fn mlp_residual(
        &self,
        layer: &DecoderLayer,
        hidden: &Tensor,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let normed = self.rms_norm(hidden, &layer.post_attention_layernorm, mode)?;
        let mlp = &layer.mlp;
        let gate = mlp.gate_proj.forward(&normed, mode)?;
        let up = mlp.up_proj.forward(&normed, mode)?;
        let gated = match mode {
            ForwardMode::Train => crate::fused::silu_mul(&gate, &up)?,
            // The inference forward keeps no graph (its other fused ops record no backward).
            ForwardMode::Inference => crate::fused::silu_mul(&gate, &up)?.detach(),
        };
        let down = mlp.down_proj.forward(&gated, mode)?;
        Ok((hidden + down)?)
    }

    /// The final RMSNorm and the output projection: `hidden: [N, H]` → logits `[N, V]`.
    pub(super) fn logits_from_hidden(&self, hidden: &Tensor, mode: ForwardMode) -> Result<Tensor> {
        self.project_to_vocab(&self.rms_norm(hidden, &self.norm, mode)?, mode)
    }

    /// Grouped-query attention on `x: [B*T, H]`. Query heads are grouped by the key/value head
    /// they share (head `h` uses kv head `h / group`, as transformers' `repeat_kv`), and each
    /// group is one matmul, so keys and values are never copied per query head.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        attn: &Attention,
        x: &Tensor,
        (batch, seq): (usize, usize),
        (cos, sin): (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (n_q, n_kv, head_dim) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let group = n_q / n_kv;
        let q = attn
            .q_proj
            .forward(x, mode)?
            .reshape((batch, seq, n_q, head_dim))?;
        let k = attn
            .k_proj
            .forward(x, mode)?
            .reshape((batch, seq, n_kv, head_dim))?;
        let v = attn
            .v_proj
            .forward(x, mode)?
            .reshape((batch, seq, n_kv, head_dim))?;
        let (q, k) = self.qk_norm(attn, q, k, mode)?;
        if mode == ForwardMode::Train && cache.is_none() && self.dtype == DType::F32 {
            // The training forward over whole sequences: one fused causal-attention op (its
            // backward recomputes the probabilities per query row), so the `[B, heads, T, T]`
            // scores, mask and softmax are never materialised; a long prompt would otherwise
            // allocate (and page in) gigabytes per step. Keys and values are repeated per
            // query head, as transformers' `repeat_kv`.
            let q = apply_rotary(&q, cos, sin, mode)?;
            let k = apply_rotary(&k, cos, sin, mode)?;
            let repeat = |x: &Tensor| -> Result<Tensor> {
                Ok(x.unsqueeze(3)?
                    .broadcast_as((batch, seq, n_kv, group, head_dim))?
                    .reshape((batch, seq, n_q * head_dim))?)
            };
            let qkv = Tensor::cat(
                &[
                    &q.reshape((batch, seq, n_q * head_dim))?,
                    &repeat(&k)?,
                    &repeat(&v)?,
                ],
                2,
            )?;
            let scale = 1.0 / (head_dim as f64).sqrt();
            let out = crate::fused::causal_attention(&qkv, n_q, scale)?
                .reshape((batch * seq, n_q * head_dim))?;
            return attn.o_proj.forward(&out, mode);
        }
        let q = apply_rotary(&q, cos, sin, mode)?
            .transpose(1, 2)?
            .contiguous()?;
        let k = apply_rotary(&k, cos, sin, mode)?
            .transpose(1, 2)?
            .contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let (k, v) = match cache {
            None => (k, v),
            Some(slot) => {
                let (k, v) = match slot.take() {
                    None => (k, v),
                    Some((past_k, past_v)) => (
                        Tensor::cat(&[&past_k, &k], 2)?,
                        Tensor::cat(&[&past_v, &v], 2)?,
                    ),
                };
                *slot = Some((k.clone(), v.clone()));
                (k, v)
            }
        };
        let total = k.dim(2)?;
        // [B, n_q, T, d] → [B, n_kv, group*T, d]: the query heads sharing one kv head.
        let q = q.reshape((batch, n_kv, group * seq, head_dim))?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? * scale)?; // [B, n_kv, group*T, S]
        let scores = match mask {
            None => scores,
            Some(mask) => scores
                .reshape((batch, n_kv, group, seq, total))?
                .broadcast_add(mask)?
                .reshape((batch, n_kv, group * seq, total))?,
        };
        let probs = softmax_last(&scores, mode)?;
        let out = probs.matmul(&v)?; // [B, n_kv, group*T, d]
        let out = out
            .reshape((batch, n_q, seq, head_dim))?
            .transpose(1, 2)?
            .reshape((batch * seq, n_q * head_dim))?;
        attn.o_proj.forward(&out, mode)
    }

    /// Qwen3's per-head RMSNorm of queries and keys before RoPE; Llama and Qwen2 have none.
    pub(super) fn qk_norm(
        &self,
        attn: &Attention,
        q: Tensor,
        k: Tensor,
        mode: ForwardMode,
    ) -> Result<(Tensor, Tensor)> {
        let q = match &attn.q_norm {
            Some(weight) => self.rms_norm(&q, weight, mode)?,
            None => q,
        };
        let k = match &attn.k_norm {
            Some(weight) => self.rms_norm(&k, weight, mode)?,
            None => k,
        };
        Ok((q, k))
    }

    /// RMSNorm over the last dimension, computed in f32 like transformers' `Qwen3RMSNorm`.
    pub(super) fn rms_norm(
        &self,
        x: &Tensor,
        weight: &Tensor,
        mode: ForwardMode,
    ) -> Result<Tensor> {
        let eps = self.config.rms_norm_eps as f32;
        Ok(match mode {
            ForwardMode::Train => candle_nn::ops::rms_norm_slow(x, weight, eps)?,
            ForwardMode::Inference => candle_nn::ops::rms_norm(&x.contiguous()?, weight, eps)?,
        })
    }

    /// cos and sin of the rotary angles for positions `offset..offset+seq`, `[seq, head_dim/2]`.
    pub(super) fn rotary_tables(&self, offset: usize, seq: usize) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(seq * half);
        let mut sin = Vec::with_capacity(seq * half);
        for position in offset..offset + seq {
            for &freq in &self.inv_freq {
                let angle = position as f32 * freq;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let cos = Tensor::from_vec(cos, (seq, half), &self.device)?.to_dtype(self.dtype)?;
        let sin = Tensor::from_vec(sin, (seq, half), &self.device)?.to_dtype(self.dtype)?;
        Ok((cos, sin))
    }
}

/// The tensor `name` through `get` when the architecture has it (`present`), else `None`.
fn optional(
    get: &mut impl FnMut(String) -> Result<Tensor>,
    present: bool,
    name: String,
) -> Result<Option<Tensor>> {
    present.then(|| get(name)).transpose()
}

/// A weight `W [out, in]` used as `x Wᵀ`, stored for that product: frozen on the CPU (`frozen_cpu`),
/// as a view of `[in, out]` storage, so `Wᵀ` is a plain row-major matrix, the layout in which
/// the `gemm` crate reaches its speed; otherwise unchanged. Measured on 2 cores, `[128, in] ×
/// Wᵀ` through `gemm` with `W` as stored by HF: 163, 91, 150 and 138 GFLOP/s for the 0.6B
/// model's up, down, q and tied LM-head shapes; transposed once at load: 210, 202, 194, 196
/// (PyTorch's MKL: 188, 237, 227, 162). A trainable weight keeps HF's layout: its optimizer
/// state and checkpoints are in that layout, and its backward product (`dy W`) is the one that
/// then reads `W` row-major. Saving goes through [`Qwen3::named_weights`], whose views
/// serialise in HF's order.
fn matmul_layout(weight: Tensor, frozen_cpu: bool) -> Result<Tensor> {
    if !frozen_cpu {
        return Ok(weight);
    }
    Ok(weight.t()?.contiguous()?.t()?)
}

/// Rows of `x` from which the AMX path runs: below, a product is bound by reading the weight
/// (decoding a few rows), where the matrix unit gains nothing.
const AMX_MIN_ROWS: usize = 16;

/// A frozen weight's packing for the thin path ([`thin_matmul`]): made on the first inference
/// product of at most [`thin_matmul::MAX_ROWS`] rows (a decoding step), so a model that never
/// decodes (the trainer's) never holds it, and then reused by every step. Clones share it, as
/// they share the weight; a new weight (a weight sync's [`Qwen3::copy_weights_from`] builds a
/// new model) comes with an empty slot, so a packing never outlives its weight. Holds `None`
/// when the weight cannot be packed (a variable, which the optimizer changes in place).
#[derive(Debug, Clone, Default)]
pub(super) struct ThinSlot(Arc<OnceLock<Option<ThinWeight>>>);

impl ThinSlot {
    /// The packing of `weight` (`W [out, in]`, f32 on the CPU), made on the first call.
    fn get(&self, weight: &Tensor) -> Option<&ThinWeight> {
        self.0
            .get_or_init(|| {
                if weight.is_variable() {
                    return None;
                }
                let (out_features, in_features) = weight.dims2().ok()?;
                let transposed = weight.t().ok()?.contiguous().ok()?;
                let values = transposed.flatten_all().ok()?.to_vec1::<f32>().ok()?;
                ThinWeight::pack(&values, in_features, out_features)
            })
            .as_ref()
    }
}

/// `x · Wᵀ` for a weight `W [out, in]`, when `mode` is inference (no gradient is recorded) and
/// `x: [N, in]` is an f32 CPU tensor: on the AMX path ([`amx_matmul`]) when the weight was
/// packed for it and `N ≥` [`AMX_MIN_ROWS`]; on the thin path ([`thin_matmul`], decoding) when
/// `N ≤` [`thin_matmul::MAX_ROWS`] and the CPU has AVX2 and FMA; otherwise candle's matmul,
/// with the backward pass of `x` only when `W` is frozen ([`crate::fused::frozen_matmul`]).
fn frozen_matmul(
    x: &Tensor,
    weight: &Tensor,
    packed: Option<&PackedWeight>,
    thin: &ThinSlot,
    mode: ForwardMode,
) -> Result<Tensor> {
    if mode == ForwardMode::Inference
        && x.dtype() == DType::F32
        && weight.dtype() == DType::F32
        && x.device().is_cpu()
        && weight.device().is_cpu()
    {
        let rows = x.dim(0)?;
        if let Some(packed) = packed.filter(|_| rows >= AMX_MIN_ROWS) {
            let values = x.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
            if let Some(out) = packed.matmul(&values, rows) {
                return Ok(Tensor::from_vec(out, (rows, packed.n()), x.device())?);
            }
        } else if rows <= thin_matmul::MAX_ROWS && thin_matmul::thin_available() {
            if let Some(thin) = thin.get(weight) {
                let values = x.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
                if let Some(out) = thin.matmul(&values, rows) {
                    return Ok(Tensor::from_vec(out, (rows, thin.n()), x.device())?);
                }
            }
        }
    }
    Ok(crate::fused::frozen_matmul(x, &weight.t()?)?)
}

/// A frozen CPU f32 weight `W [out, in]` (stored as [`matmul_layout`] leaves it) packed for
/// the AMX path, when this process has one and the shape fits ([`amx_matmul::packable`]).
fn pack_frozen(weight: &Tensor, frozen_cpu: bool) -> Result<Option<Arc<PackedWeight>>> {
    let (out_features, in_features) = weight.dims2()?;
    if !frozen_cpu
        || weight.dtype() != DType::F32
        || !amx_matmul::packable(in_features, out_features)
        || !amx_matmul::amx_available()
    {
        return Ok(None);
    }
    let transposed = weight.t()?.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    Ok(PackedWeight::pack(&transposed, in_features, out_features).map(Arc::new))
}

/// `tensor` in `dtype` on `device`, in storage of its own and with no autograd link to it.
fn detached_copy(tensor: &Tensor, dtype: DType, device: &Device) -> Result<Tensor> {
    let source = tensor.detach();
    if source.dtype() == dtype && source.device().same_device(device) {
        Ok(source.copy()?.detach())
    } else {
        Ok(source.to_dtype(dtype)?.to_device(device)?.detach())
    }
}

/// `log_softmax(logits)[targets]` in f32: `[B, T, V]`, `[B, T]` → `[B, T]`, differentiable.
/// The same function as [`crate::fused::log_softmax_gather`], which computes it; kept under this
/// name as Qwen3's API.
pub fn gather_logprobs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    Ok(crate::fused::log_softmax_gather(logits, targets)?)
}

/// Softmax over the last dimension, in f32 for half-precision inputs (as transformers does).
pub(super) fn softmax_last(x: &Tensor, mode: ForwardMode) -> Result<Tensor> {
    let dtype = x.dtype();
    // f32 at least (transformers upcasts bf16/f16 scores); an f64 model keeps f64, so its
    // forward is f64 throughout (finite-difference gradient checks rely on that).
    let x32 = match dtype {
        DType::F64 => x.clone(),
        _ => x.to_dtype(DType::F32)?,
    };
    let probs = match mode {
        ForwardMode::Train => candle_nn::ops::softmax(&x32, D::Minus1)?,
        ForwardMode::Inference => candle_nn::ops::softmax_last_dim(&x32.contiguous()?)?,
    };
    Ok(probs.to_dtype(dtype)?)
}

/// RoPE (rotate-half convention) on `x: [B, T, heads, head_dim]` with tables `[T, head_dim/2]`.
pub(super) fn apply_rotary(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    mode: ForwardMode,
) -> Result<Tensor> {
    match mode {
        ForwardMode::Inference => Ok(candle_nn::rotary_emb::rope_thd(&x.contiguous()?, cos, sin)?),
        ForwardMode::Train => Ok(crate::fused::rope(x, cos, sin)?),
    }
}

/// Additive causal mask `[T, offset+T]`: query `i` (at position `offset+i`) sees keys
/// `0..=offset+i`.
pub(super) fn causal_mask(
    seq: usize,
    offset: usize,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let total = offset + seq;
    let values: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j > offset + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(values, (seq, total), device)?.to_dtype(dtype)?)
}

/// Qwen3 as the trainer sees it: logits of the whole batch, no value head, and as trainable
/// variables the LoRA factors (and the base weights, when loaded trainable), sorted by name.
impl crate::policy::Policy for Qwen3 {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<crate::policy::PolicyOutput> {
        let logits = Qwen3::forward(self, ids).map_err(candle_core::Error::wrap)?;
        Ok(crate::policy::PolicyOutput {
            logits,
            values: None,
        })
    }

    fn forward_at(
        &self,
        ids: &Tensor,
        positions: &Tensor,
    ) -> candle_core::Result<crate::policy::PolicyOutput> {
        let logits = Qwen3::forward_at(self, ids, positions).map_err(candle_core::Error::wrap)?;
        Ok(crate::policy::PolicyOutput {
            logits,
            values: None,
        })
    }

    fn forward_at_for_update(
        &self,
        ids: &Tensor,
        positions: &Tensor,
    ) -> candle_core::Result<crate::policy::ForUpdate> {
        if !self.gradient_checkpointing {
            return Ok(crate::policy::ForUpdate {
                output: crate::policy::Policy::forward_at(self, ids, positions)?,
                pending: None,
            });
        }
        let (logits, pending) = self
            .forward_at_checkpointed(ids, positions)
            .map_err(candle_core::Error::wrap)?;
        Ok(crate::policy::ForUpdate {
            output: crate::policy::PolicyOutput {
                logits,
                values: None,
            },
            pending: Some(Box::new(pending)),
        })
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_seq(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn device(&self) -> &Device {
        Qwen3::device(self)
    }

    fn trainable_vars(&self) -> Vec<(String, Var)> {
        let mut vars = Qwen3::trainable_vars(self);
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars
    }
}
