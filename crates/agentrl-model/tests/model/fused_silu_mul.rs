//! The fused SwiGLU gate against candle's `silu(gate) * up`, and its refusal of unequal shapes.

use crate::fused_check::randn;
use agentrl_model::fused::silu_mul;

#[test]
fn silu_mul_matches_candle_silu_times_up() {
    // Larger than one parallel chunk (4096), with a ragged tail.
    let (gate, up) = (randn(&[3, 4100], 1), randn(&[3, 4100], 2));
    let fused = silu_mul(&(&gate * 4.0).unwrap(), &up).unwrap();
    let composed = ((&gate * 4.0).unwrap().silu().unwrap() * &up).unwrap();
    let diff = (fused - composed)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff < 1e-5, "max |fused - composed| = {diff}");
    assert!(silu_mul(&gate, &randn(&[3, 4099], 2)).is_err());
}
