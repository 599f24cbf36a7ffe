//! The fused rotary embedding against the composed rotate-half ops (value and gradient), and
//! against candle's `rope_thd` (the inference forward's) bit for bit.

use crate::fused_check::{check, randn};
use agentrl_model::fused::rope;
use candle_core::{Tensor, D};

/// The rotate-half RoPE from candle's ops: `x·cos + [−x₂, x₁]·sin`.
fn composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let (_, seq, _, head_dim) = x.dims4().unwrap();
    let half = head_dim / 2;
    let cos = Tensor::cat(&[cos, cos], D::Minus1)
        .unwrap()
        .reshape((1, seq, 1, head_dim))
        .unwrap();
    let sin = Tensor::cat(&[sin, sin], D::Minus1)
        .unwrap()
        .reshape((1, seq, 1, head_dim))
        .unwrap();
    let first = x.narrow(D::Minus1, 0, half).unwrap();
    let second = x.narrow(D::Minus1, half, half).unwrap();
    let rotated = Tensor::cat(&[&second.neg().unwrap(), &first], D::Minus1).unwrap();
    (x.broadcast_mul(&cos).unwrap() + rotated.broadcast_mul(&sin).unwrap()).unwrap()
}

#[test]
fn rope_matches_the_composed_rotate_half_ops() {
    // Two rows of 40 positions (above the parallel threshold), 3 heads of 8.
    let (batch, seq, heads, head_dim) = (2, 40, 3, 8);
    let x = randn(&[batch, seq, heads, head_dim], 5);
    let cos = randn(&[seq, head_dim / 2], 6);
    let sin = randn(&[seq, head_dim / 2], 7);
    check(
        std::slice::from_ref(&x),
        |x| rope(&x[0], &cos, &sin).unwrap(),
        |x| composed(&x[0], &cos, &sin),
    );
    // The inference forward's op, bit for bit.
    let fused: Vec<f32> = rope(&x, &cos, &sin)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let candle: Vec<f32> = candle_nn::rotary_emb::rope_thd(&x, &cos, &sin)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(fused, candle);
    // Tables that do not fit the positions are refused.
    assert!(rope(&x, &cos.narrow(0, 0, seq - 1).unwrap(), &sin).is_err());
}
