//! The fused log-softmax gather against candle's log_softmax then gather, its composed
//! fallback, leading dims and half-precision logits.

use agentrl_model::fused::{composed_log_softmax_gather as composed, log_softmax_gather};
use candle_core::{DType, Device, Tensor, D};

use crate::fused_check::{check, randn};

#[test]
fn log_softmax_gather_matches_log_softmax_then_gather() {
    let targets = Tensor::from_vec(vec![0u32, 4, 2, 3, 1, 4], 6, &Device::Cpu).unwrap();
    check(
        &[randn(&[6, 5], 2)],
        |x| log_softmax_gather(&x[0], &targets).unwrap(),
        |x| {
            candle_nn::ops::log_softmax(&x[0], D::Minus1)
                .unwrap()
                .gather(&targets.unsqueeze(1).unwrap(), 1)
                .unwrap()
                .squeeze(1)
                .unwrap()
        },
    );
    let bad = Tensor::from_vec(vec![5u32; 6], 6, &Device::Cpu).unwrap();
    assert!(log_softmax_gather(&randn(&[6, 5], 2), &bad).is_err());
}

#[test]
fn the_composed_fallback_matches_the_fused_op() {
    let targets = Tensor::from_vec(vec![1u32, 0, 4, 4, 2, 3, 0], 7, &Device::Cpu).unwrap();
    check(
        &[randn(&[7, 5], 8)],
        |x| log_softmax_gather(&x[0], &targets).unwrap(),
        |x| composed(&x[0], &targets).unwrap(),
    );
    let bad = Tensor::from_vec(vec![5u32; 7], 7, &Device::Cpu).unwrap();
    assert!(composed(&randn(&[7, 5], 8), &bad).is_err());
}

#[test]
fn leading_dims_and_half_precision_logits_are_accepted() {
    let logits = randn(&[2, 3, 5], 9);
    let targets = Tensor::from_vec(vec![0u32, 1, 2, 3, 4, 0], (2, 3), &Device::Cpu).unwrap();
    let flat = log_softmax_gather(
        &logits.reshape((6, 5)).unwrap(),
        &targets.flatten_all().unwrap(),
    )
    .unwrap();
    let batched = log_softmax_gather(&logits, &targets).unwrap();
    assert_eq!(batched.dims(), &[2, 3]);
    let flat: Vec<f32> = flat.to_vec1().unwrap();
    assert_eq!(
        batched.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        flat
    );
    let half = log_softmax_gather(&logits.to_dtype(DType::BF16).unwrap(), &targets).unwrap();
    assert_eq!(half.dtype(), DType::F32);
    let wrong = Tensor::zeros((3, 2), DType::U32, &Device::Cpu).unwrap();
    assert!(log_softmax_gather(&logits, &wrong).is_err());
}
