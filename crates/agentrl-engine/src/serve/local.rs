//! [`LocalServed`]: a [`ServedModel`] over the local engine of any [`ServableDecoder`], with
//! named LoRA adapters beside the base model; and [`ServableDecoder`] for Qwen3.
//!
//! Where it sits: `agentrl serve` builds a `LocalServed<Qwen3>` from a model folder and hands
//! it to [`super::start`]. Each adapter is its own copy of the model with the adapter applied
//! (candle tensors are shared by reference, so a copy costs only the adapter's weights) and
//! its own [`LocalEngine`], so requests for the base and for each adapter never mix.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Context;

use agentrl_model::qwen3::{ForwardMode, LoadOptions, Qwen3};
use candle_core::{DType, IndexOp, Tensor};

use super::ServedModel;
use crate::{Completion, Decoder, Engine, GenerateParams, GenerateRequest, LocalEngine};

/// A decoder that can be served: besides decoding, it can load a LoRA adapter or full
/// weights from a folder, and give the logits at chosen positions of a sequence.
pub trait ServableDecoder: Decoder<Cache: Send> + Sized + Send + 'static {
    fn vocab_size(&self) -> usize;
    /// A copy of this model with the PEFT adapter in `dir` applied (replacing any adapter).
    fn with_lora(&self, dir: &Path) -> anyhow::Result<Self>;
    /// The model in folder `dir`, in this model's dtype and device (SGLang's
    /// `update_weights_from_disk`).
    fn load_folder(&self, dir: &Path) -> anyhow::Result<Self>;
    /// Logits `[V]` after `ids[..=p]` for every `p` in `positions` (the distribution of
    /// `ids[p + 1]`). The default decodes incrementally through [`Decoder::decode`].
    fn position_logits(
        &self,
        ids: &[u32],
        positions: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        anyhow::ensure!(
            positions.end <= ids.len(),
            "position_logits: positions {positions:?} outside a sequence of {}",
            ids.len()
        );
        let mut cache = self.new_cache(1);
        let mut out = Vec::with_capacity(positions.len());
        let mut fed = 0;
        for p in positions {
            let chunk = &ids[fed..=p];
            fed = p + 1;
            let mut logits = self.decode(&[chunk], &mut cache)?;
            out.push(
                logits
                    .pop()
                    .flatten()
                    .ok_or_else(|| anyhow::anyhow!("position_logits: no logits at {p}"))?,
            );
        }
        Ok(out)
    }
}

impl ServableDecoder for Qwen3 {
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    /// The clone shares this model's base weights and their AMX packing; the adapter's delta
    /// runs in f32 beside it.
    fn with_lora(&self, dir: &Path) -> anyhow::Result<Self> {
        let mut model = self.clone();
        model
            .load_lora_peft(dir)
            .with_context(|| format!("loading the LoRA adapter in {}", dir.display()))?;
        Ok(model)
    }

    fn load_folder(&self, dir: &Path) -> anyhow::Result<Self> {
        let options = LoadOptions {
            dtype: self.dtype(),
            device: self.device().clone(),
            trainable: false,
        };
        let mut model = Qwen3::load(dir, &options)
            .with_context(|| format!("loading the model from {}", dir.display()))?;
        // A server started with `--cpu-matmul amx` stays on it with the new weights.
        if self.packed_for_amx() {
            model.pack_for_amx()?;
        }
        Ok(model)
    }

    /// One full forward pass (inference kernels), not one decoding step per position.
    fn position_logits(
        &self,
        ids: &[u32],
        positions: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        anyhow::ensure!(
            positions.end <= ids.len(),
            "position_logits: positions {positions:?} outside a sequence of {}",
            ids.len()
        );
        let input = Tensor::from_slice(&ids[..positions.end], (1, positions.end), self.device())?;
        let logits = self.forward_mode(&input, ForwardMode::Inference)?;
        let rows = logits
            .i((0, positions.start..positions.end))?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?;
        Ok(rows)
    }
}

/// A served base model plus named LoRA adapters.
pub struct LocalServed<D: ServableDecoder> {
    name: String,
    path: String,
    base: LocalEngine<D>,
    adapters: BTreeMap<String, (PathBuf, LocalEngine<D>)>,
}

impl<D: ServableDecoder> LocalServed<D> {
    /// `name` is what requests give as `model`; `path` is reported as SGLang's `model_path`.
    pub fn new(decoder: D, name: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            path: path.into(),
            base: LocalEngine::new(decoder),
            adapters: BTreeMap::new(),
        }
    }

    fn engine(&mut self, adapter: Option<&str>) -> anyhow::Result<&mut LocalEngine<D>> {
        match adapter {
            None => Ok(&mut self.base),
            Some(name) => self
                .adapters
                .get_mut(name)
                .map(|(_, engine)| engine)
                .ok_or_else(|| anyhow::anyhow!("no LoRA adapter named {name:?} is loaded")),
        }
    }
}

impl<D: ServableDecoder> ServedModel for LocalServed<D> {
    fn name(&self) -> &str {
        &self.name
    }

    fn model_path(&self) -> String {
        self.path.clone()
    }

    fn max_seq(&self) -> usize {
        Engine::max_seq(&self.base)
    }

    fn vocab_size(&self) -> usize {
        self.base.decoder().vocab_size()
    }

    fn generate(
        &mut self,
        adapter: Option<&str>,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        self.engine(adapter)?.generate(requests, params)
    }

    fn position_logits(
        &mut self,
        adapter: Option<&str>,
        ids: &[u32],
        positions: Range<usize>,
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        self.engine(adapter)?
            .decoder()
            .position_logits(ids, positions)
    }

    fn adapters(&self) -> Vec<(String, String)> {
        self.adapters
            .iter()
            .map(|(name, (dir, _))| (name.clone(), dir.display().to_string()))
            .collect()
    }

    fn load_lora(&mut self, name: &str, dir: &Path) -> anyhow::Result<()> {
        let model = self.base.decoder().with_lora(dir)?;
        self.adapters.insert(
            name.to_string(),
            (dir.to_path_buf(), LocalEngine::new(model)),
        );
        Ok(())
    }

    fn unload_lora(&mut self, name: &str) -> anyhow::Result<()> {
        self.adapters
            .remove(name)
            .map(drop)
            .ok_or_else(|| anyhow::anyhow!("no LoRA adapter named {name:?} is loaded"))
    }

    /// Loads the new base, then re-applies every loaded adapter from its folder onto it (an
    /// adapter is a delta on the base it was trained on); any failure leaves the old weights.
    fn load_full_weights(&mut self, dir: &Path) -> anyhow::Result<()> {
        let base = self.base.decoder().load_folder(dir)?;
        let mut adapters = BTreeMap::new();
        for (name, (adapter_dir, _)) in &self.adapters {
            let model = base.with_lora(adapter_dir).with_context(|| {
                format!("re-applying LoRA adapter {name:?} onto the new weights")
            })?;
            adapters.insert(name.clone(), (adapter_dir.clone(), LocalEngine::new(model)));
        }
        self.base = LocalEngine::new(base);
        self.adapters = adapters;
        Ok(())
    }
}
