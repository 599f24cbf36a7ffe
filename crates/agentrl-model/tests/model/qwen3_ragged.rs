//! Qwen3's ragged batched decoding ([`Qwen3::forward_step_ragged`], [`RaggedKvCache`]) against
//! the full forward pass, and the engine-side inference copy ([`Qwen3::inference_copy`]).

use agentrl_model::lora::LoraConfig;
use agentrl_model::qwen3::{
    Architecture, ForwardMode, LoadOptions, Qwen3, Qwen3Config, RaggedKvCache,
};
use candle_core::{DType, Device, IndexOp, Tensor};

const VOCAB: usize = 97;

fn config(tie_word_embeddings: bool) -> Qwen3Config {
    Qwen3Config {
        vocab_size: VOCAB,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        tie_word_embeddings,
        max_position_embeddings: 64,
        architecture: Architecture::Qwen3,
        rope_scaling: None,
    }
}

fn options(dtype: DType, trainable: bool) -> LoadOptions {
    LoadOptions {
        dtype,
        device: Device::Cpu,
        trainable,
    }
}

fn model(tie: bool) -> Qwen3 {
    Qwen3::random(config(tie), 5, 0.3, &options(DType::F32, false)).unwrap()
}

/// A deterministic token sequence of length `len`, different per `salt`.
fn sequence(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 31 + salt * 17 + 3) % VOCAB as u32)
        .collect()
}

