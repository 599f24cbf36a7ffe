//! TinyAgent's explicit decoding (`TinyAgent::decode_last` over a `DecodeCache`) against the
//! full forward and candle's ragged KV-cached path: the same logits at every row's last fed
//! position for ragged feeds, across calls, with the pointer head, on reused buffers, after
//! dropping and duplicating rows, on any number of threads; bad feeds are errors that name the row.

use agentrl_model::{KvCache, TinyAgent, TinyConfig};

use super::tiny_agent::{small, small_pointer};
use candle_core::{Device, IndexOp, Tensor};

/// `tiny_agent`'s small shape, past two key blocks of 16 positions (so attention crosses block
/// edges), with or without its pointer head.
fn config(pointer: bool) -> TinyConfig {
    let shape = if pointer { small_pointer() } else { small() };
    TinyConfig {
        max_seq: 40,
        ..shape
    }
}

/// The full forward's logits at the last of `tokens`.
fn full_last(model: &TinyAgent, tokens: &[u32]) -> Vec<f32> {
    let ids = Tensor::from_vec(tokens.to_vec(), (1, tokens.len()), &Device::Cpu).unwrap();
    let logits = model.forward(&ids).unwrap().logits;
    logits.i((0, tokens.len() - 1)).unwrap().to_vec1().unwrap()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (v, (x, y)) in got.iter().zip(want).enumerate() {
        assert!((x - y).abs() < 2e-5, "{what}, token {v}: {x} vs {y}");
    }
}

/// Three rows with candidate spans, a segment end (inside a chunk for row 0), then action-like
/// tokens, fed in chunks of different sizes, empty ones included.
fn rows() -> [Vec<u32>; 3] {
    let long: Vec<u32> = (0..37).map(|i| [1, 2, 3, 5, 6, 7, 8][i % 7]).collect();
    [
        vec![1, 13, 7, 8, 13, 15, 9, 15, 4, 5, 15, 2, 13, 6, 14, 13],
        vec![10, 11, 12, 14, 16, 14, 4, 15, 3],
        long,
    ]
}

/// Feeds `rows` through `model` in the chunks `cuts` gives (per call, how many tokens each row
/// feeds) and checks each row's last-position logits after every call against the full forward.
fn check_against_full(model: &TinyAgent, seqs: &[Vec<u32>], cuts: &[[usize; 3]]) {
    let mut cache = model.new_decode_cache(seqs.len());
    let mut fed = vec![0usize; seqs.len()];
    for (call, cut) in cuts.iter().enumerate() {
        let feeds: Vec<&[u32]> = seqs
            .iter()
            .zip(&fed)
            .zip(cut)
            .map(|((seq, &at), &n)| &seq[at..(at + n).min(seq.len())])
            .collect();
        let got = model.decode_last(&feeds, &mut cache).unwrap();
        for (row, (feed, logits)) in feeds.iter().zip(&got).enumerate() {
            fed[row] += feed.len();
            assert_eq!(cache.position(row), fed[row]);
            match logits {
                None => assert!(feed.is_empty(), "row {row} fed but got no logits"),
                Some(logits) => assert_close(
                    logits,
                    &full_last(model, &seqs[row][..fed[row]]),
                    &format!("call {call}, row {row}"),
                ),
            }
        }
    }
}

const CUTS: [[usize; 3]; 6] = [
    [3, 1, 20],
    [1, 4, 0],
    [0, 1, 10],
    [7, 1, 1],
    [1, 2, 6],
    [4, 0, 0],
];

#[test]
fn explicit_decoding_matches_the_full_forward() {
    for pointer in [false, true] {
        let model = TinyAgent::new(config(pointer), 11, &Device::Cpu).unwrap();
        check_against_full(&model, &rows(), &CUTS);
        // A second cache of the same model runs on the first one's emptied buffers.
        check_against_full(&model, &rows(), &CUTS);
    }
    // Heads of 16 and 32 channels (attention's register-held sums) and of 12 (any width).
    for (d_model, n_heads) in [(32, 2), (64, 2), (48, 4)] {
        let cfg = TinyConfig {
            d_model,
            n_heads,
            ..config(true)
        };
        let model = TinyAgent::new(cfg, 4, &Device::Cpu).unwrap();
        check_against_full(&model, &rows(), &CUTS);
    }
}

#[test]
fn explicit_decoding_does_not_depend_on_the_thread_count() {
    let model = TinyAgent::new(config(true), 3, &Device::Cpu).unwrap();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            // Many rows, so that more than one chunk runs at a time.
            let seqs: Vec<Vec<u32>> = (0..24)
                .map(|r| rows()[r % 3].iter().map(|&t| (t + r as u32) % 23).collect())
                .collect();
            let mut cache = model.new_decode_cache(seqs.len());
            let prompts: Vec<&[u32]> = seqs.iter().map(|s| &s[..s.len() - 1]).collect();
            let mut out = model.decode_last(&prompts, &mut cache).unwrap();
            let last: Vec<&[u32]> = seqs.iter().map(|s| &s[s.len() - 1..]).collect();
            out.extend(model.decode_last(&last, &mut cache).unwrap());
            out
        })
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn explicit_and_candle_decoding_agree_after_dropping_and_repeating_rows() {
    let model = TinyAgent::new(config(true), 5, &Device::Cpu).unwrap();
    let seqs = rows();
    let mut explicit = model.new_decode_cache(3);
    let mut candle = KvCache::new(model.config(), 3);
    let prompts: Vec<&[u32]> = seqs.iter().map(|s| &s[..9]).collect();
    model.decode_last(&prompts, &mut explicit).unwrap();
    model.forward_step_ragged(&prompts, &mut candle).unwrap();
    // Row 2 twice, row 0 once, row 1 dropped.
    explicit.retain_rows(&[2, 0, 2]).unwrap();
    candle.retain_rows(&[2, 0, 2]).unwrap();
    let next: [&[u32]; 3] = [&[5, 6], &[14], &[7]];
    let got = model.decode_last(&next, &mut explicit).unwrap();
    let want = model
        .forward_step_ragged(&next, &mut candle)
        .unwrap()
        .logits;
    for (row, feed) in next.iter().enumerate() {
        let want: Vec<f32> = want.i((row, feed.len() - 1)).unwrap().to_vec1().unwrap();
        assert_close(got[row].as_ref().unwrap(), &want, &format!("row {row}"));
    }
    // The two copies of row 2 went on separately.
    let mut a = seqs[2][..9].to_vec();
    a.extend([5, 6]);
    assert_close(got[0].as_ref().unwrap(), &full_last(&model, &a), "copy 1");
    assert_ne!(got[0], got[2]);
    assert!(explicit.retain_rows(&[3]).is_err(), "row 3 is out of range");
}

#[test]
fn bad_feeds_are_errors_that_name_the_row() {
    let model = TinyAgent::new(config(false), 1, &Device::Cpu).unwrap();
    let mut cache = model.new_decode_cache(2);
    let err = model.decode_last(&[&[1], &[99]], &mut cache).unwrap_err();
    assert!(err.to_string().contains("row 1"), "{err}");
    let too_long = vec![1u32; 41];
    let err = model
        .decode_last(&[&[], &too_long], &mut cache)
        .unwrap_err();
    assert!(err.to_string().contains("max_seq"), "{err}");
    assert!(model.decode_last(&[&[], &[]], &mut cache).is_err());
    assert!(
        model.decode_last(&[&[1]], &mut cache).is_err(),
        "one row for a cache of two"
    );
    // Nothing was fed by the refused calls.
    assert_eq!((cache.position(0), cache.position(1)), (0, 0));
}
