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
