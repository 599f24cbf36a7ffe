//! The training batch built from episodes: loss masks on action tokens only, padding, and
//! the engine's sampling log-probs against the trainer's forward.

use crate::driver::{limits, rollouts};
use agentrl_gym::Reward;
use agentrl_rollout::{Batch, Episode, TokenSource};
use candle_core::Device;

fn hand_made() -> Episode {
    use TokenSource::*;
    // <bos> <obs> x </obs> | a a | <obs> y </obs> | a a a | <obs> z </obs> | a
    let sources = [
        Prompt,
        Prompt,
        Prompt,
        Prompt,
        Action,
        Action,
        Observation,
        Observation,
        Observation,
        Action,
        Action,
        Action,
        Observation,
        Observation,
        Observation,
        Action,
    ];
    let turn_ids = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2];
    Episode {
        task_id: "t".into(),
        group_id: 5,
        tokens: (10..26).collect(),
        sources: sources.to_vec(),
        turn_ids: turn_ids.to_vec(),
        logprobs: sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if *s == Action {
                    -(i as f32) / 10.0
                } else {
                    0.0
                }
            })
            .collect(),
        actions: vec![],
        reward: Reward {
            score: 0.5,
            ..Reward::default()
        },
        turns: 3,
        format_errors: 0,
        truncated: false,
        weight_version: 0,
        drifted: None,
    }
}

#[test]
fn masks_train_only_on_action_tokens_of_multi_turn_episodes() {
    let long = hand_made();
    let mut short = hand_made();
    short.tokens.truncate(6);
    short.sources.truncate(6);
    short.turn_ids.truncate(6);
    short.logprobs.truncate(6);
    short.group_id = 1;
    let batch = Batch::from_episodes(&[long.clone(), short], 0, &Device::Cpu).unwrap();
    assert_eq!((batch.batch_size(), batch.seq_len()), (2, 15));
    let mask = batch.loss_mask.to_vec2::<f32>().unwrap();
    let want_long: Vec<f32> = (1..16)
        .map(|i| f32::from(u8::from(long.sources[i] == TokenSource::Action)))
        .collect();
    assert_eq!(mask[0], want_long);
    assert_eq!(
        mask[0],
        vec![0., 0., 0., 1., 1., 0., 0., 0., 1., 1., 1., 0., 0., 0., 1.]
    );
    // The short row: its two action tokens, then padding that is never trained on.
    assert_eq!(
        mask[1],
        vec![0., 0., 0., 1., 1., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0.]
    );
    let inputs = batch.input_ids.to_vec2::<u32>().unwrap();
    let targets = batch.targets.to_vec2::<u32>().unwrap();
    assert_eq!(inputs[0], (10..25).collect::<Vec<u32>>());
    assert_eq!(targets[0], (11..26).collect::<Vec<u32>>());
    assert_eq!(&inputs[1][..5], &[10, 11, 12, 13, 14]);
    assert!(inputs[1][5..].iter().all(|&t| t == 0));
    assert!(targets[1][5..].iter().all(|&t| t == 0));
    let old = batch.old_logprobs.to_vec2::<f32>().unwrap();
    assert_eq!(old[0][3], -0.4);
    assert_eq!(old[0][14], -1.5);
    assert_eq!(old[0][5], 0.0, "observation targets carry no log-prob");
    let turns = batch.turn_ids.to_vec2::<u32>().unwrap();
    assert_eq!(turns[0], vec![0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2]);
    assert_eq!(batch.group_ids, vec![5, 1]);
    assert_eq!(batch.rewards, vec![0.5, 0.5]);
    let action_tokens: Vec<f32> = mask.iter().map(|row| row.iter().sum()).collect();
    assert_eq!(action_tokens, vec![6.0, 2.0]);
}

#[test]
fn sampled_episodes_mask_exactly_their_action_tokens() {
    let (codec, _, episodes) = rollouts(5, &limits());
    let pad = codec.vocab().pad_id();
    let batch = Batch::from_episodes(&episodes, pad, &Device::Cpu).unwrap();
    let mask = batch.loss_mask.to_vec2::<f32>().unwrap();
    for (row, ep) in episodes.iter().enumerate() {
        let masked: usize = mask[row].iter().map(|&m| m as usize).sum();
        assert_eq!(masked, ep.action_tokens());
        for (pos, &m) in mask[row].iter().enumerate() {
            let src = ep.sources.get(pos + 1).copied();
            assert_eq!(
                m == 1.0,
                src == Some(TokenSource::Action),
                "row {row} pos {pos}"
            );
        }
    }
}

#[test]
fn engine_logprobs_match_the_trainer_forward_on_multi_turn_batches() {
    // The trainer's view: one padded forward over the batch, log-softmax, gather at the
    // targets; on every masked position it must equal the engine's sampling log-prob.
    let (codec, model, episodes) = rollouts(9, &limits());
    let batch = Batch::from_episodes(&episodes, codec.vocab().pad_id(), &Device::Cpu).unwrap();
    let logits = model.forward(&batch.input_ids).unwrap().logits;
    let logp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1).unwrap();
    let taken = logp
        .gather(&batch.targets.unsqueeze(2).unwrap(), 2)
        .unwrap()
        .squeeze(2)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let old = batch.old_logprobs.to_vec2::<f32>().unwrap();
    let mask = batch.loss_mask.to_vec2::<f32>().unwrap();
    let mut checked = 0;
    for row in 0..batch.batch_size() {
        for pos in 0..batch.seq_len() {
            if mask[row][pos] == 1.0 {
                let diff = (taken[row][pos] - old[row][pos]).abs();
                assert!(
                    diff < 1e-5,
                    "row {row} pos {pos}: {} vs {}",
                    taken[row][pos],
                    old[row][pos]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "only {checked} action tokens checked");
    let turns: u32 = episodes.iter().map(|e| e.turns).max().unwrap();
    assert!(turns >= 2, "the check should cover multi-turn episodes");
}

#[test]
fn rejects_inconsistent_episodes() {
    let mut bad = hand_made();
    bad.logprobs.pop();
    assert!(Batch::from_episodes(&[bad], 0, &Device::Cpu).is_err());
    assert!(Batch::from_episodes(&[], 0, &Device::Cpu).is_err());
}
