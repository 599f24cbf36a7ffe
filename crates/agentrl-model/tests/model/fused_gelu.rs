//! The fused GELU against candle's tanh GELU, in value and gradient.

use crate::fused_check::{check, randn};
use agentrl_model::fused::gelu;

#[test]
fn gelu_matches_candle_gelu() {
    check(
        &[randn(&[5, 9], 3)],
        |x| gelu(&x[0]).unwrap(),
        |x| x[0].gelu().unwrap(),
    );
}
