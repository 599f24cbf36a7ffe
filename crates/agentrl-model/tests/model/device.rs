//! The device choice without the `cuda` feature: the CPU.

use agentrl_model::best_device;

#[test]
fn without_the_cuda_feature_the_best_device_is_the_cpu() {
    let device = best_device().unwrap();
    assert!(device.is_cpu(), "expected the CPU, got {device:?}");
}
