//! The fused causal softmax against the masked candle softmax, in value and gradient, and its
//! gradient against finite differences.

use agentrl_model::fused::causal_softmax;
use candle_core::{Device, Tensor, Var, D};

use crate::fused_check::{causal_mask, check, randn};

#[test]
fn causal_softmax_matches_masked_softmax() {
    let t = 7;
    let mask = causal_mask(t);
    check(
        &[randn(&[2, 3, t, t], 1)],
        |x| causal_softmax(&x[0], 0.5).unwrap(),
        |x| {
            let s = (&x[0] * 0.5).unwrap().broadcast_add(&mask).unwrap();
            candle_nn::ops::softmax(&s, D::Minus1).unwrap()
        },
    );
}

#[test]
fn gradients_match_finite_differences() {
    // Central differences in f64-accumulated sums on a tiny input, for the two ops whose
    // backward is least like a textbook formula.
    let x = randn(&[1, 1, 3, 3], 6);
    let w = randn(&[1, 1, 3, 3], 7);
    let f = |x: &Tensor| -> f32 {
        (causal_softmax(x, 0.7).unwrap() * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    let var = Var::from_tensor(&x).unwrap();
    let grads = (causal_softmax(var.as_tensor(), 0.7).unwrap() * &w)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let analytic: Vec<f32> = grads
        .get(var.as_tensor())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let base: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    let h = 1e-2f32;
    for k in 0..base.len() {
        let shifted = |delta: f32| {
            let mut v = base.clone();
            v[k] += delta;
            f(&Tensor::from_vec(v, (1, 1, 3, 3), &Device::Cpu).unwrap())
        };
        let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!(
            (numeric - analytic[k]).abs() < 2e-3,
            "{k}: {numeric} vs {}",
            analytic[k]
        );
    }
}