/// Full-forward logits `[T, V]` of one sequence.
fn full_logits(model: &Qwen3, ids: &[u32]) -> Vec<Vec<f32>> {
    let input = Tensor::from_slice(ids, (1, ids.len()), &Device::Cpu).unwrap();
    model
        .forward(&input)
        .unwrap()
        .i(0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec2()
        .unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Feeds `sequences` to a fresh cache in steps: `schedule[step][row]` tokens of row `row` at
/// step `step` (0 = nothing this step). Returns each row's logits at every fed position.
fn decode_in_steps(
    model: &Qwen3,
    sequences: &[Vec<u32>],
    schedule: &[Vec<usize>],
) -> Vec<Vec<Vec<f32>>> {
    let mut cache = RaggedKvCache::new(sequences.len());
    decode_with(model, sequences, schedule, &mut cache, |_| {})
}

/// [`decode_in_steps`] on `cache`, calling `after_step` with the cache after every step.
fn decode_with(
    model: &Qwen3,
    sequences: &[Vec<u32>],
    schedule: &[Vec<usize>],
    cache: &mut RaggedKvCache,
    mut after_step: impl FnMut(&RaggedKvCache),
) -> Vec<Vec<Vec<f32>>> {
    let mut out = vec![Vec::new(); sequences.len()];
    for step in schedule {
        let feeds: Vec<&[u32]> = sequences
            .iter()
            .zip(step)
            .enumerate()
            .map(|(row, (seq, &n))| {
                let start = cache.position(row).unwrap();
                &seq[start..start + n]
            })
            .collect();
        let logits: Vec<Vec<f32>> = model
            .forward_step_ragged(&feeds, cache)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec2()
            .unwrap();
        assert_eq!(logits.len(), step.iter().sum::<usize>());
        after_step(cache);
        let mut next = logits.into_iter();
        for (row, &n) in step.iter().enumerate() {
            out[row].extend(next.by_ref().take(n));
        }
    }
    out
}

/// Uneven prompts, prefill in chunks while other rows decode single tokens, rows idle for a
/// step: the schedule every test below feeds.
fn ragged_schedule() -> (Vec<Vec<u32>>, Vec<Vec<usize>>) {
    let sequences = vec![
        sequence(13, 0),
        sequence(7, 1),
        sequence(20, 2),
        sequence(3, 3),
    ];
    let schedule = vec![
        vec![5, 7, 9, 1],
        vec![1, 0, 4, 1],
        vec![1, 0, 1, 0],
        vec![4, 0, 6, 1],
        vec![2, 0, 0, 0],
    ];
    for (row, seq) in sequences.iter().enumerate() {
        let fed: usize = schedule.iter().map(|s| s[row]).sum();
        assert_eq!(fed, seq.len(), "schedule covers row {row}");
    }
    (sequences, schedule)
}

#[test]
fn ragged_decoding_matches_the_full_forward_at_every_position() {
    for tie in [false, true] {
        let model = model(tie);
        let (sequences, schedule) = ragged_schedule();
        let ragged = decode_in_steps(&model, &sequences, &schedule);
        for (row, seq) in sequences.iter().enumerate() {
            let full = full_logits(&model, seq);
            assert_eq!(ragged[row].len(), seq.len());
            for (pos, (a, b)) in ragged[row].iter().zip(&full).enumerate() {
                let diff = max_abs_diff(a, b);
                assert!(diff < 1e-4, "tie {tie}, row {row}, position {pos}: {diff}");
            }
        }
    }
}

#[test]
fn long_decoding_grows_the_cache_without_changing_the_logits() {
    let config = Qwen3Config {
        max_position_embeddings: 256,
        ..config(false)
    };
    let model = Qwen3::random(config, 5, 0.3, &options(DType::F32, false)).unwrap();
    // Two prefills, then 150 single-token steps (the cache grows past its first capacity
    // twice), one row pausing for a stretch in the middle.
    // Row 1: 3 + 120 single tokens + a last chunk of 7 = 130.
    let sequences = vec![sequence(170, 12), sequence(130, 13)];
    let mut schedule = vec![vec![20, 3]];
    for step in 0..150 {
        schedule.push(vec![1, usize::from(!(40..70).contains(&step))]);
    }
    schedule.push(vec![0, 7]);
    let ragged = decode_in_steps(&model, &sequences, &schedule);
    for (row, seq) in sequences.iter().enumerate() {
        for (pos, (a, b)) in ragged[row]
            .iter()
            .zip(&full_logits(&model, seq))
            .enumerate()
        {
            let diff = max_abs_diff(a, b);
            assert!(diff < 1e-4, "row {row}, position {pos}: {diff}");
        }
    }
}

#[test]
fn batched_ragged_decoding_equals_one_row_at_a_time() {
    let model = model(false);
    let (sequences, schedule) = ragged_schedule();
    let batched = decode_in_steps(&model, &sequences, &schedule);
    for (row, seq) in sequences.iter().enumerate() {
        let alone: Vec<Vec<usize>> = schedule
            .iter()
            .map(|s| vec![s[row]])
            .filter(|s| s[0] > 0)
            .collect();
        let single = decode_in_steps(&model, std::slice::from_ref(seq), &alone);
        for (pos, (a, b)) in batched[row].iter().zip(&single[0]).enumerate() {
            let diff = max_abs_diff(a, b);
            assert!(diff < 1e-5, "row {row}, position {pos}: {diff}");
        }
    }
}

#[test]
fn last_position_logits_are_the_last_row_of_every_feed() {
    let model = model(false);
    let sequences = [sequence(6, 4), sequence(2, 5), sequence(4, 6)];
    let feeds: Vec<&[u32]> = vec![&sequences[0], &[], &sequences[2]];
    let mut every_cache = RaggedKvCache::new(3);
    let every: Vec<Vec<f32>> = model
        .forward_step_ragged(&feeds, &mut every_cache)
        .unwrap()
        .to_vec2()
        .unwrap();
    let mut last_cache = RaggedKvCache::new(3);
    let last: Vec<Vec<f32>> = model
        .forward_step_ragged_last(&feeds, &mut last_cache)
        .unwrap()
        .to_vec2()
        .unwrap();
    assert_eq!(last.len(), 2);
    assert!(max_abs_diff(&last[0], &every[5]) < 1e-6);
    assert!(max_abs_diff(&last[1], &every[9]) < 1e-6);
    assert_eq!(last_cache.positions(), &[6, 0, 4]);
}

#[test]
fn retain_rows_reorders_forks_and_drops_rows() {
    let model = model(false);
    let sequences = [sequence(12, 7), sequence(5, 8), sequence(9, 9)];
    let mut cache = RaggedKvCache::new(3);
    // Row 0 feeds the longest prompt; row 1 and 2 leave slots invalid.
    let first: Vec<&[u32]> = vec![&sequences[0][..8], &sequences[1][..3], &sequences[2][..5]];
    model.forward_step_ragged(&first, &mut cache).unwrap();
    assert_eq!(cache.slots(), 8);
    // Keep row 2, then row 1 twice (a fork); row 0 is dropped, and with it the slots only it
    // used.
    cache.retain_rows(&[2, 1, 1]).unwrap();
    assert_eq!(cache.rows(), 3);
    assert_eq!(cache.positions(), &[5, 3, 3]);
    assert_eq!(cache.slots(), 5);
    // Continue: row 2's sequence, and two different continuations of row 1's prefix.
    let mut fork = sequences[1][..3].to_vec();
    fork.extend([40, 41]);
    let rest: Vec<&[u32]> = vec![&sequences[2][5..], &sequences[1][3..], &fork[3..]];
    let logits: Vec<Vec<f32>> = model
        .forward_step_ragged(&rest, &mut cache)
        .unwrap()
        .to_vec2()
        .unwrap();
    let want: Vec<(Vec<u32>, usize)> = vec![
        (sequences[2].clone(), 5),
        (sequences[1].clone(), 3),
        (fork.clone(), 3),
    ];
    let mut next = logits.into_iter();
    for (row, (seq, start)) in want.iter().enumerate() {
        let full = full_logits(&model, seq);
        for (pos, full_row) in full.iter().enumerate().skip(*start) {
            let got = next.next().unwrap();
            let diff = max_abs_diff(&got, full_row);
            assert!(diff < 1e-4, "kept row {row}, position {pos}: {diff}");
        }
    }
    assert!(next.next().is_none());
    assert!(cache.retain_rows(&[3]).is_err());
    cache.retain_rows(&[]).unwrap();
    assert_eq!((cache.rows(), cache.slots()), (0, 0));
}

#[test]
fn bad_feeds_are_named_errors_and_leave_the_cache_usable() {
    let model = model(false);
    let mut cache = RaggedKvCache::new(2);
    let err = model
        .forward_step_ragged(&[&[1, 2], &[VOCAB as u32]], &mut cache)
        .unwrap_err()
        .to_string();
    assert!(err.contains("row 1") && err.contains("vocabulary"), "{err}");
    let err = model
        .forward_step_ragged(&[&[1]], &mut cache)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cache holds 2"), "{err}");
    let err = model
        .forward_step_ragged(&[&[], &[]], &mut cache)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no row feeds"), "{err}");
    let long = vec![1u32; 65];
    let err = model
        .forward_step_ragged(&[&long, &[]], &mut cache)
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_position_embeddings"), "{err}");
    assert_eq!(cache.positions(), &[0, 0]);
    let ok = model
        .forward_step_ragged(&[&[1, 2], &[3]], &mut cache)
        .unwrap();
    assert_eq!(ok.dims(), &[3, VOCAB]);
}

#[test]
fn bf16_ragged_decoding_matches_the_bf16_inference_forward() {
    let trainer = model(false);
    let model = trainer.inference_copy(DType::BF16, &Device::Cpu).unwrap();
    assert_eq!(model.dtype(), DType::BF16);
    let (sequences, schedule) = ragged_schedule();
    let ragged = decode_in_steps(&model, &sequences, &schedule);
    let (mut vs_bf16, mut vs_f32) = (0f32, 0f32);
    for (row, seq) in sequences.iter().enumerate() {
        let input = Tensor::from_slice(seq, (1, seq.len()), &Device::Cpu).unwrap();
        let inference: Vec<Vec<f32>> = model
            .forward_mode(&input, ForwardMode::Inference)
            .unwrap()
            .i(0)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec2()
            .unwrap();
        let exact = full_logits(&trainer, seq);
        for (pos, got) in ragged[row].iter().enumerate() {
            vs_bf16 = vs_bf16.max(max_abs_diff(got, &inference[pos]));
            vs_f32 = vs_f32.max(max_abs_diff(got, &exact[pos]));
        }
    }
    eprintln!("bf16 ragged: max |logit diff| {vs_bf16:.3e} vs bf16 forward, {vs_f32:.3e} vs f32");
    // Same kernels in the same dtype: equal up to GEMM blocking. Against f32 the gap is bf16's
    // 8 mantissa bits on logits of magnitude ~6: nonzero, and well under one.
    assert!(vs_bf16 < 1e-2, "{vs_bf16}");
    assert!(vs_f32 > 1e-3 && vs_f32 < 0.5, "{vs_f32}");
}

#[test]
fn inference_copy_is_detached_and_refreshed_by_copy_weights_from() {
    let mut trainer = Qwen3::random(config(false), 11, 0.3, &options(DType::F32, true)).unwrap();
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "v_proj".into()],
    };
    trainer.add_lora(&lora, 3).unwrap();
    let ids = sequence(9, 10);
    let move_weights = |trainer: &Qwen3, by: f64| {
        for (_, var) in trainer.trainable_vars() {
            let moved = (var.as_tensor() + by).unwrap();
            var.set(&moved).unwrap();
        }
    };
    // Nonzero LoRA B factors, so the adapters matter.
    move_weights(&trainer, 0.01);
    let mut copy = trainer.inference_copy(DType::F32, &Device::Cpu).unwrap();
    assert!(copy.base_vars().is_empty());
    assert_eq!(copy.lora_vars().len(), trainer.lora_vars().len());
    let before = full_logits(&trainer, &ids);
    for (a, b) in full_logits(&copy, &ids).iter().zip(&before) {
        assert!(max_abs_diff(a, b) < 1e-6);
    }
    // A trainer update does not reach the copy until it is refreshed.
    move_weights(&trainer, 0.02);
    let after = full_logits(&trainer, &ids);
    let stale = full_logits(&copy, &ids);
    assert!(max_abs_diff(&stale[8], &after[8]) > 1e-3);
    assert!(max_abs_diff(&stale[8], &before[8]) < 1e-6);
    copy.copy_weights_from(&trainer).unwrap();
    for (a, b) in full_logits(&copy, &ids).iter().zip(&after) {
        assert!(max_abs_diff(a, b) < 1e-6);
    }
    // Only a frozen copy may be overwritten, and only from the same architecture.
    let mut trainable = Qwen3::random(config(false), 1, 0.3, &options(DType::F32, true)).unwrap();
    assert!(trainable.copy_weights_from(&trainer).is_err());
    let mut other = model(true);
    let err = other.copy_weights_from(&trainer).unwrap_err().to_string();
    assert!(err.contains("config"), "{err}");
}

