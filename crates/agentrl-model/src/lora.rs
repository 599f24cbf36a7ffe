//! LoRA adapters (Hu et al. 2021) for the linear layers of [`crate::qwen3::Qwen3`], stored in
//! PEFT's on-disk layout so that PEFT loads what agentrl saves and the reverse.
//!
//! A LoRA layer adds `scale * B(A x)` to a frozen linear map `W x`, with `A: [rank, in]`,
//! `B: [out, rank]` and `scale = alpha / rank` (PEFT's default, non-rsLoRA scaling). `A` starts
//! Kaiming-uniform and `B` at zero, so a fresh adapter leaves the model unchanged; only `A` and
//! `B` are trainable variables while the base weights stay plain (gradient-free) tensors.
//!
//! PEFT layout: a folder with `adapter_config.json` (`peft_type: "LORA"`, `r`, `lora_alpha`,
//! `target_modules`, …) and `adapter_model.safetensors` holding
//! `base_model.model.<module>.lora_A.weight` / `.lora_B.weight`, where `<module>` is the HF name
//! of the wrapped linear layer, e.g. `model.layers.0.self_attn.q_proj`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// File name of PEFT's adapter configuration.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
/// File name of PEFT's adapter weights.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";

/// Shape of an adapter: rank, alpha and which linear layers it wraps.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank `r` of the update `B A`.
    pub rank: usize,
    /// `lora_alpha`; the update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// Module name suffixes, as in PEFT: `q_proj` wraps every `….q_proj`.
    pub target_modules: Vec<String>,
}

impl LoraConfig {
    /// The factor applied to `B A x` (PEFT's `lora_alpha / r`).
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Whether a module (full HF name, e.g. `model.layers.3.mlp.up_proj`) is wrapped. PEFT
    /// matches a list entry against the whole name or its last dotted components.
    pub fn targets(&self, module: &str) -> bool {
        self.target_modules
            .iter()
            .any(|target| module == target || module.ends_with(&format!(".{target}")))
    }

    /// Writes `adapter_config.json` with the fields PEFT needs to rebuild the adapter.
    pub fn save_peft(&self, dir: &Path, base_model_name_or_path: &str) -> Result<()> {
        let file = PeftAdapterConfig {
            peft_type: "LORA".into(),
            task_type: Some("CAUSAL_LM".into()),
            r: self.rank,
            lora_alpha: self.alpha,
            target_modules: serde_json::Value::from(self.target_modules.clone()),
            lora_dropout: 0.0,
            bias: "none".into(),
            fan_in_fan_out: false,
            use_rslora: false,
            use_dora: false,
            base_model_name_or_path: Some(base_model_name_or_path.into()),
            inference_mode: true,
            modules_to_save: None,
            rank_pattern: serde_json::Map::new(),
            alpha_pattern: serde_json::Map::new(),
        };
        let path = dir.join(ADAPTER_CONFIG);
        let text = serde_json::to_string_pretty(&file)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Reads `adapter_config.json`, refusing PEFT options this implementation does not apply
    /// (so a loaded adapter never silently computes something different from PEFT).
    pub fn load_peft(dir: &Path) -> Result<Self> {
        let path = dir.join(ADAPTER_CONFIG);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let file: PeftAdapterConfig = serde_json::from_str(&text)
            .with_context(|| format!("parsing {} as a PEFT adapter config", path.display()))?;
        let at = path.display();
        if file.peft_type != "LORA" {
            bail!(
                "{at}: peft_type is {:?}, only \"LORA\" is supported",
                file.peft_type
            );
        }
        if file.r == 0 {
            bail!("{at}: r must be positive");
        }
        if file.use_rslora || file.use_dora || file.fan_in_fan_out {
            bail!("{at}: use_rslora, use_dora and fan_in_fan_out are not supported");
        }
        if file.bias != "none" {
            bail!(
                "{at}: bias {:?} is not supported (only \"none\")",
                file.bias
            );
        }
        if !file.rank_pattern.is_empty() || !file.alpha_pattern.is_empty() {
            bail!("{at}: per-module rank_pattern/alpha_pattern are not supported");
        }
        if file.modules_to_save.as_ref().is_some_and(|m| !m.is_null()) {
            bail!("{at}: modules_to_save is not supported");
        }
        let target_modules = match &file.target_modules {
            serde_json::Value::Array(items) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .with_context(|| format!("{at}: target_modules holds a non-string"))
                })
                .collect::<Result<Vec<_>>>()?,
            other => bail!("{at}: target_modules must be a list of names, got {other}"),
        };
        Ok(Self {
            rank: file.r,
            alpha: file.lora_alpha,
            target_modules,
        })
    }
}

