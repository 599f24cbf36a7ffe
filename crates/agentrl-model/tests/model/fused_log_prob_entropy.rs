//! The fused log-prob-and-entropy op against candle's log-softmax, gather, `exp`, product and
//! sum: both outputs, their gradients alone and together, masked and `−∞` logits, bad input.

use agentrl_model::fused::log_prob_and_entropy;
use candle_core::{DType, Device, Tensor, D};

use crate::fused_check::{check, randn};

fn composed(logits: &Tensor, targets: &Tensor) -> (Tensor, Tensor) {
    let log_p = candle_nn::ops::log_softmax(logits, D::Minus1).unwrap();
    let picked = log_p
        .gather(&targets.unsqueeze(1).unwrap(), 1)
        .unwrap()
        .squeeze(1)
        .unwrap();
    let entropy = log_p
        .exp()
        .unwrap()
        .mul(&log_p)
        .unwrap()
        .sum(D::Minus1)
        .unwrap()
        .neg()
        .unwrap();
    (picked, entropy)
}

fn both(pair: (Tensor, Tensor)) -> Tensor {
    Tensor::cat(&[pair.0, pair.1], 0).unwrap()
}

#[test]
fn log_prob_and_entropy_match_the_composed_ops_in_value_and_gradient() {
    // 300 columns: more than one block of the kernel's exponentials.
    for (rows, vocab, seed) in [(6, 5, 2), (9, 300, 3), (130, 17, 4)] {
        let targets: Vec<u32> = (0..rows).map(|r| ((r * 7 + 3) % vocab) as u32).collect();
        let targets = Tensor::from_vec(targets, rows, &Device::Cpu).unwrap();
        let logits = (randn(&[rows, vocab], seed) * 3.0).unwrap();
        let fused = |x: &[Tensor]| log_prob_and_entropy(&x[0], &targets).unwrap();
        let reference = |x: &[Tensor]| composed(&x[0], &targets);
        check(
            std::slice::from_ref(&logits),
            |x| fused(x).0,
            |x| reference(x).0,
        );
        check(
            std::slice::from_ref(&logits),
            |x| fused(x).1,
            |x| reference(x).1,
        );
        check(&[logits], |x| both(fused(x)), |x| both(reference(x)));
    }
}

#[test]
fn a_masked_logit_adds_nothing_and_gets_no_gradient() {
    // A grammar's finite mask (−1e4) matches the composed ops; a logit of −∞ gives the
    // entropy of the other columns (the composed ops give NaN there) and a zero gradient.
    let targets = Tensor::from_vec(vec![0u32, 2, 1], 3, &Device::Cpu).unwrap();
    let base = randn(&[3, 4], 5);
    let mut masked: Vec<f32> = base.flatten_all().unwrap().to_vec1().unwrap();
    masked[3] = -1.0e4;
    masked[7] = -1.0e4;
    let masked = Tensor::from_vec(masked, (3, 4), &Device::Cpu).unwrap();
    check(
        &[masked],
        |x| both(log_prob_and_entropy(&x[0], &targets).unwrap()),
        |x| both(composed(&x[0], &targets)),
    );

    let mut with_inf: Vec<f32> = base.flatten_all().unwrap().to_vec1().unwrap();
    for row in 0..3 {
        with_inf[row * 4 + 3] = f32::NEG_INFINITY;
    }
    let with_inf = candle_core::Var::from_vec(with_inf, (3, 4), &Device::Cpu).unwrap();
    let (logp, entropy) = log_prob_and_entropy(with_inf.as_tensor(), &targets).unwrap();
    let (ref_logp, ref_entropy) = composed(&base.narrow(1, 0, 3).unwrap(), &targets);
    for (a, b) in [(&logp, &ref_logp), (&entropy, &ref_entropy)] {
        let (a, b): (Vec<f32>, Vec<f32>) = (a.to_vec1().unwrap(), b.to_vec1().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }
    let grads = (logp + entropy)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let grad: Vec<f32> = grads
        .get(with_inf.as_tensor())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(grad.iter().all(|g| g.is_finite()), "{grad:?}");
    assert!((0..3).all(|row| grad[row * 4 + 3] == 0.0), "{grad:?}");
}

#[test]
fn bad_targets_shapes_and_dtypes_are_errors() {
    let logits = randn(&[4, 5], 6);
    let out_of_vocab = Tensor::from_vec(vec![0u32, 1, 5, 2], 4, &Device::Cpu).unwrap();
    assert!(log_prob_and_entropy(&logits, &out_of_vocab).is_err());
    let too_few = Tensor::from_vec(vec![0u32, 1], 2, &Device::Cpu).unwrap();
    assert!(log_prob_and_entropy(&logits, &too_few).is_err());
    let targets = Tensor::from_vec(vec![0u32, 1, 2, 3], 4, &Device::Cpu).unwrap();
    assert!(log_prob_and_entropy(&logits.to_dtype(DType::BF16).unwrap(), &targets).is_err());
    assert!(log_prob_and_entropy(&logits.unsqueeze(0).unwrap(), &targets).is_err());
}
