//! The AMX path for frozen weights (`fused::amx_matmul`): bf16x3 on the tile unit against an
//! f64 product, thread-count independence, and Qwen3's inference log-probs through it against
//! its f32 training forward. On a CPU without AMX only the packing rules are checked (the path
//! cannot run there, and the model falls back to the f32 GEMM the other tests cover).

use agentrl_model::fused::amx_matmul::{self, PackedWeight};
use agentrl_model::qwen3::{ForwardMode, Qwen3, Qwen3Config};
use candle_core::DType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::qwen3::{fixture, logprobs, options};

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn skip_without_amx() -> bool {
    if amx_matmul::amx_available() {
        return false;
    }
    eprintln!("no AMX on this CPU: skipped");
    true
}

#[test]
fn packs_only_whole_blocks() {
    assert!(amx_matmul::packable(32, 64));
    assert!(!amx_matmul::packable(48, 64));
    assert!(!amx_matmul::packable(64, 48));
    assert!(!amx_matmul::packable(0, 32));
    assert!(PackedWeight::pack(&random(32 * 48, 1), 32, 48).is_none());
    assert!(
        PackedWeight::pack(&random(32 * 32, 1), 32, 64).is_none(),
        "wrong length"
    );
    let packed = PackedWeight::pack(&random(64 * 96, 1), 64, 96).unwrap();
    assert_eq!((packed.k(), packed.n()), (64, 96));
}

/// Every output within 2⁻¹⁵ of `Σ|x||w|` of the exact product (f32 GEMM is within ~K·2⁻²⁴ of
/// it), for row counts that are and are not whole tiles; a wrong tile index, pair layout or
/// lost `lo` term fails by orders of magnitude (plain bf16 is off by ~2⁻⁹).
#[test]
fn matches_an_exact_product() {
    if skip_without_amx() {
        return;
    }
    for (m, k, n) in [(1, 32, 32), (17, 64, 96), (40, 3072, 64), (128, 1024, 160)] {
        let x = random(m * k, 7);
        let w = random(k * n, 8);
        let out = PackedWeight::pack(&w, k, n).unwrap().matmul(&x, m).unwrap();
        assert_eq!(out.len(), m * n);
        let mut worst = 0f64;
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut scale) = (0f64, 0f64);
                for l in 0..k {
                    let p = x[i * k + l] as f64 * w[l * n + j] as f64;
                    exact += p;
                    scale += p.abs();
                }
                worst = worst.max((out[i * n + j] as f64 - exact).abs() / scale);
            }
        }
        assert!(
            worst <= 2f64.powi(-15),
            "[{m}, {k}] x [{k}, {n}]: {worst:e}"
        );
    }
}

#[test]
fn does_not_depend_on_the_thread_count() {
    if skip_without_amx() {
        return;
    }
    let (m, k, n) = (50, 256, 320);
    let x = random(m * k, 3);
    let packed = PackedWeight::pack(&random(k * n, 4), k, n).unwrap();
    let on = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| packed.matmul(&x, m).unwrap())
    };
    let one = on(1);
    assert_eq!(one, on(2));
    assert_eq!(one, on(3));
}

/// A Qwen3 whose every size is a whole number of blocks (the `gqa2_tied` fixture's config,
/// random weights of std 0.02 as `bench qwen3` uses), scored over 40 tokens (past the 16-row
/// threshold): inference after `pack_for_amx` against inference before it (f32 GEMM) within the 1e-4 that
/// `bench qwen3` allows against transformers (measured: 3.3e-6; with std 0.2, a much sharper
/// model, 8e-5).
#[test]
fn qwen3_inference_log_probs_match_the_f32_forward() {
    if skip_without_amx() {
        return;
    }
    let config = Qwen3Config::from_file(&fixture("gqa2_tied").join("config.json")).unwrap();
    let mut model = Qwen3::random(config.clone(), 5, 0.02, &options(DType::F32, false)).unwrap();
    let ids: Vec<u32> = (0..41u32).map(|i| (i * 37 + 5) % 512).collect();
    let f32_path = logprobs(&model, &ids, ForwardMode::Inference);
    let few_rows_before = logprobs(&model, &ids[..12], ForwardMode::Inference);
    assert!(model.pack_for_amx().unwrap());
    let amx = logprobs(&model, &ids, ForwardMode::Inference);
    assert_eq!(
        logprobs(&model, &ids[..12], ForwardMode::Inference),
        few_rows_before,
        "below 16 rows the f32 path runs, unchanged by packing"
    );
    let mut trainable = Qwen3::random(config, 5, 0.02, &options(DType::F32, true)).unwrap();
    assert!(
        !trainable.pack_for_amx().unwrap(),
        "trainable weights are never packed"
    );
    let diff = amx
        .iter()
        .zip(&f32_path)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff <= 1e-4, "max |log-prob diff| {diff}");
    assert!(diff > 0.0, "the AMX path did not run");
}
