//! The fused SwiGLU gate against candle's `silu(gate) * up`, in value and gradient, and its
//! refusal of unequal shapes.

use crate::fused_check::{check, randn};
use agentrl_model::fused::silu_mul;

#[test]
fn silu_mul_matches_candle_silu_times_up() {
    // Larger than one parallel chunk (4096), with a ragged tail; gates out to ±8, where the
    // sigmoid saturates.
    let (gate, up) = (randn(&[3, 4100], 1), randn(&[3, 4100], 2));
    check(
        &[(&gate * 4.0).unwrap(), up],
        |x| silu_mul(&x[0], &x[1]).unwrap(),
        |x| (x[0].silu().unwrap() * &x[1]).unwrap(),
    );
    // One task's worth (below the parallel threshold), as a decoding step's MLP.
    check(
        &[randn(&[2, 48], 3), randn(&[2, 48], 4)],
        |x| silu_mul(&x[0], &x[1]).unwrap(),
        |x| (x[0].silu().unwrap() * &x[1]).unwrap(),
    );
    assert!(silu_mul(&gate, &randn(&[3, 4099], 2)).is_err());
}
