//! The gym service's protocol: the JSON bodies of `agentrl gym serve`'s routes, shared by the
//! server ([`super::server`]) and the Rust client ([`super::client`]); the Python client
//! (`clients/python/agentrl_gym.py`) writes the same shapes. The whole protocol, with
//! examples, is in `docs/GYM_SERVICE.md`.
//!
//! Observations, actions, steps and rewards are the gym's own types ([`crate::types`]) as
//! serde writes them, so a remote episode and an in-process one are the same values.

use serde::{Deserialize, Serialize};

use crate::reward::RewardFn;
use crate::task::Split;
use crate::types::{Action, Observation, Reward, Step};

/// Bumped when a route or a body changes incompatibly; `GET /health` reports it and the
/// client refuses a server that speaks another.
pub const PROTOCOL_VERSION: u32 = 1;

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    pub protocol: u32,
    pub server: String,
}

/// One task as `GET /v1/tasks` lists it. `fingerprint` is [`crate::Task::fingerprint`]: a
/// client checks that the server's task of an id is the very task it knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    pub id: String,
    pub family: String,
    pub split: Split,
    pub fingerprint: String,
}

/// `GET /v1/tasks` (optionally `?split=train`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskList {
    pub tasks: Vec<TaskInfo>,
}

/// `POST /v1/episodes`: start an episode of `task_id`. `max_turns` and `reward` default to the
/// server's; the sandbox limits are always the server's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    pub task_id: String,
    /// Recorded with the episode (the BugFix tasks are deterministic: the same task and the
    /// same actions give the same observations whatever the seed).
    #[serde(default)]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<RewardFn>,
}

/// The answer to a start: the episode's id and its first observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartResponse {
    pub episode_id: String,
    pub task_id: String,
    pub seed: u64,
    /// Actions applied so far (0).
    pub turn: u32,
    pub observation: Observation,
}

/// `POST /v1/episodes/{id}/step`: apply one action. With `turn` (the number of actions the
/// client has seen applied), a repeated request is answered from the server's record instead
/// of being applied twice, and a request out of order is a 409.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
}

/// The answer to a step: the gym's [`Step`] and the turn count after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResponse {
    pub episode_id: String,
    pub turn: u32,
    pub step: Step,
}

/// `GET /v1/episodes/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeState {
    pub episode_id: String,
    pub task_id: String,
    pub seed: u64,
    pub turn: u32,
    pub done: bool,
    pub reward: Option<Reward>,
}

/// `GET /v1/load`: what the server holds and has done since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Episodes started and not yet finished (they hold a workspace).
    pub live_episodes: usize,
    /// Past this many live episodes a start is answered 429.
    pub max_episodes: usize,
    /// The live episodes' workspace quotas, in MiB.
    #[serde(default)]
    pub workspace_mib: u64,
    /// Past this much workspace quota a start is answered 429.
    #[serde(default)]
    pub max_workspace_mib: u64,
    pub episodes_started: u64,
    pub episodes_finished: u64,
    /// Episodes closed by the server after `idle_timeout_s` without a request.
    pub episodes_reaped: u64,
    pub steps: u64,
    /// Starts refused with 429.
    pub refused_full: u64,
    pub idle_timeout_s: f64,
}

/// Every error answer: `{"error": {"message": ..., "code": ...}}` (the HTTP status again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    pub code: u16,
}

/// The message of an error body, or the body itself when it is not one.
pub fn error_message(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .map(|e| e.error.message)
        .unwrap_or_else(|_| body.chars().take(300).collect())
}
