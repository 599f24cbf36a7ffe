//! TinyAgent's candle forward: shapes and seeded init, a gradient for every parameter, the
//! pointer head and its span encoding, the ragged KV-cached path against the full forward, and
//! save/load.

use agentrl_model::tiny::{PointerPool, SpanScan};
use agentrl_model::{KvCache, TinyAgent, TinyConfig};
use candle_core::{DType, Device, IndexOp, Tensor, D};

pub(crate) fn small() -> TinyConfig {
    TinyConfig {
        vocab_size: 23,
        d_model: 16,
        n_layers: 2,
        n_heads: 2,
        mlp_ratio: 2,
        max_seq: 32,
        rms_eps: 1e-5,
        pointer_markers: Vec::new(),
        pointer_segment_end: 0,
        pointer_pool: PointerPool::MeanLast,
    }
}

/// `small()` with a pointer head over markers 13, 14, 15 and segment end 4.
pub(crate) fn small_pointer() -> TinyConfig {
    TinyConfig {
        pointer_markers: vec![13, 14, 15],
        pointer_segment_end: 4,
        ..small()
    }
}

/// A prompt with spans `13 … 13` and `15 … 15` (no span for 14), then the segment end.
const POINTER_PROMPT: [u32; 12] = [1, 3, 13, 7, 8, 13, 15, 9, 10, 11, 15, 4];

fn ids(rows: &[&[u32]]) -> Tensor {
    let t = rows[0].len();
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), t), &Device::Cpu).unwrap()
}

#[test]
fn forward_shapes_and_seeded_init() {
    let model = TinyAgent::new(small(), 7, &Device::Cpu).unwrap();
    let out = model
        .forward(&ids(&[&[1, 2, 3, 4], &[5, 6, 7, 8]]))
        .unwrap();
    assert_eq!(out.logits.dims(), &[2, 4, 23]);
    assert_eq!(out.values.dims(), &[2, 4]);
    let again = TinyAgent::new(small(), 7, &Device::Cpu).unwrap();
    let other = TinyAgent::new(small(), 8, &Device::Cpu).unwrap();
    let w = |m: &TinyAgent| {
        let (_, lm_head) = m
            .named_vars()
            .into_iter()
            .find(|(name, _)| name == "lm_head.weight")
            .unwrap();
        lm_head.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(w(&model), w(&again));
    assert_ne!(w(&model), w(&other));
}

#[test]
fn every_parameter_gets_a_finite_nonzero_gradient() {
    for cfg in [small(), small_pointer()] {
        let model = TinyAgent::new(cfg.clone(), 3, &Device::Cpu).unwrap();
        let mut first = POINTER_PROMPT.to_vec();
        first.extend([5, 15, 6]);
        let second: Vec<u32> = (1..=15).collect();
        let input = ids(&[&first, &second]);
        let out = model.forward(&input).unwrap();
        // A policy-gradient-like loss on the log-probs plus a value loss, so that every
        // parameter (value head included) is upstream of the scalar.
        let logp = candle_nn::ops::log_softmax(&out.logits, D::Minus1).unwrap();
        let weights = Tensor::arange(0f32, 23.0, &Device::Cpu)
            .unwrap()
            .cos()
            .unwrap();
        let pg = logp.broadcast_mul(&weights).unwrap().mean_all().unwrap();
        let value = out.values.sqr().unwrap().mean_all().unwrap();
        let loss = (pg + value).unwrap();
        let grads = loss.backward().unwrap();
        let names: Vec<String> = model.named_vars().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names.iter().any(|n| n.starts_with("pointer.")),
            !cfg.pointer_markers.is_empty()
        );
        for (name, var) in model.named_vars() {
            let grad = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            let g: Vec<f32> = grad.flatten_all().unwrap().to_vec1().unwrap();
            assert!(
                g.iter().all(|x| x.is_finite()),
                "{name}: non-finite gradient"
            );
            let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!(norm > 0.0, "{name}: zero gradient");
        }
    }
}

