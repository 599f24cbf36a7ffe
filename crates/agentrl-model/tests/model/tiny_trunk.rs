//! TinyAgent's explicit trunk (`TinyAgent::forward_at_for_update`, the update's fast path) against
//! candle's autograd, the oracle: the same logits and values, and the same gradient for every
//! weight, at f32 tolerance, with and without the pointer head (whose span encoding runs the
//! blocks inside candle's graph, so a trunk weight's gradient comes from both sides), on
//! batches of one shard per row and of uneven shards; and the same gradients, bit for bit, on
//! any number of threads.

use candle_core::{Device, Tensor, D};

use agentrl_model::tiny::PointerPool;
use agentrl_model::{ConstrainedPolicy, ForUpdate, LogitBias, Policy, TinyAgent, TinyConfig};

fn config(pointer: bool) -> TinyConfig {
    TinyConfig {
        vocab_size: 29,
        d_model: 24,
        n_layers: 2,
        n_heads: 3,
        mlp_ratio: 3,
        max_seq: 96,
        rms_eps: 1e-5,
        pointer_markers: if pointer {
            vec![13, 14, 15]
        } else {
            Vec::new()
        },
        pointer_segment_end: 4,
        pointer_pool: PointerPool::MeanLast,
    }
}

/// Three rows of 40 tokens; the first holds two candidate spans and the segment end.
fn batch() -> Tensor {
    let mut first = vec![1, 3, 13, 7, 8, 13, 15, 9, 10, 11, 15, 4];
    first.extend((0..28).map(|i| (i * 7 % 29) as u32));
    let second: Vec<u32> = (0..40).map(|i| (i * 5 % 29) as u32).collect();
    let third: Vec<u32> = (0..40).map(|i| ((i * i + 3) % 29) as u32).collect();
    let flat: Vec<u32> = [first, second, third].concat();
    Tensor::from_vec(flat, (3, 40), &Device::Cpu).unwrap()
}

/// Eleven rows of 40 tokens (the trunk splits them into shards of two and one): [`batch`]'s
/// three, then others.
fn wide_batch() -> Tensor {
    let extra: Vec<u32> = (0..8 * 40)
        .map(|i| ((i * 11 + i / 40) % 29) as u32)
        .collect();
    let extra = Tensor::from_vec(extra, (8, 40), &Device::Cpu).unwrap();
    Tensor::cat(&[&batch(), &extra], 0).unwrap()
}

/// The fast path at every position, reshaped back to `[B, T, ..]` like `forward`'s output.
fn fast_forward(model: &TinyAgent, ids: &Tensor) -> ForUpdate {
    let (b, t) = ids.dims2().unwrap();
    let positions = Tensor::arange(0u32, (b * t) as u32, &Device::Cpu).unwrap();
    let ForUpdate { output, pending } = model.forward_at_for_update(ids, &positions).unwrap();
    let v = output.logits.dim(1).unwrap();
    ForUpdate {
        output: agentrl_model::PolicyOutput {
            logits: output.logits.reshape((b, t, v)).unwrap(),
            values: output.values.map(|values| values.reshape((b, t)).unwrap()),
        },
        pending,
    }
}

/// A loss that reaches every weight: a weighted sum of log-probs and a value loss.
fn loss(logits: &Tensor, values: &Tensor) -> Tensor {
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1).unwrap();
    let weights = Tensor::arange(0f32, 29.0, &Device::Cpu)
        .unwrap()
        .cos()
        .unwrap();
    let pg = logp.broadcast_mul(&weights).unwrap().mean_all().unwrap();
    let value = values.sqr().unwrap().mean_all().unwrap();
    (pg + value).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// `|a − b| ≤ atol + rtol · max|b|` elementwise.
fn assert_close(name: &str, a: &[f32], b: &[f32], rtol: f32) {
    assert_eq!(a.len(), b.len(), "{name}: length");
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= 1e-6 + rtol * scale,
        "{name}: max |fast − candle| = {worst:e} against max |candle| = {scale:e}"
    );
}

#[test]
fn the_explicit_trunk_matches_candle_autograd_in_output_and_every_gradient() {
    for (pointer, ids) in [
        (false, batch()),
        (true, batch()),
        (false, wide_batch()),
        (true, wide_batch()),
    ] {
        let model = TinyAgent::new(config(pointer), 11, &Device::Cpu).unwrap();

        let reference = model.forward(&ids).unwrap();
        let reference_grads = loss(&reference.logits, &reference.values)
            .backward()
            .unwrap();

        // A pass over other tokens first, one with a longer batch and one that never runs its
        // backward pass: the passes after them refill those buffers, so stale values must not
        // leak into the next pass.
        for stale in [
            ids.flip(&[1]).unwrap(),
            Tensor::cat(&[&ids, &ids], 1).unwrap(),
        ] {
            let ForUpdate { output, pending } = fast_forward(&model, &stale);
            let mut grads = loss(&output.logits, output.values.as_ref().unwrap())
                .backward()
                .unwrap();
            ForUpdate::complete(pending, &mut grads).unwrap();
        }
        drop(fast_forward(&model, &ids.flip(&[0]).unwrap()));

        let ForUpdate { output, pending } = fast_forward(&model, &ids);
        assert!(pending.is_some(), "the CPU path runs the explicit trunk");
        assert_close(
            "logits",
            &flat(&output.logits),
            &flat(&reference.logits),
            1e-5,
        );
        let values = output.values.expect("TinyAgent has a value head");
        assert_close("values", &flat(&values), &flat(&reference.values), 1e-5);
        let mut grads = loss(&output.logits, &values).backward().unwrap();
        ForUpdate::complete(pending, &mut grads).unwrap();

        for (name, var) in model.named_vars() {
            let fast = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("pointer={pointer}: no gradient for {name}"));
            let slow = reference_grads.get(var.as_tensor()).unwrap();
            assert_close(
                &format!("pointer={pointer}: {name}"),
                &flat(fast),
                &flat(slow),
                1e-4,
            );
        }
    }
}

