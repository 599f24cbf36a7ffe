//! Demonstrations a recipe learns from without sampling them: the gym's scripted expert
//! solving the step's tasks (SFT, DPO's chosen episodes, an expert format warm-up), and
//! single well-formed tool calls (RL's format warm-up).
//!
//! Where it sits: the trainer's tasks and envs → `agentrl_rollout::demonstrate` (rendered,
//! parsed and scored as sampled episodes are) → episodes for a recipe's supervised or
//! preference update. Part of the trainer core, shared by recipes that never import each
//! other.

use agentrl_chat::tiny::{MAX_CANDIDATES, TOOL_NAMES};
use agentrl_gym::expert::EditForm;
use agentrl_gym::{Action, ToolCall};
use agentrl_rollout::{
    edit_forms, expert_episodes, expert_jobs, Episode, ShuffledCandidates, TokenSource,
};
use anyhow::Context;
use rand::Rng;

use crate::streams::{stream, STREAM_EXPERT_VIEWS, STREAM_WARMUP};
use crate::trainer::Trainer;

/// The expert's demonstrations for training step `step`: the step's tasks (as RL would pick
/// them), `rollout.group_size` demonstrations each, cycling through the trajectory shapes and
/// the edit forms the codec can write; each in a fresh candidate order when
/// `rollout.shuffle_candidates` is on, within `rollout.max_turns` calls.
pub fn expert_demonstrations(trainer: &Trainer, step: usize) -> anyhow::Result<Vec<Episode>> {
    let task_ids = trainer.tasks_for_step(step);
    let per_step = task_ids.len() * trainer.config.rollout.group_size;
    expert_demonstrations_for(
        trainer,
        &task_ids,
        trainer.config.rollout.group_size,
        step * per_step,
        stream(trainer.config.train.seed, step as u64, STREAM_EXPERT_VIEWS),
    )
}

/// `per_task` expert demonstrations of each of `task_ids`, the trajectory shapes and edit
/// forms cycling from job `first_job` on, candidate orders drawn from `rng` (when
/// `rollout.shuffle_candidates` is on).
pub fn expert_demonstrations_for(
    trainer: &Trainer,
    task_ids: &[String],
    per_task: usize,
    first_job: usize,
    mut rng: rand_chacha::ChaCha8Rng,
) -> anyhow::Result<Vec<Episode>> {
    let config = &trainer.config;
    let forms = demonstrated_edit_forms(trainer)?;
    let jobs = expert_jobs(task_ids, per_task, &forms, first_job);
    let envs: Vec<ShuffledCandidates<_>> = trainer
        .training_envs(jobs.len())
        .into_iter()
        .map(|env| {
            if config.rollout.shuffle_candidates {
                ShuffledCandidates::new(env, rng.random())
            } else {
                ShuffledCandidates::unshuffled(env)
            }
        })
        .collect();
    expert_episodes(
        trainer.codec.as_ref(),
        &trainer.episode_limits(),
        trainer.task_set(),
        envs,
        &jobs,
        config.rollout.max_turns,
    )
}

/// The edit forms the expert demonstrates: `sft.edit_forms` (non-empty: config validation),
/// each checked against what the policy's codec can write, or (unset) all of those.
pub fn demonstrated_edit_forms(trainer: &Trainer) -> anyhow::Result<Vec<EditForm>> {
    let writable = edit_forms(trainer.codec.as_ref());
    let Some(chosen) = &trainer.config.sft.edit_forms else {
        return Ok(writable);
    };
    for form in chosen {
        anyhow::ensure!(
            writable.contains(form),
            "sft.edit_forms: this policy's codec cannot write {form:?} edits (it writes {writable:?})"
        );
    }
    Ok(chosen.clone())
}

/// Demonstrations for a format warm-up step: for each task of the step, `group_size`
/// episodes of the task prompt followed by one well-formed call with a uniformly random
/// tool (and, for `edit`, a random candidate the task lists).
pub fn call_demonstrations(trainer: &Trainer, step: usize) -> anyhow::Result<Vec<Episode>> {
    let mut rng = stream(trainer.config.train.seed, step as u64, STREAM_WARMUP);
    let mut episodes = Vec::new();
    for (group, task_id) in trainer.tasks_for_step(step).iter().enumerate() {
        let task = trainer.tasks.get(task_id)?;
        let observation = task.observation();
        let prompt = trainer.codec.prompt_ids(&observation)?;
        let listed = task.candidates.len().min(MAX_CANDIDATES);
        // The tools this format offers: those whose demonstration parses back to a call
        // (Qwen3's prompt does not offer `exploit`, TinyAgent's vocabulary does).
        let mut offered = Vec::new();
        for name in TOOL_NAMES {
            let probe = ToolCall {
                name: name.to_string(),
                arguments: if name == "edit" {
                    serde_json::json!({ "candidate": 0 })
                } else {
                    serde_json::json!({})
                },
            };
            let ids = trainer.codec.encode_call(&probe)?;
            if matches!(
                trainer.codec.parse_action(&ids, &observation),
                Action::Call(_)
            ) {
                offered.push(name);
            }
        }
        anyhow::ensure!(
            !offered.is_empty(),
            "format warm-up: the codec offers no tool"
        );
        for _ in 0..trainer.config.rollout.group_size {
            let name = offered[rng.random_range(0..offered.len())];
            let arguments = if name == "edit" && listed > 0 {
                serde_json::json!({ "candidate": rng.random_range(0..listed) })
            } else {
                serde_json::json!({})
            };
            let call = ToolCall {
                name: name.to_string(),
                arguments,
            };
            let action = trainer
                .codec
                .encode_call(&call)
                .with_context(|| format!("format warm-up: cannot encode {call:?}"))?;
            let mut episode = Episode::new(&task.id, group as u32);
            for &t in &prompt {
                episode.push(t, TokenSource::Prompt, 0.0);
            }
            episode.turns = 1;
            for &t in &action {
                episode.push(t, TokenSource::Action, 0.0);
            }
            episode.actions.push(Action::Call(call));
            episodes.push(episode);
        }
    }
    Ok(episodes)
}
