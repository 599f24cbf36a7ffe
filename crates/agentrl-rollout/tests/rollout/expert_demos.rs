//! The gym's expert solves every built-in task, hidden tests and all, in both output forms:
//! TinyAgent's symbols (candidate edits) and Qwen3 chat turns with `<tool_call>` JSON
//! (free-form edits from the reference diff), each episode run through the real driver, env
//! and sandbox.

use std::sync::Arc;

use agentrl_chat::qwen3_codec::{Qwen3Codec, Qwen3CodecOptions};
use agentrl_chat::tiny::TinyCodec;
use agentrl_chat::ChatCodec;
use agentrl_gym::expert::{EditForm, Variant};
use agentrl_gym::{Action, BugFixEnv, EnvConfig, OutcomeCache, TaskSet};
use agentrl_rollout::{
    edit_forms, expert_episodes, Episode, ExpertJob, RolloutLimits, TokenSource,
};

fn envs(tasks: &Arc<TaskSet>, cache: &Arc<OutcomeCache>, n: usize) -> Vec<BugFixEnv> {
    let executor = agentrl_gym::sandbox::default_executor().unwrap();
    (0..n)
        .map(|_| {
            BugFixEnv::new(
                tasks.clone(),
                executor.clone(),
                cache.clone(),
                EnvConfig::default(),
            )
        })
        .collect()
}

fn jobs(tasks: &TaskSet, shapes: &[(Variant, EditForm)]) -> Vec<ExpertJob> {
    tasks
        .tasks()
        .iter()
        .enumerate()
        .flat_map(|(g, task)| {
            shapes.iter().map(move |&(variant, form)| ExpertJob {
                task_id: task.id.clone(),
                group_id: g as u32,
                variant,
                form,
            })
        })
        .collect()
}

/// Every episode solved, with no format error, uncut, its actions the planned tools.
fn check(episodes: &[Episode], jobs: &[ExpertJob], codec: &dyn ChatCodec) {
    assert_eq!(episodes.len(), jobs.len());
    for (episode, job) in episodes.iter().zip(jobs) {
        let what = format!("{} {:?} {:?}", job.task_id, job.variant, job.form);
        assert!(
            episode.reward.solved(),
            "{what}: not solved: {:?}",
            episode.reward
        );
        assert_eq!(episode.format_errors, 0, "{what}");
        assert!(!episode.truncated, "{what}");
        let last = episode.actions.last().unwrap();
        assert!(
            matches!(last, Action::Call(c) if c.name == "submit"),
            "{what}: {last:?}"
        );
        let edits = episode
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Call(c) if c.name == "edit"))
            .count();
        let expected = if matches!(job.variant, Variant::Recovery { .. }) {
            2
        } else {
            1
        };
        assert_eq!(edits, expected, "{what}");
        // Loss goes on the actions only; the actions decode to the calls that were run.
        let action_ids: Vec<u32> = episode
            .tokens
            .iter()
            .zip(&episode.sources)
            .filter(|(_, s)| **s == TokenSource::Action)
            .map(|(t, _)| *t)
            .collect();
        let text = codec.decode(&action_ids);
        let tool_mentions = ["read", "test", "edit", "submit"]
            .iter()
            .map(|t| text.matches(t).count())
            .sum::<usize>();
        assert!(tool_mentions >= episode.actions.len(), "{what}: {text}");
    }
}

/// The expert's episodes of every task in each of `shapes`, checked.
fn solve_all(codec: &dyn ChatCodec, shapes: &[(Variant, EditForm)]) -> Vec<Episode> {
    let tasks = Arc::new(TaskSet::builtin().unwrap());
    let limits = RolloutLimits {
        max_episode_tokens: usize::MAX,
        env_threads: 4,
    };
    let jobs = jobs(&tasks, shapes);
    let envs = envs(&tasks, &OutcomeCache::new(), jobs.len());
    let episodes = expert_episodes(codec, &limits, &tasks, envs, &jobs, 10).unwrap();
    check(&episodes, &jobs, codec);
    let longest = episodes.iter().map(Episode::len).max().unwrap();
    eprintln!("{} episodes, longest {longest} tokens", episodes.len());
    episodes
}

