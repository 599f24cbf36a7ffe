//! The fused decoding attention over ragged KV caches against the composed ops it replaces
//! (scores, additive mask, softmax, values), on a narrowed view of a larger cache buffer.

use std::sync::Arc;

use crate::fused_check::randn;
use agentrl_model::fused::ragged_decode_attention;
use candle_core::{Device, Tensor, D};

/// `softmax(scale · q Kᵀ + mask) V` from candle's ops; `mask` 0 / −∞ per row and slot.
fn composed(q: &Tensor, keys: &Tensor, values: &Tensor, mask: &[f32], scale: f64) -> Tensor {
    let (rows, _, _, _) = q.dims4().unwrap();
    let slots = keys.dim(2).unwrap();
    let mask = Tensor::from_slice(mask, (rows, 1, 1, slots), &Device::Cpu).unwrap();
    let keys = keys.contiguous().unwrap();
    let values = values.contiguous().unwrap();
    let scores = (q.matmul(&keys.t().unwrap()).unwrap() * scale)
        .unwrap()
        .broadcast_add(&mask)
        .unwrap();
    candle_nn::ops::softmax(&scores, D::Minus1)
        .unwrap()
        .matmul(&values)
        .unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn ragged_decode_attention_matches_the_composed_ops() {
    // 3 rows, 2 key/value heads of 3 query heads each, head_dim 20 (not a multiple of the
    // lanes), 37 slots in use of a 50-slot buffer.
    let (rows, heads, group, d, slots, capacity) = (3, 2, 3, 20, 37, 50);
    let q = randn(&[rows, heads, group, d], 1);
    let key_buffer = randn(&[rows, heads, capacity, d], 2);
    let value_buffer = randn(&[rows, heads, capacity, d], 3);
    let keys = key_buffer.narrow(2, 0, slots).unwrap();
    let values = value_buffer.narrow(2, 0, slots).unwrap();
    let scale = 1.0 / (d as f64).sqrt();

    // Every slot visible.
    let fused = ragged_decode_attention(&q, &keys, &values, None, scale).unwrap();
    let want = composed(&q, &keys, &values, &vec![0.0; rows * slots], scale);
    assert_eq!(fused.dims(), want.dims());
    assert!(max_abs_diff(&fused, &want) < 1e-5);

    // Row-dependent holes: row 0 sees every third slot, row 1 the first 5 and the last,
    // row 2 only the last.
    let visible: Vec<bool> = (0..rows * slots)
        .map(|i| {
            let (row, slot) = (i / slots, i % slots);
            match row {
                0 => slot % 3 == 0,
                1 => slot < 5 || slot == slots - 1,
                _ => slot == slots - 1,
            }
        })
        .collect();
    let mask: Vec<f32> = visible
        .iter()
        .map(|&v| if v { 0.0 } else { f32::NEG_INFINITY })
        .collect();
    let fused = ragged_decode_attention(
        &q,
        &keys,
        &values,
        Some(Arc::from(visible.as_slice())),
        scale,
    )
    .unwrap();
    let want = composed(&q, &keys, &values, &mask, scale);
    assert!(max_abs_diff(&fused, &want) < 1e-5);

    // A mask of the wrong size is refused.
    let short: Arc<[bool]> = Arc::from(&visible[1..]);
    assert!(ragged_decode_attention(&q, &keys, &values, Some(short), scale).is_err());
}