#[test]
fn pointer_scores_only_present_candidates_after_the_segment_end() {
    let plain = TinyAgent::new(small(), 9, &Device::Cpu).unwrap();
    let pointer = TinyAgent::new(small_pointer(), 9, &Device::Cpu).unwrap();
    let mut seq = POINTER_PROMPT.to_vec();
    seq.extend([5, 2, 6]);
    let a = plain.forward(&ids(&[&seq])).unwrap().logits;
    let b = pointer.forward(&ids(&[&seq])).unwrap().logits;
    let end = POINTER_PROMPT.len() - 1;
    for t in 0..seq.len() {
        let x = a.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
        let y = b.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
        for token in 0..23 {
            let scored = t >= end && (token == 13 || token == 15);
            assert_eq!(x[token] != y[token], scored, "t={t} token={token}");
        }
    }
}

#[test]
fn encoded_spans_depend_on_content_not_on_order() {
    let model = TinyAgent::new(small_pointer(), 5, &Device::Cpu).unwrap();
    let scan = |tokens: &[u32]| {
        let mut scan = SpanScan::new(model.config());
        for (p, &t) in tokens.iter().enumerate() {
            scan.feed(t, p, model.config());
        }
        scan
    };
    // The same two candidates in the other order (and with a different prefix).
    let a = scan(&POINTER_PROMPT);
    let b = scan(&[1, 3, 9, 15, 9, 10, 11, 15, 13, 7, 8, 13, 4]);
    assert_eq!(a.spans, b.spans);
    let swapped = scan(&[1, 13, 9, 10, 11, 13, 15, 7, 8, 15, 4]);
    let encoded = model.encode_spans(&[a, swapped]).unwrap();
    let row = |r: usize, c: usize| encoded.i((r, c)).unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(row(0, 0), row(1, 2));
    assert_eq!(row(0, 2), row(1, 0));
    assert_ne!(row(0, 0), row(0, 2));
    assert!(
        row(0, 1).iter().all(|&x| x == 0.0),
        "absent candidate encodes to zeros"
    );
}

/// `mean-last` pools half the mean and half the last position. The blocks are causal, so a
/// span's prefix has the same hidden states as the span's first positions, and the last
/// position's state is `n·mean(span) − (n−1)·mean(prefix)`, from two `mean` encodings of a
/// model with the same weights.
#[test]
fn mean_last_pooling_is_half_the_mean_and_half_the_last_position() {
    let model = |pool| {
        let cfg = TinyConfig {
            pointer_pool: pool,
            ..small_pointer()
        };
        TinyAgent::new(cfg, 5, &Device::Cpu).unwrap()
    };
    let (mean_model, mean_last_model) = (model(PointerPool::Mean), model(PointerPool::MeanLast));
    let encode = |model: &TinyAgent, span: &[u32]| {
        let mut tokens = vec![1, 13];
        tokens.extend_from_slice(span);
        tokens.extend([13, 4]);
        let mut scan = SpanScan::new(model.config());
        for (p, &t) in tokens.iter().enumerate() {
            scan.feed(t, p, model.config());
        }
        let encoded = model.encode_spans(&[scan]).unwrap();
        encoded.i((0, 0)).unwrap().to_vec1::<f32>().unwrap()
    };
    let span = [7, 8, 9, 10, 11];
    let n = span.len() as f32;
    let mean = encode(&mean_model, &span);
    let prefix_mean = encode(&mean_model, &span[..span.len() - 1]);
    let got = encode(&mean_last_model, &span);
    assert_ne!(got, mean);
    for i in 0..got.len() {
        let last = n * mean[i] - (n - 1.0) * prefix_mean[i];
        let want = 0.5 * mean[i] + 0.5 * last;
        assert!(
            (got[i] - want).abs() < 1e-4,
            "dim {i}: {} vs {want}",
            got[i]
        );
    }
    assert_eq!(
        PointerPool::MeanLast.weights(4),
        vec![0.125, 0.125, 0.125, 0.625]
    );
    assert_eq!(PointerPool::Mean.weights(4), vec![0.25; 4]);
    assert!(PointerPool::MeanLast.weights(0).is_empty());
}

