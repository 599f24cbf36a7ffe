//! The thin path for decoding's few-row products (`fused::thin_matmul`): against candle's
//! matmul for every row count it takes and odd shapes, row and thread-count independence, and
//! Qwen3's decoding through it (a few rows) against its training forward, also after a weight
//! sync replaced the packed weights. On a CPU without AVX2/FMA only the packing rules and the
//! refusal are checked (the model then runs candle's matmul, which the other tests cover).

use agentrl_model::fused::thin_matmul::{self, ThinWeight};
use agentrl_model::qwen3::{ForwardMode, Qwen3, Qwen3Config};
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::qwen3::{fixture, logprobs, options};

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn skip_without_avx2() -> bool {
    if thin_matmul::thin_available() {
        return false;
    }
    eprintln!("no AVX2/FMA on this CPU: skipped");
    true
}

/// candle's `x · W` for row-major `x: [m, k]`, `w: [k, n]`.
fn candle_product(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let x = Tensor::from_slice(x, (m, k), &Device::Cpu).unwrap();
    let w = Tensor::from_slice(w, (k, n), &Device::Cpu).unwrap();
    x.matmul(&w)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn packs_any_shape_and_refuses_a_wrong_length() {
    assert!(
        ThinWeight::pack(&random(12, 1), 3, 5).is_none(),
        "wrong length"
    );
    assert!(ThinWeight::pack(&[], 0, 5).is_none());
    assert!(ThinWeight::pack(&[], 5, 0).is_none());
    let packed = ThinWeight::pack(&random(7 * 33, 1), 7, 33).unwrap();
    assert_eq!((packed.k(), packed.n()), (7, 33));
}

#[test]
fn takes_one_to_sixteen_rows_of_the_right_length() {
    if skip_without_avx2() {
        assert!(ThinWeight::pack(&random(8 * 16, 1), 8, 16)
            .unwrap()
            .matmul(&random(8, 2), 1)
            .is_none());
        return;
    }
    let (k, n) = (8, 16);
    let packed = ThinWeight::pack(&random(k * n, 1), k, n).unwrap();
    assert!(packed.matmul(&[], 0).is_none());
    assert!(packed.matmul(&random(17 * k, 2), 17).is_none(), "17 rows");
    assert!(packed.matmul(&random(3 * k + 1, 2), 3).is_none(), "length");
    assert_eq!(packed.matmul(&random(16 * k, 2), 16).unwrap().len(), 16 * n);
}

/// Every output within 1e-5 of `Σ|x||w|` of candle's f32 product (both sum in f32, in different
/// orders), for every row count the path takes and shapes that are not whole panels; a wrong
/// panel, row or column index fails by orders of magnitude.
#[test]
fn matches_candles_matmul() {
    if skip_without_avx2() {
        return;
    }
    let shapes = [
        (1, 1),
        (1, 16),
        (7, 33),
        (64, 15),
        (576, 192),
        (577, 200),
        (1536, 576),
    ];
    for (k, n) in shapes {
        let w = random(k * n, 8);
        let packed = ThinWeight::pack(&w, k, n).unwrap();
        for m in 1..=thin_matmul::MAX_ROWS {
            let x = random(m * k, 7 + m as u64);
            let out = packed.matmul(&x, m).unwrap();
            let reference = candle_product(&x, &w, m, k, n);
            assert_eq!(out.len(), reference.len());
            let mut worst = 0f64;
            for i in 0..m {
                for j in 0..n {
                    let scale: f64 = (0..k)
                        .map(|l| (x[i * k + l] as f64 * w[l * n + j] as f64).abs())
                        .sum();
                    let diff = (out[i * n + j] as f64 - reference[i * n + j] as f64).abs();
                    worst = worst.max(diff / scale);
                }
            }
            assert!(worst <= 1e-5, "[{m}, {k}] x [{k}, {n}]: {worst:e}");
        }
    }
}

/// A row's outputs are the same bits whether it is multiplied alone or with up to 15 others,
/// on one thread or three: a sequence decoded in a batch gets what it gets alone.
#[test]
fn a_row_does_not_depend_on_the_other_rows_or_the_threads() {
    if skip_without_avx2() {
        return;
    }
    let (k, n) = (200, 130);
    let packed = ThinWeight::pack(&random(k * n, 4), k, n).unwrap();
    let x = random(16 * k, 3);
    let on = |threads: usize, m: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| packed.matmul(&x[..m * k], m).unwrap())
    };
    let all = on(1, 16);
    assert_eq!(all, on(3, 16));
    for m in 1..16 {
        assert_eq!(on(2, m), all[..m * n], "{m} rows");
    }
    let last_alone = packed.matmul(&x[15 * k..], 1).unwrap();
    assert_eq!(last_alone, all[15 * n..]);
}

/// Qwen3 (the `gqa2_tied` fixture's config, random weights) scored over 12 tokens, a product
/// of 12 rows that the thin path takes, against its training forward (candle's matmul): within
/// f32 rounding.
#[test]
fn qwen3_few_row_inference_matches_the_training_forward() {
    if skip_without_avx2() {
        return;
    }
    let config = Qwen3Config::from_file(&fixture("gqa2_tied").join("config.json")).unwrap();
    let model = Qwen3::random(config, 5, 0.02, &options(DType::F32, false)).unwrap();
    let ids: Vec<u32> = (0..13u32).map(|i| (i * 37 + 5) % 512).collect();
    let thin = logprobs(&model, &ids, ForwardMode::Inference);
    let train = logprobs(&model, &ids, ForwardMode::Train);
    let diff = thin
        .iter()
        .zip(&train)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff <= 1e-5, "max |log-prob diff| {diff}");
}

/// An inference copy that decoded (so packed its weights), then caught up with another base by
/// `copy_weights_from`: its few-row products use the new weights, the same bits as the new base
/// scoring on its own. A stale packing would keep the old model's log-probs.
#[test]
fn a_weight_sync_replaces_the_packed_weights() {
    if skip_without_avx2() {
        return;
    }
    let config = Qwen3Config::from_file(&fixture("gqa2_tied").join("config.json")).unwrap();
    let old = Qwen3::random(config.clone(), 5, 0.02, &options(DType::F32, false)).unwrap();
    let new = Qwen3::random(config, 6, 0.02, &options(DType::F32, false)).unwrap();
    let ids: Vec<u32> = (0..9u32).map(|i| (i * 53 + 11) % 512).collect();
    let mut copy = old.inference_copy(DType::F32, &Device::Cpu).unwrap();
    let before = logprobs(&copy, &ids, ForwardMode::Inference);
    assert_eq!(before, logprobs(&old, &ids, ForwardMode::Inference));
    copy.copy_weights_from(&new).unwrap();
    let after = logprobs(&copy, &ids, ForwardMode::Inference);
    assert_eq!(after, logprobs(&new, &ids, ForwardMode::Inference));
    assert_ne!(after, before);
}
