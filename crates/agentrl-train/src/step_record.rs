//! What one training step measured: the [`StepRecord`] every recipe returns, and the
//! statistics of a step's episodes ([`RolloutStats`]) it carries.
//!
//! Where it sits: a recipe's step (`recipes::*`) → [`StepRecord`] → `crate::metrics`
//! (the run's metric names) → `metrics.jsonl` and TensorBoard. It knows the update's metrics
//! and the episodes, nothing of the trainer.

use std::collections::BTreeMap;

use agentrl_gym::Action;
use agentrl_rollout::{Episode, EvalReport};
use serde::{Deserialize, Serialize};

use crate::update::UpdateMetrics;

/// What one training step measured; [`crate::metrics::metric_line`] names it for
/// `metrics.jsonl` and TensorBoard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Steps completed after this one (1-based).
    pub step: usize,
    pub lr: f64,
    pub episodes: usize,
    /// Mean training reward (after shaping) of the step's episodes.
    pub reward: f64,
    pub hidden_solve_rate: f64,
    pub public_solve_rate: f64,
    pub hacking_rate: f64,
    /// Malformed or rejected actions over all actions.
    pub format_error_rate: f64,
    pub episode_tokens: f64,
    pub action_tokens: f64,
    pub turns: f64,
    pub truncated_rate: f64,
    /// Groups dropped by dynamic sampling (DAPO), over all sampling rounds.
    pub groups_dropped: usize,
    pub kl_coef: f64,
    /// Reward spread, tampering, submits, lengths, staleness (`crate::metrics`).
    #[serde(flatten)]
    pub rollout: RolloutStats,
    #[serde(flatten)]
    pub update: UpdateMetrics,
    pub time_rollout_s: f64,
    /// Wall time during which the step's rollouts had an environment busy (of
    /// `time_rollout_s`, or overlapping the update with asynchronous rollouts).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_env_s: Option<f64>,
    /// Bringing the engine's weights to the trainer's (a copy refreshed, or an adapter written
    /// and loaded by the servers).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_sync_s: Option<f64>,
    pub time_update_s: f64,
    pub time_step_s: f64,
    /// Failed requests to gym servers and episodes restarted after them, during the step
    /// (`env/remote_*`); `None` when the gym runs in process.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub remote_failures: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub remote_retries: Option<f64>,
    /// Loss of a format warm-up step (`train.format_warmup_steps`); such steps sample no
    /// episodes, so their rollout figures are 0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format_warmup_loss: Option<f64>,
    /// Periodic evaluation on the train split, when it ran at this step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub eval: Option<EvalReport>,
    /// A recipe's own figures under their metric names (`rft/acceptance_rate`, `dpo/loss`,
    /// ...), written as they are.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub recipe_metrics: BTreeMap<String, f64>,
}

impl StepRecord {
    /// The record of a step that sampled `episodes` for an update of the weights of version
    /// `step`: the episodes' means and [`RolloutStats`] (turns capped at `max_turns`); the
    /// step's number, learning rate, update and timings are the caller's.
    pub fn sampled(episodes: &[Episode], step: usize, max_turns: usize) -> Self {
        let n = episodes.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Episode) -> f64| episodes.iter().map(f).sum::<f64>() / n;
        let actions: u64 = episodes.iter().map(|e| u64::from(e.turns)).sum();
        let errors: u64 = episodes.iter().map(|e| u64::from(e.format_errors)).sum();
        StepRecord {
            episodes: episodes.len(),
            reward: mean(&|e| f64::from(e.reward.score)),
            hidden_solve_rate: mean(&|e| f64::from(u8::from(e.reward.solved()))),
            public_solve_rate: mean(&|e| f64::from(u8::from(e.reward.public_passed_all()))),
            hacking_rate: mean(&|e| f64::from(u8::from(e.reward.hacked()))),
            format_error_rate: if actions == 0 {
                0.0
            } else {
                errors as f64 / actions as f64
            },
            episode_tokens: mean(&|e| e.len() as f64),
            action_tokens: mean(&|e| e.action_tokens() as f64),
            turns: mean(&|e| f64::from(e.turns)),
            truncated_rate: mean(&|e| f64::from(u8::from(e.truncated))),
            rollout: RolloutStats::of(episodes, step as u64, max_turns),
            ..StepRecord::default()
        }
    }
}

