//! Training tensors from sampled episodes: padding, the action-only loss mask, old log-probs,
//! turn ids and group ids.
//!
//! Data flow: rollout [`Episode`]s → [`Batch::from_episodes`] → the trainer's forward pass and
//! the RL losses in `agentrl-rl`. Alignment follows next-token prediction: column `t` of every
//! `[B, T]` tensor describes the prediction made at input position `t`, i.e. of token `t + 1`
//! of the episode. So `loss_mask[b, t] = 1` exactly when episode token `t + 1` was sampled by
//! the policy (ALGORITHMS.md §0 `m_{i,t}`, §17: prompt, observation and padding tokens are
//! never trained on), and `old_logprobs[b, t]` is that token's sampling log-prob (of the
//! engine's `LogprobKind`).
//!
//! Rows are right-padded, so every real token keeps the position it had when it was sampled.

use candle_core::{Device, Tensor};

use crate::episode::{Episode, TokenSource};

/// A padded batch of episodes, ready for the trainer: the one batch type between rollouts
/// and the update.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Input ids `[B, T]` u32: episode tokens `0..len-1`, then `pad`.
    pub input_ids: Tensor,
    /// Next-token targets `[B, T]` u32: episode tokens `1..len`, then `pad`.
    pub targets: Tensor,
    /// `[B, T]` f32: 1 where the target is an action token, else 0.
    pub loss_mask: Tensor,
    /// `[B, T]` f32: sampling log-prob of the target where masked in, else 0.
    pub old_logprobs: Tensor,
    /// `[B, T]` u32: turn of the target token (0 on padding).
    pub turn_ids: Tensor,
    /// Group of each episode (episodes of one task sampled together share a baseline).
    pub group_ids: Vec<usize>,
    /// Each episode's outcome reward: the verifier's score, plus whatever shaping the
    /// trainer applies before the advantages (e.g. DAPO's overlong penalty).
    pub rewards: Vec<f32>,
}

impl Batch {
    /// Builds the tensors; `pad` fills positions past each episode's end.
    pub fn from_episodes(episodes: &[Episode], pad: u32, device: &Device) -> anyhow::Result<Self> {
        anyhow::ensure!(!episodes.is_empty(), "Batch::from_episodes: no episodes");
        for ep in episodes {
            ep.validate()?;
            anyhow::ensure!(
                ep.len() >= 2,
                "Batch::from_episodes: episode of task {} has {} tokens; at least 2 are needed",
                ep.task_id,
                ep.len()
            );
        }
        let b = episodes.len();
        let t = episodes.iter().map(|e| e.len() - 1).max().unwrap_or(0);
        let mut input_ids = vec![pad; b * t];
        let mut targets = vec![pad; b * t];
        let mut loss_mask = vec![0f32; b * t];
        let mut old_logprobs = vec![0f32; b * t];
        let mut turn_ids = vec![0u32; b * t];
        for (row, ep) in episodes.iter().enumerate() {
            let n = ep.len() - 1;
            let base = row * t;
            input_ids[base..base + n].copy_from_slice(&ep.tokens[..n]);
            targets[base..base + n].copy_from_slice(&ep.tokens[1..]);
            turn_ids[base..base + n].copy_from_slice(&ep.turn_ids[1..]);
            for pos in 0..n {
                if ep.sources[pos + 1] == TokenSource::Action {
                    loss_mask[base + pos] = 1.0;
                    old_logprobs[base + pos] = ep.logprobs[pos + 1];
                }
            }
        }
        Ok(Self {
            input_ids: Tensor::from_vec(input_ids, (b, t), device)?,
            targets: Tensor::from_vec(targets, (b, t), device)?,
            loss_mask: Tensor::from_vec(loss_mask, (b, t), device)?,
            old_logprobs: Tensor::from_vec(old_logprobs, (b, t), device)?,
            turn_ids: Tensor::from_vec(turn_ids, (b, t), device)?,
            group_ids: episodes.iter().map(|e| e.group_id as usize).collect(),
            rewards: episodes.iter().map(|e| e.reward.score).collect(),
        })
    }

    pub fn batch_size(&self) -> usize {
        self.group_ids.len()
    }

    /// Padded length `T`.
    pub fn seq_len(&self) -> usize {
        self.input_ids.dims().get(1).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::tests::{limits, rollouts};
    use agentrl_gym::Reward;

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
}
