//! The fused causal attention core against the composed candle ops, in value and gradient.

use agentrl_model::fused::causal_attention;
use candle_core::D;

use crate::fused_check::{causal_mask, check, randn};

#[test]
fn causal_attention_matches_the_composed_ops() {
    let (b, t, heads, dh) = (2, 6, 3, 4);
    let d = heads * dh;
    let mask = causal_mask(t);
    check(
        &[randn(&[b, t, 3 * d], 3)],
        |x| causal_attention(&x[0], heads, 0.5).unwrap(),
        |x| {
            let qkv = x[0]
                .reshape((b, t, 3, heads, dh))
                .unwrap()
                .permute((2, 0, 3, 1, 4))
                .unwrap();
            let part = |i: usize| qkv.get(i).unwrap().contiguous().unwrap();
            let (q, k, v) = (part(0), part(1), part(2));
            let s = (q.matmul(&k.t().unwrap()).unwrap() * 0.5)
                .unwrap()
                .broadcast_add(&mask)
                .unwrap();
            let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
            p.matmul(&v)
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .reshape((b, t, d))
                .unwrap()
        },
    );
}
