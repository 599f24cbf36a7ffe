//! The multi-turn rollout driver: groups of episodes over an [`Engine`], a [`ChatCodec`] and
//! an [`Env`].
//!
//! Data flow: `Env::reset` → the codec renders the prompt ids → the engine samples one action
//! per live episode (ids + log-probs) until a stop id or the action cap → the codec parses
//! them into an [`Action`] → `Env::step` → the codec renders the observation ids, appended
//! after the exact sampled ids → … until the episode is done. Every id lands in the
//! [`Episode`] exactly as it was fed to or sampled from the engine, so the trainer sees
//! exactly the sampled tokens: nothing is ever re-tokenised (ALGORITHMS.md §17).
//!
//! All live episodes advance turn by turn: one engine call per turn for all of them (the
//! local engine keeps each episode's KV cache between turns), then their environment steps on
//! `env_threads` threads, since the gym's tests run in child processes. Each row's sampling
//! seed is drawn from the caller's generator in episode order, so a rollout is reproducible
//! and does not depend on thread scheduling.

use agentrl_chat::ChatCodec;
use agentrl_engine::{Engine, FinishReason, GenerateParams, GenerateRequest, SamplingParams};
use agentrl_gym::{Action, Env, Observation, Reward, Step, ToolCall};
use rand::Rng;

use crate::episode::{Episode, TokenSource};

/// Limits of one rollout besides the codec's action cap.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutLimits {
    /// Longest episode in tokens; past it the episode is cut and submitted on the agent's
    /// behalf (and marked truncated). Capped by the engine's `max_seq`.
    pub max_episode_tokens: usize,
    /// Environment steps run at once (tests run in child processes, so this overlaps them).
    pub env_threads: usize,
}

/// One episode to run: which task, in which group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeJob {
    pub task_id: String,
    pub group_id: u32,
}

/// Runs `group_size` episodes of every task (group `g` = `task_ids[g]`); `envs` holds one
/// environment per episode, `task_ids.len() * group_size` in all.
#[allow(clippy::too_many_arguments)]
pub fn run_groups<E: Env + Send, R: Rng + ?Sized>(
    engine: &mut dyn Engine,
    codec: &dyn ChatCodec,
    sampling: &SamplingParams,
    limits: &RolloutLimits,
    envs: &mut [E],
    task_ids: &[String],
    group_size: usize,
    rng: &mut R,
) -> anyhow::Result<Vec<Episode>> {
    let jobs: Vec<EpisodeJob> = task_ids
        .iter()
        .enumerate()
        .flat_map(|(g, task)| {
            (0..group_size).map(move |_| EpisodeJob {
                task_id: task.clone(),
                group_id: g as u32,
            })
        })
        .collect();
    run_episodes(engine, codec, sampling, limits, envs, &jobs, rng)
}

/// How many episodes (and so environments and KV-cache rows) may be alive at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBound {
    /// Episodes alive at once, at most.
    pub max_episodes: usize,
    /// Tasks per engine call, at most (`usize::MAX`: as many as `max_episodes` allows).
    pub max_tasks: usize,
}

/// [`run_groups`] with at most `bound.max_episodes` episodes alive at once: tasks are taken a
/// few at a time, and a group larger than the bound is sampled in pieces (its pieces keep one
/// group id). `make_envs(n, rng)` makes the `n` environments of one call; it gets the caller's
/// generator before the call does, so environment seeds and sampling seeds stay in one stream.
/// Group ids count tasks across calls, as one [`run_groups`] call would number them.
#[allow(clippy::too_many_arguments)]
pub fn run_groups_bounded<E: Env + Send, R: Rng + ?Sized>(
    engine: &mut dyn Engine,
    codec: &dyn ChatCodec,
    sampling: &SamplingParams,
    limits: &RolloutLimits,
    make_envs: &mut dyn FnMut(usize, &mut R) -> Vec<E>,
    task_ids: &[String],
    group_size: usize,
    bound: LiveBound,
    rng: &mut R,
) -> anyhow::Result<Vec<Episode>> {
    anyhow::ensure!(group_size > 0, "rollout: group_size must be >= 1");
    let live = bound.max_episodes.max(1);
    let tasks_per_call = (live / group_size).clamp(1, bound.max_tasks.max(1));
    let mut out = Vec::new();
    for (c, chunk) in task_ids.chunks(tasks_per_call).enumerate() {
        let first_group = (c * tasks_per_call) as u32;
        let mut left = group_size;
        while left > 0 {
            let piece = left.min((live / chunk.len()).max(1));
            let mut envs = make_envs(chunk.len() * piece, rng);
            let mut episodes = run_groups(
                engine, codec, sampling, limits, &mut envs, chunk, piece, rng,
            )?;
            for ep in &mut episodes {
                ep.group_id += first_group;
            }
            out.extend(episodes);
            left -= piece;
        }
    }
    Ok(out)
}