#[test]
fn ragged_incremental_forward_matches_full_forward() {
    // At max_seq 10 the 14 slots (real tokens plus padding) outgrow the cache's buffers,
    // which start at max_seq slots and must grow.
    let short = TinyConfig {
        max_seq: 10,
        ..small()
    };
    for cfg in [small(), small_pointer(), short] {
        ragged_incremental_matches_full(cfg);
    }
}

fn ragged_incremental_matches_full(cfg: TinyConfig) {
    let model = TinyAgent::new(cfg, 11, &Device::Cpu).unwrap();
    // Row a: candidate spans, the segment end inside a chunk, then action-like tokens.
    let seq_a: Vec<u32> = vec![1, 13, 7, 13, 14, 8, 4, 5, 14];
    let seq_b: Vec<u32> = vec![10, 11, 12, 13, 14, 15, 16];
    // Feed both rows in chunks of different sizes, including empty chunks.
    let chunks_a: [&[u32]; 4] = [&seq_a[0..3], &seq_a[3..4], &seq_a[4..4], &seq_a[4..9]];
    let chunks_b: [&[u32]; 4] = [&seq_b[0..1], &seq_b[1..5], &seq_b[5..6], &seq_b[6..7]];
    let mut cache = KvCache::new(model.config(), 2);
    let mut got_a = Vec::new();
    let mut got_b = Vec::new();
    for (ca, cb) in chunks_a.iter().zip(chunks_b.iter()) {
        let out = model.forward_step_ragged(&[ca, cb], &mut cache).unwrap();
        for j in 0..ca.len() {
            got_a.push(out.logits.i((0, j)).unwrap().to_vec1::<f32>().unwrap());
        }
        for j in 0..cb.len() {
            got_b.push(out.logits.i((1, j)).unwrap().to_vec1::<f32>().unwrap());
        }
    }
    assert_eq!(cache.position(0), seq_a.len());
    assert_eq!(cache.position(1), seq_b.len());
    for (seq, got) in [(&seq_a, &got_a), (&seq_b, &got_b)] {
        let full = model.forward(&ids(&[seq])).unwrap();
        for (t, row) in got.iter().enumerate() {
            let want = full.logits.i((0, t)).unwrap().to_vec1::<f32>().unwrap();
            for (x, y) in row.iter().zip(want.iter()) {
                assert!((x - y).abs() < 1e-5, "position {t}: {x} vs {y}");
            }
        }
    }
    // Dropping a row keeps the other row's state intact.
    cache.retain_rows(&[1]).unwrap();
    let out = model.forward_step_ragged(&[&[17]], &mut cache).unwrap();
    let mut extended = seq_b.clone();
    extended.push(17);
    let full = model.forward(&ids(&[&extended])).unwrap();
    let want = full.logits.i((0, 7)).unwrap().to_vec1::<f32>().unwrap();
    let got = out.logits.i((0, 0)).unwrap().to_vec1::<f32>().unwrap();
    for (x, y) in got.iter().zip(want.iter()) {
        assert!((x - y).abs() < 1e-5);
    }
}

#[test]
fn save_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.safetensors");
    let model = TinyAgent::new(small(), 5, &Device::Cpu).unwrap();
    model.save(&path).unwrap();
    let loaded = TinyAgent::load(small(), &path, &Device::Cpu).unwrap();
    let input = ids(&[&[3, 1, 4, 1, 5]]);
    let a = model.forward(&input).unwrap().logits.flatten_all().unwrap();
    let b = loaded
        .forward(&input)
        .unwrap()
        .logits
        .flatten_all()
        .unwrap();
    assert_eq!(a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
    let wrong = TinyConfig {
        d_model: 32,
        ..small()
    };
    assert!(TinyAgent::load(wrong, &path, &Device::Cpu).is_err());
}

#[test]
fn rejects_bad_config_and_overlong_input() {
    let bad = TinyConfig {
        n_heads: 3,
        ..small()
    };
    assert!(TinyAgent::new(bad, 0, &Device::Cpu).is_err());
    let model = TinyAgent::new(small(), 0, &Device::Cpu).unwrap();
    let long = Tensor::zeros((1, 33), DType::U32, &Device::Cpu).unwrap();
    assert!(model.forward(&long).is_err());
}
