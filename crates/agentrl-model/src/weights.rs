//! Safetensors IO for Hugging Face model folders: the bridge between files on disk and the
//! named tensors that [`crate::qwen3`] and [`crate::lora`] are built from.
//!
//! A folder holds either one `model.safetensors` or a sharded set listed by
//! `model.safetensors.index.json` (`{"weight_map": {tensor name: shard file}}`). Tensors are
//! converted to the requested dtype on load, so a bf16 checkpoint can be used in f32 and back.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};

/// File name of a single-file checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// File name of the shard index of a sharded checkpoint.
pub const SHARD_INDEX: &str = "model.safetensors.index.json";

/// The safetensors files of a model folder: the single file, or every shard named in the index.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index_path = dir.join(SHARD_INDEX);
    if !index_path.is_file() {
        bail!(
            "{} has neither {SINGLE_FILE} nor {SHARD_INDEX}",
            dir.display()
        );
    }
    let text = std::fs::read_to_string(&index_path)
        .with_context(|| format!("reading {}", index_path.display()))?;
    let index: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("parsing {} as JSON", index_path.display()))?;
    let weight_map = index
        .get("weight_map")
        .and_then(|map| map.as_object())
        .with_context(|| {
            format!(
                "{}: missing object field `weight_map`",
                index_path.display()
            )
        })?;
    let mut shards = BTreeSet::new();
    for (tensor, shard) in weight_map {
        let shard = shard.as_str().with_context(|| {
            format!(
                "{}: weight_map[{tensor:?}] is not a file name",
                index_path.display()
            )
        })?;
        shards.insert(shard.to_string());
    }
    Ok(shards.into_iter().map(|shard| dir.join(shard)).collect())
}

/// Loads every tensor of a model folder (single file or sharded), converted to `dtype`.
pub fn load_folder(dir: &Path, dtype: DType, device: &Device) -> Result<HashMap<String, Tensor>> {
    let mut tensors = HashMap::new();
    for file in checkpoint_files(dir)? {
        tensors.extend(load_file(&file, dtype, device)?);
    }
    Ok(tensors)
}

/// Loads one safetensors file, converted to `dtype`.
pub fn load_file(path: &Path, dtype: DType, device: &Device) -> Result<HashMap<String, Tensor>> {
    let raw = candle_core::safetensors::load(path, device)
        .with_context(|| format!("loading safetensors file {}", path.display()))?;
    raw.into_iter()
        .map(|(name, tensor)| {
            let converted = tensor
                .to_dtype(dtype)
                .with_context(|| format!("{}: converting {name} to {dtype:?}", path.display()))?;
            Ok((name, converted))
        })
        .collect()
}

/// Saves named tensors as one safetensors file.
pub fn save_file(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    candle_core::safetensors::save(tensors, path)
        .with_context(|| format!("writing safetensors file {}", path.display()))
}

/// Takes a tensor out of a loaded map, with an error that names the file set and the tensor.
pub fn take(tensors: &mut HashMap<String, Tensor>, name: &str, source: &Path) -> Result<Tensor> {
    tensors
        .remove(name)
        .with_context(|| format!("{}: missing tensor `{name}`", source.display()))
}

/// Whether every element of `t` is finite (no NaN, no ±inf).
pub fn all_finite(t: &Tensor) -> Result<bool> {
    let flat = t.flatten_all()?.to_dtype(DType::F32)?;
    Ok(flat.to_vec1::<f32>()?.iter().all(|x| x.is_finite()))
}

/// Writes named variables to one safetensors file; refuses a non-finite tensor, so a
/// diverged run never leaves a checkpoint that looks loadable.
pub fn save_vars(vars: &[(String, candle_core::Var)], path: &Path) -> Result<()> {
    let mut tensors = HashMap::new();
    for (name, var) in vars {
        if !all_finite(var.as_tensor())? {
            bail!(
                "refusing to save {}: parameter `{name}` holds NaN or infinite values",
                path.display()
            );
        }
        tensors.insert(name.clone(), var.as_tensor().clone());
    }
    candle_core::safetensors::save(&tensors, path)
        .with_context(|| format!("writing weights {}", path.display()))
}

/// Loads a safetensors file into existing variables in place. Every variable must be
/// present with its shape and finite values; errors name the file and the tensor.
pub fn load_into_vars(
    vars: &[(String, candle_core::Var)],
    path: &Path,
    device: &Device,
) -> Result<()> {
    let tensors = candle_core::safetensors::load(path, device)
        .with_context(|| format!("reading weights {}", path.display()))?;
    for (name, var) in vars {
        let t = tensors
            .get(name)
            .with_context(|| format!("{}: missing parameter `{name}`", path.display()))?;
        if t.shape() != var.shape() {
            bail!(
                "{}: `{name}` has shape {:?}, the model expects {:?} (was the run's [model] \
                 section changed?)",
                path.display(),
                t.dims(),
                var.dims()
            );
        }
        if !all_finite(t)? {
            bail!(
                "{}: parameter `{name}` holds NaN or infinite values",
                path.display()
            );
        }
        var.set(t)
            .with_context(|| format!("setting `{name}` from {}", path.display()))?;
    }
    Ok(())
}