/// Statistics of a step's episodes beyond the means the loop computes inline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RolloutStats {
    pub reward_std: f64,
    pub reward_max: f64,
    pub reward_min: f64,
    /// Episodes that changed test files or planted hooks.
    pub tamper_rate: f64,
    /// Verifier runs repeated because a time limit stopped them (all the step's episodes).
    pub verdict_reruns: f64,
    /// Episodes that called `submit` themselves.
    pub submit_rate: f64,
    /// Episodes that used all `rollout.max_turns` turns without submitting.
    pub turn_limit_rate: f64,
    /// Groups whose episodes all got the same reward (no group-relative signal).
    pub zero_variance_group_rate: f64,
    /// Tool calls (well-formed actions) per episode.
    pub tool_calls: f64,
    pub action_tokens_max: f64,
    pub action_tokens_min: f64,
    /// Tokens of all the step's episodes.
    pub total_tokens: f64,
    /// Trainer weight version minus each episode's sampling version.
    pub staleness_mean: f64,
    pub staleness_max: f64,
    /// Share of the episodes whose conversation, re-rendered through the chat template,
    /// tokenises to other ids than the sampled stream (0 for a format without a template).
    pub retokenization_drift_rate: f64,
}

impl RolloutStats {
    /// The statistics of `episodes`, sampled for an update of the weights of version
    /// `trainer_version`, with turns capped at `max_turns`.
    pub fn of(episodes: &[Episode], trainer_version: u64, max_turns: usize) -> Self {
        if episodes.is_empty() {
            return Self::default();
        }
        let n = episodes.len() as f64;
        let rewards: Vec<f64> = episodes.iter().map(|e| f64::from(e.reward.score)).collect();
        let mean = rewards.iter().sum::<f64>() / n;
        let share =
            |f: &dyn Fn(&Episode) -> bool| episodes.iter().filter(|e| f(e)).count() as f64 / n;
        let submitted = |e: &Episode| {
            e.actions
                .iter()
                .any(|a| matches!(a, Action::Call(c) if c.name == "submit"))
        };
        let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (e, &r) in episodes.iter().zip(&rewards) {
            groups.entry(e.group_id).or_default().push(r);
        }
        let flat = groups
            .values()
            .filter(|rs| rs.len() > 1 && rs.iter().all(|&r| r == rs[0]))
            .count();
        let lengths: Vec<f64> = episodes.iter().map(|e| e.action_tokens() as f64).collect();
        let staleness: Vec<f64> = episodes
            .iter()
            .map(|e| trainer_version.saturating_sub(e.weight_version) as f64)
            .collect();
        Self {
            reward_std: (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt(),
            reward_max: rewards.iter().copied().fold(f64::MIN, f64::max),
            reward_min: rewards.iter().copied().fold(f64::MAX, f64::min),
            tamper_rate: share(&|e| e.reward.tampered),
            verdict_reruns: episodes
                .iter()
                .map(|e| f64::from(e.reward.verdict_reruns))
                .sum(),
            submit_rate: share(&|e| submitted(e)),
            turn_limit_rate: share(&|e| !submitted(e) && e.turns as usize >= max_turns),
            zero_variance_group_rate: flat as f64 / groups.len() as f64,
            tool_calls: episodes
                .iter()
                .map(|e| {
                    e.actions
                        .iter()
                        .filter(|a| matches!(a, Action::Call(_)))
                        .count() as f64
                })
                .sum::<f64>()
                / n,
            action_tokens_max: lengths.iter().copied().fold(0.0, f64::max),
            action_tokens_min: lengths.iter().copied().fold(f64::MAX, f64::min),
            total_tokens: episodes.iter().map(|e| e.len() as f64).sum(),
            staleness_mean: staleness.iter().sum::<f64>() / n,
            staleness_max: staleness.iter().copied().fold(0.0, f64::max),
            retokenization_drift_rate: share(&|e| e.drifted == Some(true)),
        }
    }
}