/// The `submit` call the driver makes on the agent's behalf when an episode is cut.
pub fn submit_call() -> Action {
    Action::Call(ToolCall {
        name: "submit".to_string(),
        arguments: serde_json::json!({}),
    })
}

/// Runs all `jobs` together (job `i` on `envs[i]`), one engine call per turn.
pub fn run_episodes<E: Env + Send, R: Rng + ?Sized>(
    engine: &mut dyn Engine,
    codec: &dyn ChatCodec,
    sampling: &SamplingParams,
    limits: &RolloutLimits,
    envs: &mut [E],
    jobs: &[EpisodeJob],
    rng: &mut R,
) -> anyhow::Result<Vec<Episode>> {
    sampling.validate()?;
    anyhow::ensure!(
        envs.len() == jobs.len(),
        "run_episodes: {} environments for {} episodes",
        envs.len(),
        jobs.len()
    );
    anyhow::ensure!(limits.env_threads > 0, "rollout: env_threads must be > 0");
    let budget = limits.max_episode_tokens.min(engine.max_seq());
    let max_action = codec.max_action_tokens();
    anyhow::ensure!(max_action > 0, "rollout: the codec allows no action tokens");
    let params = GenerateParams {
        sampling: sampling.clone(),
        max_tokens: max_action,
        stop: codec.stop_ids(),
    };

    let firsts = parallel_env_calls(
        envs,
        (0..jobs.len()).collect(),
        limits.env_threads,
        |env, i| env.reset(&jobs[i].task_id),
    )?;
    let mut episodes: Vec<Episode> = Vec::with_capacity(jobs.len());
    let mut tasks: Vec<Observation> = Vec::with_capacity(jobs.len());
    for (job, (_, first)) in jobs.iter().zip(firsts) {
        let mut episode = Episode::new(&job.task_id, job.group_id);
        let prompt = codec
            .prompt_ids(&first)
            .map_err(|e| e.context(format!("task {}: rendering the prompt", job.task_id)))?;
        anyhow::ensure!(
            prompt.len() + max_action <= budget,
            "task {}: the prompt ({} tokens) leaves no room for an action within {budget} tokens",
            job.task_id,
            prompt.len()
        );
        for &t in &prompt {
            episode.push(t, TokenSource::Prompt, 0.0);
        }
        tasks.push(first);
        episodes.push(episode);
    }

    // Sessions name each episode's sequence for the engine's prefix cache; the offset keeps
    // them distinct from the sessions of earlier calls.
    let session_base: u64 = rng.random::<u64>() >> 1;
    // Per episode, each turn's ids as sampled (plus any closing ids) and the observation that
    // followed, for the drift check once the episode is over.
    let mut turns: Vec<Vec<(Vec<u32>, Option<Observation>)>> = vec![Vec::new(); jobs.len()];
    let close_cut = codec.close_cut_action_ids();
    let mut live: Vec<usize> = (0..jobs.len()).collect();
    while !live.is_empty() {
        let requests: Vec<GenerateRequest> = live
            .iter()
            .map(|&ep| GenerateRequest {
                prompt: episodes[ep].tokens.clone(),
                seed: rng.random(),
                session: Some(session_base + ep as u64),
            })
            .collect();
        let completions = engine.generate(&requests, &params)?;
        anyhow::ensure!(
            completions.len() == live.len(),
            "the engine returned {} completions for {} requests",
            completions.len(),
            live.len()
        );
        let mut actions: std::collections::HashMap<usize, Action> = Default::default();
        let mut cut: std::collections::HashSet<usize> = Default::default();
        for (&ep, completion) in live.iter().zip(completions) {
            anyhow::ensure!(
                !completion.tokens.is_empty()
                    && completion.tokens.len() == completion.logprobs.len(),
                "task {}: the engine returned {} tokens with {} log-probs",
                episodes[ep].task_id,
                completion.tokens.len(),
                completion.logprobs.len()
            );
            let episode = &mut episodes[ep];
            episode.weight_version = completion.weight_version;
            for (&token, &logprob) in completion.tokens.iter().zip(&completion.logprobs) {
                episode.push(token, TokenSource::Action, logprob);
            }
            actions.insert(ep, codec.parse_action(&completion.tokens, &tasks[ep]));
            turns[ep].push((completion.tokens.clone(), None));
            if completion.finish == FinishReason::Length {
                cut.insert(ep);
            }
        }

        let steps = parallel_env_calls(envs, live.clone(), limits.env_threads, |env, ep| {
            env.step(&actions[&ep])
        })?;
        let mut to_submit = Vec::new();
        let mut ended = vec![false; jobs.len()];
        for (ep, step) in steps {
            let episode = &mut episodes[ep];
            let action = actions[&ep].clone();
            let rejected = matches!(action, Action::Malformed { .. })
                || matches!(step.observation, Observation::Error { .. });
            episode.format_errors += u32::from(rejected);
            episode.actions.push(action);
            if step.done {
                episode.reward = finished_reward(&step, &episode.task_id)?;
                episode.turns += 1;
                ended[ep] = true;
                continue;
            }
            let obs = codec.observation_ids(&step.observation).map_err(|e| {
                e.context(format!(
                    "task {}: rendering an observation",
                    episode.task_id
                ))
            })?;
            if episode.len() + obs.len() + max_action > budget {
                // No room for the observation and another action: cut here and let the
                // verifier score what the agent did so far.
                episode.turns += 1;
                episode.truncated = true;
                to_submit.push(ep);
                ended[ep] = true;
                continue;
            }
            if let Some((turn_ids, observed)) = turns[ep].last_mut() {
                if cut.contains(&ep) {
                    // The length cap cut the action before its stop token: close it
                    // (unsampled, no loss) so the observation is not read as the agent's.
                    for &t in &close_cut {
                        episode.push(t, TokenSource::Observation, 0.0);
                    }
                    turn_ids.extend(&close_cut);
                }
                *observed = Some(step.observation.clone());
            }
            for &t in &obs {
                episode.push(t, TokenSource::Observation, 0.0);
            }
            episode.turns += 1;
        }
        let submitted = parallel_env_calls(envs, to_submit, limits.env_threads, |env, _| {
            env.step(&submit_call())
        })?;
        for (ep, step) in submitted {
            anyhow::ensure!(
                step.done,
                "task {}: the environment did not end the episode on submit",
                episodes[ep].task_id
            );
            episodes[ep].reward = finished_reward(&step, &episodes[ep].task_id)?;
        }
        live.retain(|&ep| !ended[ep]);
    }
    for ((episode, task), episode_turns) in episodes.iter_mut().zip(&tasks).zip(&turns) {
        let view: Vec<(&[u32], Option<&Observation>)> = episode_turns
            .iter()
            .map(|(ids, obs)| (ids.as_slice(), obs.as_ref()))
            .collect();
        episode.drifted = codec
            .retokenization_drift(task, &view)
            .map_err(|e| e.context(format!("task {}: the drift check", episode.task_id)))?;
    }
    Ok(episodes)
}