#[test]
fn a_sync_from_a_frozen_base_refreshes_the_adapters_and_keeps_the_base() {
    // LoRA training: the trainer's base is frozen, only its adapters move.
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        target_modules: vec!["q_proj".into(), "v_proj".into()],
    };
    let frozen = |seed| {
        let mut model =
            Qwen3::random(config(false), seed, 0.3, &options(DType::F32, false)).unwrap();
        model.add_lora(&lora, 3).unwrap();
        model
    };
    let move_adapters = |model: &Qwen3, by: f64| {
        for (_, var) in model.lora_vars() {
            var.set(&(var.as_tensor() + by).unwrap()).unwrap();
        }
    };
    let trainer = frozen(11);
    assert!(trainer.base_vars().is_empty());
    move_adapters(&trainer, 0.01);
    let ids = sequence(9, 10);
    let mut copy = trainer.inference_copy(DType::F32, &Device::Cpu).unwrap();
    let copied_base = copy.clone();
    move_adapters(&trainer, 0.02);
    let after = full_logits(&trainer, &ids);
    assert!(max_abs_diff(&full_logits(&copy, &ids)[8], &after[8]) > 1e-3);
    copy.copy_weights_from(&trainer).unwrap();
    for (a, b) in full_logits(&copy, &ids).iter().zip(&after) {
        assert!(max_abs_diff(a, b) < 1e-6);
    }
    // The base was not copied again (nor, on the AMX path, packed again).
    assert!(copy.shares_base_with(&copied_base));
    // The copy's adapters are its own: a later trainer update does not leak into it.
    move_adapters(&trainer, 0.02);
    assert!(max_abs_diff(&full_logits(&copy, &ids)[8], &after[8]) < 1e-6);
    // Another base (a new model behind the same config) is copied in full.
    let other = frozen(12);
    move_adapters(&other, 0.01);
    copy.copy_weights_from(&other).unwrap();
    assert!(!copy.shares_base_with(&copied_base));
    for (a, b) in full_logits(&copy, &ids)
        .iter()
        .zip(&full_logits(&other, &ids))
    {
        assert!(max_abs_diff(a, b) < 1e-6);
    }
}

