//! Test helpers shared by the op tests: every fused op must equal the composed candle ops it
//! replaces, in value and in gradient.

use candle_core::{Device, Tensor, Var};

pub(crate) fn randn(shape: &[usize], seed: u64) -> Tensor {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn close(a: &Tensor, b: &Tensor, tol: f32) {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}

/// Value and gradient of `f_fused` equal those of `f_ref`, under a random upstream weight.
pub(crate) fn check(
    inputs: &[Tensor],
    f_fused: impl Fn(&[Tensor]) -> Tensor,
    f_ref: impl Fn(&[Tensor]) -> Tensor,
) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let fused = f_fused(&ts);
    let reference = f_ref(&ts);
    close(&fused, &reference, 1e-5);
    let weight = randn(fused.dims(), 99);
    let gf = (fused * &weight)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let gr = (reference * &weight)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    for v in &vars {
        let a = gf
            .get(v.as_tensor())
            .expect("fused op produced no gradient");
        let b = gr
            .get(v.as_tensor())
            .expect("reference produced no gradient");
        close(a, b, 1e-4);
    }
}

/// Additive `[T, T]` mask: 0 where key `j <= i`, −∞ above the diagonal.
pub(crate) fn causal_mask(t: usize) -> Tensor {
    let mask: Vec<f32> = (0..t * t)
        .map(|k| {
            if k % t <= k / t {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap()
}