fn finished_reward(step: &Step, task_id: &str) -> anyhow::Result<Reward> {
    step.reward.clone().ok_or_else(|| {
        anyhow::anyhow!("task {task_id}: the environment ended the episode without a reward")
    })
}

/// Calls `f(env_i, i)` for every index in `indices` (ascending or not), spreading the calls over
/// up to `threads` threads; results come back sorted by index, so the outcome does not depend on
/// scheduling.
fn parallel_env_calls<E, T, F>(
    envs: &mut [E],
    mut indices: Vec<usize>,
    threads: usize,
    f: F,
) -> anyhow::Result<Vec<(usize, T)>>
where
    E: Env + Send,
    T: Send,
    F: Fn(&mut E, usize) -> Result<T, E::Error> + Sync,
{
    indices.sort_unstable();
    indices.dedup();
    let wanted: std::collections::HashSet<usize> = indices.iter().copied().collect();
    let mut work: Vec<(usize, &mut E)> = envs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| wanted.contains(i))
        .collect();
    let run = |chunk: &mut [(usize, &mut E)]| -> anyhow::Result<Vec<(usize, T)>> {
        chunk
            .iter_mut()
            .map(|(i, env)| {
                f(env, *i)
                    .map(|out| (*i, out))
                    .map_err(|err| anyhow::Error::new(err).context(format!("environment {i}")))
            })
            .collect()
    };
    if threads <= 1 || work.len() <= 1 {
        return run(&mut work);
    }
    let per_thread = work.len().div_ceil(threads);
    let results: Vec<anyhow::Result<Vec<(usize, T)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = work
            .chunks_mut(per_thread)
            .map(|chunk| scope.spawn(|| run(chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("an environment thread panicked")))
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out)
}
