//! `frozen_matmul` against candle's `x.matmul(Wᵀ)`: the same forward bits and the same gradient
//! for `x`, no gradient computed for the frozen weight, and candle's matmul (with the weight's
//! gradient) where the weight is trainable.

use candle_core::{Tensor, Var};

use crate::fused_check::randn;
use agentrl_model::fused::frozen_matmul;

/// `W [out, in]` stored as the frozen layout keeps it (`[in, out]` storage, viewed as `[out, in]`).
fn frozen_weight(out: usize, inp: usize, seed: u64) -> Tensor {
    randn(&[inp, out], seed).contiguous().unwrap().t().unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn frozen_matmul_equals_candles_matmul_and_skips_the_weights_gradient() {
    for (rows, inp, out) in [(1, 8, 3), (37, 64, 96), (130, 576, 192)] {
        let weight = frozen_weight(out, inp, 7);
        let x = Var::from_tensor(&randn(&[rows, inp], 1)).unwrap();
        let upstream = randn(&[rows, out], 2);

        let ours = frozen_matmul(x.as_tensor(), &weight.t().unwrap()).unwrap();
        let theirs = x.as_tensor().matmul(&weight.t().unwrap()).unwrap();
        assert_eq!(
            max_abs_diff(&ours, &theirs),
            0.0,
            "the forward is candle's own"
        );

        let ours_grads = (&ours * &upstream)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let theirs_grads = (&theirs * &upstream)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (dx_ours, dx_theirs) = (
            ours_grads.get(x.as_tensor()).unwrap(),
            theirs_grads.get(x.as_tensor()).unwrap(),
        );
        let scale = max_abs_diff(dx_theirs, &dx_theirs.zeros_like().unwrap());
        assert!(
            max_abs_diff(dx_ours, dx_theirs) <= 1e-6 * scale.max(1.0),
            "x's gradient is candle's dy · W"
        );
        // candle's matmul also computed the frozen weight's gradient (its operand is the
        // `Wᵀ` view); the frozen op computes none: nothing in the graph holds the weight.
        let ours_nodes = ours_grads.get_ids().count();
        let theirs_nodes = theirs_grads.get_ids().count();
        assert!(
            ours_nodes < theirs_nodes,
            "{rows}x{inp}x{out}: gradients for {ours_nodes} tensors, candle's matmul {theirs_nodes}"
        );
    }
}

#[test]
fn a_trainable_weight_gets_its_gradient() {
    let weight = Var::from_tensor(&randn(&[5, 8], 3)).unwrap();
    let x = Var::from_tensor(&randn(&[4, 8], 4)).unwrap();
    let y = frozen_matmul(x.as_tensor(), &weight.as_tensor().t().unwrap()).unwrap();
    let grads = y.sum_all().unwrap().backward().unwrap();
    assert!(grads.get(weight.as_tensor()).is_some());
    assert!(grads.get(x.as_tensor()).is_some());
}