#[test]
fn the_expert_solves_every_builtin_task_in_tiny_symbols() {
    let tiny = TinyCodec::for_gym();
    assert_eq!(edit_forms(&tiny), vec![EditForm::Candidate]);
    let episodes = solve_all(
        &tiny,
        &[
            (Variant::Gold, EditForm::Candidate),
            (Variant::Recovery { decoy: 0 }, EditForm::Candidate),
            (Variant::Brief, EditForm::Candidate),
        ],
    );
    // The default TinyAgent context (model.max_seq = 256) holds every demonstration.
    assert!(episodes.iter().all(|e| e.len() <= 256));
}

#[test]
fn the_expert_solves_every_builtin_task_in_qwen3_tool_calls() {
    let Some(dir) = agentrl_chat::qwen3_assets_for_tests() else {
        return;
    };
    let options = Qwen3CodecOptions {
        max_action_tokens: 512,
        max_observation_tokens: 512,
        enable_thinking: false,
    };
    let qwen3 = Qwen3Codec::from_dir(&dir, options).unwrap();
    assert_eq!(
        edit_forms(&qwen3),
        vec![EditForm::Candidate, EditForm::FreeForm]
    );
    let episodes = solve_all(
        &qwen3,
        &[
            (Variant::Gold, EditForm::FreeForm),
            (Variant::Recovery { decoy: 1 }, EditForm::FreeForm),
            (Variant::Gold, EditForm::Candidate),
        ],
    );
    // Free-form edits are real `<tool_call>` JSON with the reference's lines.
    let text = qwen3.decode(&episodes[0].tokens);
    assert!(
        text.contains("<tool_call>") && text.contains("\"old\""),
        "{text}"
    );
}

#[test]
fn a_plan_longer_than_the_episode_is_an_error_naming_the_task() {
    let tasks = Arc::new(TaskSet::builtin().unwrap());
    let cache = OutcomeCache::new();
    let limits = RolloutLimits {
        max_episode_tokens: usize::MAX,
        env_threads: 1,
    };
    let tiny = TinyCodec::for_gym();
    let task = tasks.tasks()[0].id.clone();
    let job = ExpertJob {
        task_id: task.clone(),
        group_id: 0,
        variant: Variant::Gold,
        form: EditForm::FreeForm,
    };
    let err =
        expert_episodes(&tiny, &limits, &tasks, envs(&tasks, &cache, 1), &[job], 10).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains(&task) && text.contains("encoding"), "{text}");
}

/// A free-form edit longer than the action cap would be a demonstration no policy could
/// sample whole: the expert writes that episode's edits as candidates instead, so every
/// demonstration fits the cap and still solves its task (before, the warm-up stopped with
/// "the expert's call edit takes 248 tokens; the action cap is 96").
#[test]
fn free_form_edits_past_the_action_cap_become_candidate_edits() {
    let Some(dir) = agentrl_chat::qwen3_assets_for_tests() else {
        return;
    };
    let cap = 64;
    let options = Qwen3CodecOptions {
        max_action_tokens: cap,
        max_observation_tokens: 512,
        enable_thinking: false,
    };
    let qwen3 = Qwen3Codec::from_dir(&dir, options).unwrap();
    let episodes = solve_all(&qwen3, &[(Variant::Gold, EditForm::FreeForm)]);
    let (mut free_form, mut candidate) = (0, 0);
    for episode in &episodes {
        for action in &episode.actions {
            if let Action::Call(call) = action {
                if call.name == "edit" {
                    if call.arguments.get("candidate").is_some() {
                        candidate += 1;
                    } else {
                        free_form += 1;
                    }
                }
            }
        }
        // Every action's tokens are within the cap: the longest run of action tokens.
        let mut run = 0;
        for source in &episode.sources {
            run = if *source == TokenSource::Action {
                run + 1
            } else {
                0
            };
            assert!(run <= cap, "an action of {} tokens", run);
        }
    }
    assert!(candidate > 0, "some reference diffs exceed {cap} tokens");
    assert!(free_form > 0, "the diffs that fit stay free-form");
}
