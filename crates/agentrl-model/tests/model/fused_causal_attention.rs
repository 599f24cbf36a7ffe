//! The fused causal attention core against the composed candle ops, in value and gradient.

use agentrl_model::fused::causal_attention;
use candle_core::{Tensor, Var, D};

use crate::fused_check::{causal_mask, check, randn};

/// `softmax(scale · Q Kᵀ + mask) V` from `qkv [B, T, 3·D]` with candle's own ops.
fn composed(qkv: &Tensor, (b, t, heads, dh): (usize, usize, usize, usize), scale: f64) -> Tensor {
    let qkv = qkv
        .reshape((b, t, 3, heads, dh))
        .unwrap()
        .permute((2, 0, 3, 1, 4))
        .unwrap();
    let part = |i: usize| qkv.get(i).unwrap().contiguous().unwrap();
    let (q, k, v) = (part(0), part(1), part(2));
    let s = (q.matmul(&k.t().unwrap()).unwrap() * scale)
        .unwrap()
        .broadcast_add(&causal_mask(t))
        .unwrap();
    let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
    p.matmul(&v)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((b, t, heads * dh))
        .unwrap()
}

#[test]
fn causal_attention_matches_the_composed_ops() {
    let shape @ (b, t, heads, dh) = (2, 6, 3, 4);
    check(
        &[randn(&[b, t, 3 * heads * dh], 3)],
        |x| causal_attention(&x[0], heads, 0.5).unwrap(),
        |x| composed(&x[0], shape, 0.5),
    );
}

/// One long sequence, as a real model's update sees it: several blocks of query rows (the
/// last one partial), each head its own task.
#[test]
fn a_sequence_of_several_row_blocks_matches_the_composed_ops() {
    let shape @ (b, t, heads, dh) = (1, 75, 3, 8);
    check(
        &[randn(&[b, t, 3 * heads * dh], 5)],
        |x| causal_attention(&x[0], heads, 0.3).unwrap(),
        |x| composed(&x[0], shape, 0.3),
    );
}

/// The heads run as parallel tasks, each on its own buffers: the value and the gradient are
/// the same bits on one thread and on three.
#[test]
fn the_result_does_not_depend_on_the_thread_count() {
    let (b, t, heads, dh) = (2, 70, 5, 8);
    let input = randn(&[b, t, 3 * heads * dh], 7);
    let upstream = randn(&[b, t, heads * dh], 8);
    let run = |threads: usize| -> (Vec<f32>, Vec<f32>) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let qkv = Var::from_tensor(&input).unwrap();
            let out = causal_attention(qkv.as_tensor(), heads, 0.4).unwrap();
            let grads = (&out * &upstream)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let flat = |x: &Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            (flat(&out), flat(grads.get(qkv.as_tensor()).unwrap()))
        })
    };
    let (one, three) = (run(1), run(3));
    assert!(
        one.0 == three.0,
        "the output differs between 1 and 3 threads"
    );
    assert!(
        one.1 == three.1,
        "the gradient differs between 1 and 3 threads"
    );
}
