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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn params() -> AdamWParams {
        AdamWParams {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }

    /// Two steps on a 3-vector, checked against the AdamW formula computed by hand in f64.
    #[test]
    fn adamw_matches_the_formula() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let theta0 = [0.5f64, -1.0, 2.0];
        let var = Var::new(&[0.5f32, -1.0, 2.0], &dev)?;
        let mut opt = AdamW::new(vec![("w".into(), var.clone())], params())?;
        let p = params();
        let (mut m, mut v, mut th) = ([0f64; 3], [0f64; 3], theta0);
        for (t, lr) in [(1, 0.01f64), (2, 0.02)] {
            // loss = sum(w^3) → grad = 3 w^2
            let loss = var.as_tensor().powf(3.0)?.sum_all()?;
            let grads = loss.backward()?;
            opt.step(&grads, lr)?;
            for i in 0..3 {
                let g = 3.0 * th[i] * th[i];
                m[i] = p.beta1 * m[i] + (1.0 - p.beta1) * g;
                v[i] = p.beta2 * v[i] + (1.0 - p.beta2) * g * g;
                let mh = m[i] / (1.0 - p.beta1.powi(t));
                let vh = v[i] / (1.0 - p.beta2.powi(t));
                th[i] = th[i] * (1.0 - lr * p.weight_decay) - lr * mh / (vh.sqrt() + p.eps);
            }
        }
        let got = var.as_tensor().to_vec1::<f32>()?;
        for i in 0..3 {
            assert!(
                (got[i] as f64 - th[i]).abs() < 1e-6,
                "{i}: {} vs {}",
                got[i],
                th[i]
            );
        }
        assert_eq!(opt.steps_taken(), 2);
        Ok(())
    }

    /// After the moments are zeroed, a step with an all-zero gradient leaves the weights
    /// where they are (the old momentum would keep moving them), and the next real step is a
    /// fresh optimizer's first step; the count of updates taken goes on.
    #[test]
    fn zeroed_moments_forget_the_momentum() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let var = Var::new(&[0.5f32, -1.0, 2.0], &dev)?;
        // No weight decay: it would shrink the weights on any step, gradient or not.
        let no_decay = AdamWParams {
            weight_decay: 0.0,
            ..params()
        };
        let mut opt = AdamW::new(vec![("w".into(), var.clone())], no_decay)?;
        let cube = |v: &Var| -> anyhow::Result<GradStore> {
            Ok(v.as_tensor().powf(3.0)?.sum_all()?.backward()?)
        };
        let zero = |v: &Var| -> anyhow::Result<GradStore> {
            let zeros = v.as_tensor().zeros_like()?;
            Ok(v.as_tensor().mul(&zeros)?.sum_all()?.backward()?)
        };
        for _ in 0..3 {
            opt.step(&cube(&var)?, 0.01)?;
        }
        let before = var.as_tensor().to_vec1::<f32>()?;
        opt.step(&zero(&var)?, 0.01)?;
        assert_ne!(
            var.as_tensor().to_vec1::<f32>()?,
            before,
            "momentum moves the weights"
        );

        opt.reset_moments()?;
        let held = var.as_tensor().to_vec1::<f32>()?;
        opt.step(&zero(&var)?, 0.01)?;
        assert_eq!(var.as_tensor().to_vec1::<f32>()?, held);
        assert_eq!(opt.steps_taken(), 5);

        opt.reset_moments()?;
        let twin = Var::new(held.as_slice(), &dev)?;
        let mut fresh = AdamW::new(vec![("w".into(), twin.clone())], no_decay)?;
        opt.step(&cube(&var)?, 0.01)?;
        fresh.step(&cube(&twin)?, 0.01)?;
        assert_eq!(
            var.as_tensor().to_vec1::<f32>()?,
            twin.as_tensor().to_vec1::<f32>()?
        );
        Ok(())
    }

    /// Saving after one step and continuing from the saved state equals continuing directly.
    #[test]
    fn state_round_trip_continues_identically() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let dir = tempfile::tempdir()?;
        let run = |split: bool| -> anyhow::Result<Vec<f32>> {
            let var = Var::new(&[0.3f32, -0.7], &dev)?;
            let mut opt = AdamW::new(vec![("w".into(), var.clone())], params())?;
            for step in 0..3 {
                if split && step == 1 {
                    let path = dir.path().join("opt.safetensors");
                    opt.save(&path)?;
                    let weights = var.as_tensor().copy()?;
                    let var2 = Var::from_tensor(&weights)?;
                    let mut opt2 = AdamW::new(vec![("w".into(), var2.clone())], params())?;
                    opt2.load(&path)?;
                    for _ in 1..3 {
                        let grads = var2.as_tensor().sqr()?.sum_all()?.backward()?;
                        opt2.step(&grads, 0.05)?;
                    }
                    return Ok(var2.as_tensor().to_vec1()?);
                }
                let grads = var.as_tensor().sqr()?.sum_all()?.backward()?;
                opt.step(&grads, 0.05)?;
            }
            Ok(var.as_tensor().to_vec1()?)
        };
        assert_eq!(run(false)?, run(true)?);
        Ok(())
    }

    #[test]
    fn clipping_scales_to_max_norm() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let a = Var::new(&[3.0f32], &dev)?;
        let b = Var::new(&[4.0f32], &dev)?;
        // grads: 2a = 6, 2b = 8 → norm 10
        let loss = (a.as_tensor().sqr()? + b.as_tensor().sqr()?)?.sum_all()?;
        let mut grads = loss.backward()?;
        let vars = vec![a.clone(), b.clone()];
        let norm = clip_grad_norm(&mut grads, &vars, 1.0)?;
        assert!((norm - 10.0).abs() < 1e-5);
        let after = grad_norm(&grads, &vars)?;
        assert!((after - 1.0).abs() < 1e-5, "{after}");
        // No clipping below the threshold.
        let mut grads = loss.backward()?;
        clip_grad_norm(&mut grads, &vars, 100.0)?;
        assert!((grad_norm(&grads, &vars)? - 10.0).abs() < 1e-5);
        Ok(())
    }

    #[test]
    fn load_rejects_missing_and_misshapen_state() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("opt.safetensors");
        let var = Var::new(&[1f32, 2.0], &dev)?;
        AdamW::new(vec![("w".into(), var)], params())?.save(&path)?;
        let other = Var::new(&[1f32, 2.0, 3.0], &dev)?;
        let err = AdamW::new(vec![("w".into(), other)], params())?
            .load(&path)
            .unwrap_err();
        assert!(format!("{err:#}").contains("shape"), "{err:#}");
        let renamed = Var::new(&[1f32, 2.0], &dev)?;
        let err = AdamW::new(vec![("u".into(), renamed)], params())?
            .load(&path)
            .unwrap_err();
        assert!(format!("{err:#}").contains("m.u"), "{err:#}");
        Ok(())
    }
}