/// The subset of PEFT's `LoraConfig` JSON that matters for the computation.
#[derive(Debug, Serialize, Deserialize)]
struct PeftAdapterConfig {
    peft_type: String,
    #[serde(default)]
    task_type: Option<String>,
    r: usize,
    lora_alpha: f64,
    target_modules: serde_json::Value,
    #[serde(default)]
    lora_dropout: f64,
    #[serde(default = "bias_none")]
    bias: String,
    #[serde(default)]
    fan_in_fan_out: bool,
    #[serde(default)]
    use_rslora: bool,
    #[serde(default)]
    use_dora: bool,
    #[serde(default)]
    base_model_name_or_path: Option<String>,
    #[serde(default)]
    inference_mode: bool,
    #[serde(default)]
    modules_to_save: Option<serde_json::Value>,
    #[serde(default)]
    rank_pattern: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    alpha_pattern: serde_json::Map<String, serde_json::Value>,
}

fn bias_none() -> String {
    "none".into()
}

/// PEFT's tensor name for one factor of the adapter on `module`.
pub fn peft_tensor_name(module: &str, factor: Factor) -> String {
    let factor = match factor {
        Factor::A => "lora_A",
        Factor::B => "lora_B",
    };
    format!("base_model.model.{module}.{factor}.weight")
}

/// Which of the two LoRA factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Factor {
    /// `A: [rank, in]`, the down projection.
    A,
    /// `B: [out, rank]`, the up projection.
    B,
}

/// The trainable factors of one wrapped linear layer.
#[derive(Debug, Clone)]
pub struct LoraWeights {
    /// `[rank, in]`.
    pub a: Var,
    /// `[out, rank]`.
    pub b: Var,
    /// `alpha / rank`.
    pub scale: f64,
}

impl LoraWeights {
    /// A fresh adapter: `A` Kaiming-uniform (bound `1/sqrt(in)`, as PEFT's default init),
    /// `B` zero, so the wrapped layer's output is unchanged until training moves `B`.
    pub fn init(
        in_features: usize,
        out_features: usize,
        config: &LoraConfig,
        rng: &mut ChaCha8Rng,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let bound = 1.0 / (in_features as f32).sqrt();
        let values: Vec<f32> = (0..config.rank * in_features)
            .map(|_| rng.random_range(-bound..bound))
            .collect();
        let a = Tensor::from_vec(values, (config.rank, in_features), device)?.to_dtype(dtype)?;
        let b = Tensor::zeros((out_features, config.rank), dtype, device)?;
        Ok(Self {
            a: Var::from_tensor(&a)?,
            b: Var::from_tensor(&b)?,
            scale: config.scale(),
        })
    }

    /// Factors from loaded tensors, checked against the wrapped layer's shape.
    pub fn from_tensors(
        a: Tensor,
        b: Tensor,
        in_features: usize,
        out_features: usize,
        config: &LoraConfig,
        module: &str,
    ) -> Result<Self> {
        if a.dims() != [config.rank, in_features] {
            bail!(
                "{module}: lora_A has shape {:?}, expected [{}, {in_features}]",
                a.dims(),
                config.rank
            );
        }
        if b.dims() != [out_features, config.rank] {
            bail!(
                "{module}: lora_B has shape {:?}, expected [{out_features}, {}]",
                b.dims(),
                config.rank
            );
        }
        Ok(Self {
            a: Var::from_tensor(&a)?,
            b: Var::from_tensor(&b)?,
            scale: config.scale(),
        })
    }

    /// `scale * x A^T B^T` for `x: [N, in]`. The scale multiplies the `[N, rank]` product, not
    /// the `[N, out]` one: two passes over a rank-16 matrix instead of over the projection's
    /// output, in the forward pass and again in the backward pass (for SmolLM2's 7 projections
    /// a layer, ~5,000 values a token each way). For a power-of-two scale (PEFT's default
    /// `alpha = 2 · rank` gives 2) the result is the same bits either way; otherwise it differs
    /// by rounding only.
    pub fn delta(&self, x: &Tensor) -> Result<Tensor> {
        let down = (x.matmul(&self.a.as_tensor().t()?)? * self.scale)?;
        Ok(down.matmul(&self.b.as_tensor().t()?)?)
    }
}

/// A seeded generator for adapter initialisation.
pub fn init_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}
