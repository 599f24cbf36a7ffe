//! AdamW against its formula, moment resets, saved state, and gradient clipping. The tensor
//! tests compute on 1 thread, like every module of this binary.

use agentrl_train::optim::{clip_grad_norm, grad_norm, AdamW, AdamWParams};
use candle_core::backprop::GradStore;
use candle_core::{Device, Var};

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
    agentrl_train::threads::apply(1)?;
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
    agentrl_train::threads::apply(1)?;
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
    agentrl_train::threads::apply(1)?;
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
    agentrl_train::threads::apply(1)?;
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
    agentrl_train::threads::apply(1)?;
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
