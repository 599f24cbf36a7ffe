//! AdamW with decoupled weight decay and global gradient-norm clipping, over named candle
//! `Var`s, with its moment state saved and restored as safetensors.
//!
//! Sits at the end of a training step: loss → `backward()` → [`clip_grad_norm`] →
//! [`AdamW::step`] → new weights for the engine. candle_nn's `AdamW` keeps its moments
//! private, so a resumed run could not continue it exactly; this one follows the same update
//! (Loshchilov & Hutter, arXiv:1711.05101, the form `candle_nn::optim::AdamW` and PyTorch use)
//! and exposes its state for checkpoints.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context};
use candle_core::{backprop::GradStore, DType, Tensor, Var};

/// Hyper-parameters of one update (the learning rate changes per step with the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWParams {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
}

/// AdamW over a fixed, name-sorted list of variables (sorted so that the update order and the
/// saved state do not depend on hash-map iteration order).
pub struct AdamW {
    slots: Vec<Slot>,
    params: AdamWParams,
    /// Number of updates applied so far.
    step_t: u64,
    /// Updates since the moments were last zeroed (the `t` of the bias corrections): equal to
    /// `step_t` unless [`AdamW::reset_moments`] was called.
    moment_t: u64,
}

impl AdamW {
    pub fn new(named_vars: Vec<(String, Var)>, params: AdamWParams) -> anyhow::Result<Self> {
        let mut named_vars = named_vars;
        named_vars.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = named_vars
            .into_iter()
            .filter(|(_, var)| var.dtype().is_float())
            .map(|(name, var)| {
                let m = Tensor::zeros(var.shape(), var.dtype(), var.device())?;
                let v = Tensor::zeros(var.shape(), var.dtype(), var.device())?;
                Ok(Slot { name, var, m, v })
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .context("allocating AdamW moments")?;
        Ok(Self {
            slots,
            params,
            step_t: 0,
            moment_t: 0,
        })
    }

    pub fn steps_taken(&self) -> u64 {
        self.step_t
    }

    /// Zeroes both moments, so the next update is a fresh optimizer's first (bias corrections
    /// restart); the count of updates taken stays. The trainer calls this when the format
    /// warm-up hands over to RL: otherwise the warm-up's momentum, at its higher learning
    /// rate, keeps moving the weights through RL steps that have no signal yet (all-zero
    /// advantages), and undoes what the warm-up taught.
    pub fn reset_moments(&mut self) -> anyhow::Result<()> {
        for slot in &mut self.slots {
            slot.m = slot.m.zeros_like().context("zeroing AdamW moments")?;
            slot.v = slot.v.zeros_like().context("zeroing AdamW moments")?;
        }
        self.moment_t = 0;
        Ok(())
    }

    /// One AdamW update at learning rate `lr`:
    /// `m ← β1 m + (1−β1) g`, `v ← β2 v + (1−β2) g²`,
    /// `θ ← θ (1 − lr λ) − lr · m̂ / (√v̂ + ε)` with `m̂ = m/(1−β1ᵗ)`, `v̂ = v/(1−β2ᵗ)`.
    /// Variables without a gradient (unused this step) are left untouched, moments included.
    pub fn step(&mut self, grads: &GradStore, lr: f64) -> anyhow::Result<()> {
        self.step_t += 1;
        self.moment_t += 1;
        let p = self.params;
        let t = self.moment_t as i32;
        let scale_m = 1.0 / (1.0 - p.beta1.powi(t));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(t));
        for slot in &mut self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else {
                continue;
            };
            let update = || -> candle_core::Result<(Tensor, Tensor, Tensor)> {
                let m = ((&slot.m * p.beta1)? + (g * (1.0 - p.beta1))?)?;
                let v = ((&slot.v * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
                let denom = ((&v * scale_v)?.sqrt()? + p.eps)?;
                let step = ((&m * scale_m)? / denom)?;
                let theta = ((slot.var.as_tensor() * (1.0 - lr * p.weight_decay))? - (step * lr)?)?;
                Ok((m, v, theta))
            };
            let (m, v, theta) =
                update().with_context(|| format!("AdamW update of `{}`", slot.name))?;
            slot.var
                .set(&theta)
                .with_context(|| format!("AdamW writing `{}`", slot.name))?;
            slot.m = m;
            slot.v = v;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.NAME`, `v.NAME`) plus the step counters (`step_t`,
    /// `moment_t`), for a safetensors file.
    pub fn state_tensors(&self) -> anyhow::Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for slot in &self.slots {
            out.insert(format!("m.{}", slot.name), slot.m.clone());
            out.insert(format!("v.{}", slot.name), slot.v.clone());
        }
        // f64 can hold any realistic step count exactly.
        out.insert(
            "step_t".into(),
            Tensor::new(&[self.step_t as f64], &candle_core::Device::Cpu)?,
        );
        out.insert(
            "moment_t".into(),
            Tensor::new(&[self.moment_t as f64], &candle_core::Device::Cpu)?,
        );
        Ok(out)
    }

    /// Writes the moments and the step counter; refuses non-finite moments, so a diverged
    /// optimizer never becomes a checkpoint.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let tensors = self.state_tensors()?;
        for (name, t) in &tensors {
            if !agentrl_model::weights::all_finite(t)? {
                bail!(
                    "refusing to save {}: optimizer state `{name}` holds NaN or infinite values",
                    path.display()
                );
            }
        }
        candle_core::safetensors::save(&tensors, path)
            .with_context(|| format!("writing optimizer state {}", path.display()))
    }

    /// Restores moments and step counter saved by [`AdamW::save`]; every variable must be
    /// present with its shape and finite.
    pub fn load(&mut self, path: &Path) -> anyhow::Result<()> {
        let device = self
            .slots
            .first()
            .map(|s| s.var.device().clone())
            .unwrap_or(candle_core::Device::Cpu);
        let tensors = candle_core::safetensors::load(path, &device)
            .with_context(|| format!("reading optimizer state {}", path.display()))?;
        let counter = |name: &str| -> anyhow::Result<Option<u64>> {
            let Some(t) = tensors.get(name) else {
                return Ok(None);
            };
            let values = t.to_dtype(DType::F64)?.to_vec1::<f64>()?;
            match values.first() {
                Some(&v) => Ok(Some(v as u64)),
                None => bail!("{}: `{name}` is empty", path.display()),
            }
        };
        let step =
            counter("step_t")?.with_context(|| format!("{}: missing `step_t`", path.display()))?;
        // Checkpoints written before `moment_t` existed never reset their moments.
        let moment = counter("moment_t")?.unwrap_or(step);
        for slot in &mut self.slots {
            for (prefix, target) in [("m", &mut slot.m), ("v", &mut slot.v)] {
                let key = format!("{prefix}.{}", slot.name);
                let t = tensors
                    .get(&key)
                    .with_context(|| format!("{}: missing `{key}`", path.display()))?;
                if t.shape() != slot.var.shape() {
                    bail!(
                        "{}: `{key}` has shape {:?}, the model's `{}` has {:?}",
                        path.display(),
                        t.dims(),
                        slot.name,
                        slot.var.dims()
                    );
                }
                if !agentrl_model::weights::all_finite(t)? {
                    bail!("{}: `{key}` holds NaN or infinite values", path.display());
                }
                *target = t.to_dtype(slot.var.dtype())?;
            }
        }
        self.step_t = step;
        self.moment_t = moment;
        Ok(())
    }
}

/// Global L2 norm of all gradients of `vars` (ones without a gradient count as zero).
pub fn grad_norm(grads: &GradStore, vars: &[Var]) -> anyhow::Result<f64> {
    let mut total = 0f64;
    for var in vars {
        if let Some(g) = grads.get(var.as_tensor()) {
            let sq = g
                .sqr()?
                .sum_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?;
            total += sq;
        }
    }
    Ok(total.sqrt())
}

/// Scales every gradient so that the global norm is at most `max_norm` (0 = no clipping), as
/// `torch.nn.utils.clip_grad_norm_` does. Returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut GradStore, vars: &[Var], max_norm: f64) -> anyhow::Result<f64> {
    let norm = grad_norm(grads, vars)?;
    if !norm.is_finite() {
        bail!("gradient norm is {norm}: the loss produced non-finite gradients");
    }
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for var in vars {
            if let Some(g) = grads.remove(var.as_tensor()) {
                grads.insert(var.as_tensor(), (g * scale)?);
            }
        }
    }
    Ok(norm)
}