/// Four rows take turns feeding 30-token chunks (an observation each) while the others decode
/// single tokens: every chunk pads every other row, so without compaction the slots would grow
/// with the sum of all rows' chunks.
fn turn_taking_schedule() -> (Vec<Vec<u32>>, Vec<Vec<usize>>) {
    let rows = 4;
    let mut schedule: Vec<Vec<usize>> = Vec::new();
    for _round in 0..3 {
        for feeding in 0..rows {
            schedule.push(
                (0..rows)
                    .map(|row| if row == feeding { 30 } else { 1 })
                    .collect(),
            );
        }
    }
    let sequences = (0..rows)
        .map(|row| {
            let len: usize = schedule.iter().map(|s| s[row]).sum();
            sequence(len, 20 + row as u32)
        })
        .collect();
    (sequences, schedule)
}

#[test]
fn compaction_bounds_the_slots_and_keeps_every_logit() {
    let config = Qwen3Config {
        max_position_embeddings: 256,
        ..config(false)
    };
    let model = Qwen3::random(config, 5, 0.3, &options(DType::F32, false)).unwrap();
    let (sequences, schedule) = turn_taking_schedule();
    let padded_slots: usize = schedule.iter().map(|s| s.iter().max().unwrap()).sum();
    let longest = sequences.iter().map(Vec::len).max().unwrap();
    assert!(
        padded_slots > 2 * longest + 64,
        "the schedule must trigger compaction"
    );

    let mut cache = RaggedKvCache::new(sequences.len());
    let mut most_slots = 0;
    let out = decode_with(&model, &sequences, &schedule, &mut cache, |cache| {
        most_slots = most_slots.max(cache.slots());
    });
    assert!(
        most_slots <= 2 * longest + 64 + 30,
        "slots reached {most_slots} (every row's feeds: {padded_slots})"
    );
    for (row, seq) in sequences.iter().enumerate() {
        for (pos, (a, b)) in out[row].iter().zip(&full_logits(&model, seq)).enumerate() {
            let diff = max_abs_diff(a, b);
            assert!(diff < 1e-4, "row {row}, position {pos}: {diff}");
        }
    }

    // An explicit compaction leaves exactly the longest row's tokens, and decoding goes on.
    cache.compact().unwrap();
    assert_eq!(cache.slots(), *cache.positions().iter().max().unwrap());
    let more: Vec<Vec<u32>> = (0..sequences.len())
        .map(|row| {
            let mut seq = sequences[row].clone();
            seq.extend([1 + row as u32, 2]);
            seq
        })
        .collect();
    let feeds: Vec<&[u32]> = more.iter().map(|seq| &seq[seq.len() - 2..]).collect();
    let logits: Vec<Vec<f32>> = model
        .forward_step_ragged(&feeds, &mut cache)
        .unwrap()
        .to_vec2()
        .unwrap();
    for (row, seq) in more.iter().enumerate() {
        let full = full_logits(&model, seq);
        for j in 0..2 {
            let diff = max_abs_diff(&logits[row * 2 + j], &full[seq.len() - 2 + j]);
            assert!(diff < 1e-4, "after compaction, row {row}: {diff}");
        }
    }
}
