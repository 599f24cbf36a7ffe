//! The kernels' inlined `exp` against libm over its whole range, and at its limits.

use agentrl_model::fused::exp;

/// Inside the range where `exp` neither saturates nor flushes to 0.
const MIN: f32 = -87.3;
const MAX: f32 = 88.3;

#[test]
fn agrees_with_libm_to_two_ulp_over_the_whole_range() {
    let mut worst = 0f64;
    let steps = 2_000_000;
    for k in 0..=steps {
        let x = MIN + (MAX - MIN) * k as f32 / steps as f32;
        let (got, want) = (exp(x) as f64, (x as f64).exp());
        worst = worst.max(((got - want) / want).abs());
    }
    assert!(worst < 2.5e-7, "worst relative error {worst:e}");
}

#[test]
fn edges_follow_the_limits() {
    assert_eq!(exp(0.0), 1.0);
    assert_eq!(exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp(-100.0), 0.0);
    assert_eq!(exp(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp(100.0), f32::INFINITY);
    assert!(exp(f32::NAN).is_nan());
    assert!((exp(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
}