#[test]
fn the_gradients_do_not_depend_on_the_thread_count() {
    let model = TinyAgent::new(config(true), 5, &Device::Cpu).unwrap();
    let ids = wide_batch();
    let gradients = |threads: usize| -> Vec<Vec<f32>> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let ForUpdate { output, pending } = fast_forward(&model, &ids);
            let mut grads = loss(&output.logits, output.values.as_ref().unwrap())
                .backward()
                .unwrap();
            ForUpdate::complete(pending, &mut grads).unwrap();
            model
                .named_vars()
                .iter()
                .map(|(_, var)| flat(grads.get(var.as_tensor()).unwrap()))
                .collect()
        })
    };
    let one = gradients(1);
    for threads in [2, 3] {
        assert!(
            gradients(threads) == one,
            "{threads} threads changed a gradient"
        );
    }
}

#[test]
fn a_loss_that_does_not_reach_the_trunk_leaves_its_weights_without_gradient() {
    let model = TinyAgent::new(config(false), 3, &Device::Cpu).unwrap();
    let ForUpdate { output, pending } = fast_forward(&model, &batch());
    // Only the value head's bias: the trunk's output never enters the loss's graph.
    let bias = model
        .named_vars()
        .into_iter()
        .find(|(name, _)| name == "value_head.bias")
        .unwrap()
        .1;
    let loss = (bias.as_tensor().sum_all().unwrap()
        + output.logits.sum_all().unwrap().affine(0.0, 0.0).unwrap())
    .unwrap();
    let mut grads = loss.backward().unwrap();
    ForUpdate::complete(pending, &mut grads).unwrap();
    for (name, var) in model.named_vars() {
        if name.starts_with("blocks.") || name.ends_with("_emb.weight") {
            let g = grads.get(var.as_tensor()).map(flat).unwrap_or_default();
            assert!(g.iter().all(|&x| x == 0.0), "{name}: {g:?}");
        }
    }
}

#[test]
fn an_out_of_vocabulary_id_is_an_error_naming_it() {
    let model = TinyAgent::new(config(false), 3, &Device::Cpu).unwrap();
    let ids = Tensor::from_vec(vec![1u32, 2, 99], (1, 3), &Device::Cpu).unwrap();
    let positions = Tensor::arange(0u32, 3, &Device::Cpu).unwrap();
    let err = match model.forward_at_for_update(&ids, &positions) {
        Ok(_) => panic!("an id outside the vocabulary was accepted"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("99") && err.contains("vocabulary"), "{err}");
}

/// Every third position, as the update scores its loss positions.
fn some_positions() -> Tensor {
    let picked: Vec<u32> = (0..120).filter(|p| p % 3 == 1).collect();
    let n = picked.len();
    Tensor::from_vec(picked, n, &Device::Cpu).unwrap()
}

#[test]
fn scoring_at_positions_matches_candle_with_and_without_a_logit_bias() {
    for pointer in [false, true] {
        let model = TinyAgent::new(config(pointer), 5, &Device::Cpu).unwrap();
        // A bias that forbids a different token after each previous token.
        let table: Vec<f32> = (0..29 * 29)
            .map(|i| {
                if i % 29 == (i / 29 * 7) % 29 {
                    -1e4
                } else {
                    0.0
                }
            })
            .collect();
        let bias = LogitBias::new(table, 29, &Device::Cpu).unwrap();
        let constrained = ConstrainedPolicy::new(&model, Some(bias));
        let (ids, positions) = (batch(), some_positions());
        let policies: [&dyn Policy; 2] = [&model, &constrained];
        for (which, policy) in policies.into_iter().enumerate() {
            let label = format!("pointer={pointer} policy={which}");
            let reference = policy.forward_at(&ids, &positions).unwrap();
            let reference_values = reference.values.unwrap();
            let reference_grads = loss(&reference.logits, &reference_values)
                .backward()
                .unwrap();
            let ForUpdate { output, pending } =
                policy.forward_at_for_update(&ids, &positions).unwrap();
            assert_close(
                &label,
                &flat(&output.logits),
                &flat(&reference.logits),
                1e-5,
            );
            let values = output.values.unwrap();
            assert_close(&label, &flat(&values), &flat(&reference_values), 1e-5);
            let mut grads = loss(&output.logits, &values).backward().unwrap();
            ForUpdate::complete(pending, &mut grads).unwrap();
            for (name, var) in model.named_vars() {
                let fast = grads.get(var.as_tensor()).unwrap();
                let slow = reference_grads.get(var.as_tensor()).unwrap();
                assert_close(&format!("{label}: {name}"), &flat(fast), &flat(slow), 1e-4);
            }
        }
    }
}
