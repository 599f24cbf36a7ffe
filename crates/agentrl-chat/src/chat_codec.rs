//! The `ChatCodec` interface: how one policy family's chat format turns an episode into token
//! ids and sampled ids back into gym actions.
//!
//! Where it sits: the rollout driver (`agentrl-rollout`) calls [`ChatCodec::prompt_ids`] on
//! the environment's first observation, asks the engine for an action that ends on one of
//! [`ChatCodec::stop_ids`] or at [`ChatCodec::max_action_tokens`], turns the sampled ids into
//! an [`Action`] with [`ChatCodec::parse_action`], and appends
//! [`ChatCodec::observation_ids`] of the tool result *after the exact sampled ids*: ids are
//! never re-tokenised (ALGORITHMS.md §17). TinyAgent's codec is [`crate::tiny::TinyCodec`];
//! Qwen3's is [`crate::qwen3_codec::Qwen3Codec`], which renders the same calls through the
//! model's own template. Once an episode is over, [`ChatCodec::retokenization_drift`] says
//! whether a pipeline that re-rendered the conversation as messages would have trained on
//! other ids than the ones sampled (a metric; the rollout itself never re-renders).

use agentrl_gym::{Action, Observation, ToolCall};

/// One policy family's episode format.
pub trait ChatCodec: Sync {
    /// Ids of an episode's prompt, rendered from the environment's first observation (the
    /// task), up to where the first action starts.
    fn prompt_ids(&self, first: &Observation) -> anyhow::Result<Vec<u32>>;
    /// Ids that follow a sampled action: the rendering of the tool result, up to where the
    /// next action starts.
    fn observation_ids(&self, observation: &Observation) -> anyhow::Result<Vec<u32>>;
    /// Sampled ids that end an action (they belong to the action).
    fn stop_ids(&self) -> Vec<u32>;
    /// Longest action in tokens, the stop token included.
    fn max_action_tokens(&self) -> usize;
    /// The action the sampled ids express, or [`Action::Malformed`] with a reason. `task` is
    /// the episode's first observation, for formats whose short calls refer to it.
    fn parse_action(&self, ids: &[u32], task: &Observation) -> Action;
    /// The id that pads a batch past each episode's end.
    fn pad_id(&self) -> u32;
    /// Ids as text, for logs and transcripts.
    fn decode(&self, ids: &[u32]) -> String;
    /// The ids of a well-formed action that makes `call`, its stop token included: what a
    /// demonstration of the call looks like in this format (supervised warm-up, SFT).
    fn encode_call(&self, call: &ToolCall) -> anyhow::Result<Vec<u32>>;
    /// Ids that close an action the length cap cut before its stop token, so the
    /// observation that follows is not read as part of the assistant's turn. They are not
    /// sampled (no loss on them). Empty by default.
    fn close_cut_action_ids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Whether re-rendering a finished episode through the chat template, as messages, and
    /// tokenising it gives other ids than the episode's exact stream (`prompt_ids(first)`,
    /// then per turn the sampled ids and, where present, `observation_ids` of the result).
    ///
    /// `turns` holds each action's sampled ids with the observation whose ids followed it;
    /// `None` where nothing followed (the episode ended, or was cut, after that action).
    /// `Ok(None)`: the format has no template to re-render through (the default; TinyAgent).
    fn retokenization_drift(
        &self,
        first: &Observation,
        turns: &[(&[u32], Option<&Observation>)],
    ) -> anyhow::Result<Option<bool>> {
        let _ = (first, turns);
        Ok(None)
    }
}
