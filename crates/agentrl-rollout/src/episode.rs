//! Episodes: every token of one multi-turn interaction, with its source, its turn and its
//! sampling log-prob (token in, token out).
//!
//! Where it sits: the driver ([`crate::driver`]) fills an [`Episode`] exactly as ids were fed
//! to or sampled by the engine; [`crate::batch::Batch`] turns episodes into training tensors,
//! and the run directory stores them as JSONL.

use agentrl_gym::{Action, Reward};
use serde::{Deserialize, Serialize};

/// Where a token of an episode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// `<bos>` and the first observation.
    Prompt,
    /// Sampled by the policy (the only tokens trained on).
    Action,
    /// An environment observation, rendered after an action.
    Observation,
}

/// One episode, every token with its source, turn and sampling log-prob (struct of arrays:
/// `tokens[i]`, `sources[i]`, `turn_ids[i]`, `logprobs[i]` describe token `i`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub task_id: String,
    /// Episodes of the same task sampled together share a group (group baselines).
    pub group_id: u32,
    pub tokens: Vec<u32>,
    pub sources: Vec<TokenSource>,
    /// Turn of each token: the prompt is turn 0, and the action of turn `k` and the
    /// observation answering it are turn `k`.
    pub turn_ids: Vec<u32>,
    /// Sampling log-prob of action tokens (the engine's `LogprobKind` says of which
    /// distribution);
    /// 0 for prompt and observation tokens.
    pub logprobs: Vec<f32>,
    /// The parsed action of each turn, for logs and metrics.
    pub actions: Vec<Action>,
    pub reward: Reward,
    /// Actions taken.
    pub turns: u32,
    /// Malformed actions plus calls the gym rejected with an error observation.
    pub format_errors: u32,
    /// Cut at the token budget and submitted on the agent's behalf.
    pub truncated: bool,
    /// Version of the weights the engine sampled the actions with (staleness = the
    /// trainer's version at update time minus this).
    #[serde(default)]
    pub weight_version: u64,
    /// Whether re-rendering the conversation through the chat template would have given
    /// other ids than the sampled stream (`ChatCodec::retokenization_drift`); `None` for a
    /// format without a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted: Option<bool>,
}

impl Episode {
    /// An empty episode of `task_id` in group `group_id`.
    pub fn new(task_id: &str, group_id: u32) -> Self {
        Self {
            task_id: task_id.to_string(),
            group_id,
            tokens: Vec::new(),
            sources: Vec::new(),
            turn_ids: Vec::new(),
            logprobs: Vec::new(),
            actions: Vec::new(),
            reward: Reward::default(),
            turns: 0,
            format_errors: 0,
            truncated: false,
            weight_version: 0,
            drifted: None,
        }
    }

    pub fn push(&mut self, token: u32, source: TokenSource, logprob: f32) {
        self.tokens.push(token);
        self.sources.push(source);
        self.turn_ids.push(self.turns);
        self.logprobs.push(logprob);
    }

    /// Tokens in the episode.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens the policy sampled.
    pub fn action_tokens(&self) -> usize {
        self.sources
            .iter()
            .filter(|s| **s == TokenSource::Action)
            .count()
    }

    /// Checks that the parallel arrays line up (e.g. after reading JSONL written elsewhere).
    pub fn validate(&self) -> anyhow::Result<()> {
        let n = self.tokens.len();
        anyhow::ensure!(
            self.sources.len() == n && self.turn_ids.len() == n && self.logprobs.len() == n,
            "episode {} (group {}): tokens/sources/turn_ids/logprobs lengths differ ({n}, {}, {}, {})",
            self.task_id,
            self.group_id,
            self.sources.len(),
            self.turn_ids.len(),
            self.logprobs.len()
        );
        Ok(())
    }
}
