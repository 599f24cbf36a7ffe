//! The fused RMSNorm against candle's differentiable RmsNorm, in value and gradient.

use crate::fused_check::{check, randn};
use agentrl_model::fused::rms_norm;

#[test]
fn rms_norm_matches_the_differentiable_reference() {
    // Enough rows to cross the parallel chunking of the backward pass.
    check(
        &[randn(&[3, 50, 8], 4), randn(&[8], 5)],
        |x| rms_norm(&x[0], &x[1], 1e-5).unwrap(),
        |x| {
            candle_nn::RmsNorm::new(x[1].clone(), 1e-5)
                .forward_diff(&x[0])
                .unwrap()
        },
    );
}
