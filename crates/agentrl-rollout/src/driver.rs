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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agentrl_chat::tiny::TinyCodec;
    use agentrl_engine::LocalEngine;
    use agentrl_gym::{CandidateEdit, ErrorKind};
    use agentrl_model::{TinyAgent, TinyConfig};
    use candle_core::Device;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// A scripted BugFix-like environment: candidate `fix` is the right edit; `test` reports
    /// PASS or FAIL; `submit` ends with a reward; malformed calls get an error observation;
    /// 4 turns at most.
    pub(crate) struct ScriptedEnv {
        fix: usize,
        edited: Option<usize>,
        turns: u32,
        format_errors: u32,
    }

    impl ScriptedEnv {
        pub(crate) fn new() -> Self {
            Self {
                fix: 0,
                edited: None,
                turns: 0,
                format_errors: 0,
            }
        }

        fn reward(&self) -> Reward {
            let solved = self.edited == Some(self.fix);
            Reward {
                score: if solved { 1.0 } else { 0.0 },
                public_passed: u32::from(solved),
                public_total: 1,
                hidden_passed: u32::from(solved),
                hidden_total: 1,
                tampered: false,
                format_errors: self.format_errors,
                verdict_reruns: 0,
            }
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("scripted env: {0}")]
    pub(crate) struct ScriptedError(String);

    impl Env for ScriptedEnv {
        type Error = ScriptedError;

        fn reset(&mut self, task_id: &str) -> Result<Observation, ScriptedError> {
            self.fix = task_id
                .strip_prefix("task")
                .and_then(|k| k.parse().ok())
                .ok_or_else(|| ScriptedError(format!("unknown task {task_id}")))?;
            self.edited = None;
            self.turns = 0;
            self.format_errors = 0;
            Ok(Observation::Task {
                task_id: task_id.to_string(),
                prompt: "fix it".into(),
                files: vec!["mod.py".into(), "test_mod.py".into()],
                candidates: (0..3)
                    .map(|k| CandidateEdit {
                        path: "mod.py".into(),
                        old: "x".into(),
                        new: format!("v{k}"),
                    })
                    .collect(),
            })
        }

        fn step(&mut self, action: &Action) -> Result<Step, ScriptedError> {
            self.turns += 1;
            let (observation, done) = match action {
                Action::Malformed { reason, .. } => {
                    self.format_errors += 1;
                    (
                        Observation::Error {
                            error: ErrorKind::Malformed,
                            message: reason.clone(),
                        },
                        false,
                    )
                }
                Action::Call(call) => match call.name.as_str() {
                    "submit" => (Observation::Submitted(self.reward()), true),
                    "edit" => {
                        let k = call.arguments["candidate"].as_u64().unwrap_or(99) as usize;
                        if k < 3 {
                            self.edited = Some(k);
                            (
                                Observation::Edited {
                                    path: "mod.py".into(),
                                    candidate: Some(k),
                                    summary: format!("C{k}"),
                                },
                                false,
                            )
                        } else {
                            self.format_errors += 1;
                            (
                                Observation::Error {
                                    error: ErrorKind::BadCandidate,
                                    message: "no such candidate".into(),
                                },
                                false,
                            )
                        }
                    }
                    _ => (
                        Observation::Tests(agentrl_gym::TestReport {
                            passed: vec![],
                            failed: if self.reward().score > 0.0 {
                                vec![]
                            } else {
                                vec!["t".into()]
                            },
                            first_failure: None,
                            crashed: None,
                        }),
                        false,
                    ),
                },
            };
            if done {
                return Ok(Step {
                    observation,
                    done,
                    reward: Some(self.reward()),
                });
            }
            if self.turns >= 4 {
                return Ok(Step {
                    observation: Observation::TurnLimit(self.reward()),
                    done: true,
                    reward: Some(self.reward()),
                });
            }
            Ok(Step {
                observation,
                done,
                reward: None,
            })
        }
    }

    /// Symbols of the scripted env's observations.
    pub(crate) fn render(obs: &Observation) -> Vec<String> {
        match obs {
            Observation::Task { candidates, .. } => candidates
                .iter()
                .enumerate()
                .flat_map(|(k, c)| vec![format!("C{k}"), c.new.clone(), format!("C{k}")])
                .collect(),
            Observation::Tests(report) => {
                vec![if report.failed.is_empty() {
                    "PASS"
                } else {
                    "FAIL"
                }
                .into()]
            }
            Observation::Edited { summary, .. } => vec!["EDITED".into(), summary.clone()],
            Observation::Error { .. } => vec!["ERR".into()],
            _ => vec![],
        }
    }

    pub(crate) fn codec() -> TinyCodec {
        TinyCodec::new(
            &["v0", "v1", "v2", "PASS", "FAIL", "EDITED", "ERR"],
            render,
            6,
        )
    }

    pub(crate) fn model(codec: &TinyCodec, seed: u64) -> TinyAgent {
        let cfg = TinyConfig {
            vocab_size: codec.vocab().len(),
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            mlp_ratio: 2,
            max_seq: 128,
            rms_eps: 1e-5,
            // The pointer head is on, as in the default run, so the engine/trainer agreement
            // tests built on these rollouts cover it.
            pointer_markers: codec.vocab().candidate_ids(),
            pointer_segment_end: codec.vocab().obs_end_id(),
        };
        TinyAgent::new(cfg, seed, &Device::Cpu).unwrap()
    }

    pub(crate) fn limits() -> RolloutLimits {
        RolloutLimits {
            max_episode_tokens: 512,
            env_threads: 2,
        }
    }

    pub(crate) fn rollouts(
        seed: u64,
        limits: &RolloutLimits,
    ) -> (TinyCodec, TinyAgent, Vec<Episode>) {
        let codec = codec();
        let model = model(&codec, 2);
        let tasks: Vec<String> = (0..3).map(|k| format!("task{k}")).collect();
        let mut envs: Vec<ScriptedEnv> = (0..tasks.len() * 4).map(|_| ScriptedEnv::new()).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut engine = LocalEngine::new(&model);
        let episodes = run_groups(
            &mut engine,
            &codec,
            &SamplingParams::default(),
            limits,
            &mut envs,
            &tasks,
            4,
            &mut rng,
        )
        .unwrap();
        (codec, model, episodes)
    }

    #[test]
    fn episodes_record_every_token_with_source_turn_and_logprob() {
        let (codec, _, episodes) = rollouts(1, &limits());
        assert_eq!(episodes.len(), 12);
        let v = codec.vocab();
        for (i, ep) in episodes.iter().enumerate() {
            ep.validate().unwrap();
            assert_eq!(ep.group_id, (i / 4) as u32);
            assert_eq!(ep.task_id, format!("task{}", i / 4));
            assert_eq!(ep.tokens[0], v.bos_id());
            assert_eq!(ep.sources[0], TokenSource::Prompt);
            assert!(ep.turns >= 1 && ep.turns <= 4);
            assert_eq!(ep.actions.len(), ep.turns as usize);
            // Walk the segments: prompt, then (action, observation?)*.
            // Segments of equal source: an action is always followed by an observation unless
            // it ended the episode, so consecutive actions never merge.
            let mut segments: Vec<(TokenSource, Vec<usize>)> = Vec::new();
            for (pos, &src) in ep.sources.iter().enumerate() {
                match segments.last_mut() {
                    Some((s, idx)) if *s == src => idx.push(pos),
                    _ => segments.push((src, vec![pos])),
                }
            }
            assert_eq!(segments[0].0, TokenSource::Prompt);
            let actions = segments
                .iter()
                .filter(|(s, _)| *s == TokenSource::Action)
                .count();
            assert_eq!(actions, ep.turns as usize, "episode {i}: {segments:?}");
            for (src, idx) in &segments {
                for &p in idx {
                    match src {
                        TokenSource::Action => assert!(ep.logprobs[p] < 0.0),
                        _ => assert_eq!(ep.logprobs[p], 0.0),
                    }
                }
                if *src == TokenSource::Action {
                    let last = ep.tokens[*idx.last().unwrap()];
                    assert!(
                        codec.is_stop(last) || idx.len() == 6,
                        "an action ends with a stop token or at the action cap"
                    );
                }
                if *src == TokenSource::Observation {
                    assert_eq!(ep.tokens[idx[0]], v.obs_start_id());
                    assert_eq!(ep.tokens[*idx.last().unwrap()], v.obs_end_id());
                }
            }
            // Turn ids count actions taken before the token.
            assert!(ep
                .turn_ids
                .windows(2)
                .all(|w| w[1] == w[0] || w[1] == w[0] + 1));
            let malformed = ep
                .actions
                .iter()
                .filter(|a| matches!(a, Action::Malformed { .. }))
                .count() as u32;
            assert!(ep.format_errors >= malformed);
            assert_eq!(ep.format_errors, ep.reward.format_errors);
            // JSONL round trip.
            let line = serde_json::to_string(ep).unwrap();
            assert!(!line.contains('\n'));
            let back: Episode = serde_json::from_str(&line).unwrap();
            assert_eq!(&back, ep);
        }
    }

    #[test]
    fn bounded_rollouts_never_exceed_the_live_bound_and_keep_group_ids() {
        let codec = codec();
        let model = model(&codec, 2);
        let tasks: Vec<String> = (0..3).map(|k| format!("task{k}")).collect();
        let mut sizes = Vec::new();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        // A group of 4 under a bound of 3 episodes: each task alone, in pieces of 3 and 1.
        let episodes = run_groups_bounded(
            &mut LocalEngine::new(&model),
            &codec,
            &SamplingParams::default(),
            &limits(),
            &mut |n, _: &mut ChaCha8Rng| {
                sizes.push(n);
                (0..n).map(|_| ScriptedEnv::new()).collect()
            },
            &tasks,
            4,
            LiveBound {
                max_episodes: 3,
                max_tasks: usize::MAX,
            },
            &mut rng,
        )
        .unwrap();
        assert_eq!(sizes, vec![3, 1, 3, 1, 3, 1]);
        assert_eq!(episodes.len(), 12);
        for (i, ep) in episodes.iter().enumerate() {
            assert_eq!(ep.group_id, (i / 4) as u32, "episode {i}");
            assert_eq!(ep.task_id, format!("task{}", i / 4));
        }
    }

    #[test]
    fn rollouts_are_deterministic_for_a_seed() {
        let cfg = limits();
        assert_eq!(rollouts(7, &cfg).2, rollouts(7, &cfg).2);
        let single_thread = RolloutLimits {
            env_threads: 1,
            ..limits()
        };
        assert_eq!(rollouts(7, &cfg).2, rollouts(7, &single_thread).2);
        assert_ne!(rollouts(7, &cfg).2, rollouts(8, &cfg).2);
    }

    #[test]
    fn token_budget_truncates_and_submits_on_the_agents_behalf() {
        let cfg = RolloutLimits {
            max_episode_tokens: 18,
            ..limits()
        };
        let (_, _, episodes) = rollouts(3, &cfg);
        assert!(episodes.iter().all(|e| e.len() <= 18));
        assert!(episodes.iter().any(|e| e.truncated));
        for e in episodes.iter().filter(|e| e.truncated) {
            assert_eq!(
                e.reward.hidden_total, 1,
                "truncated episodes are still scored"
            );
        }
        // A prompt that cannot fit an action is an error, not a silent cut.
        let tight = RolloutLimits {
            max_episode_tokens: 10,
            ..limits()
        };
        let codec = codec();
        let model = model(&codec, 2);
        let mut env = ScriptedEnv::new();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let job = EpisodeJob {
            task_id: "task1".into(),
            group_id: 0,
        };
        let err = run_episodes(
            &mut LocalEngine::new(&model),
            &codec,
            &SamplingParams::default(),
            &tight,
            std::slice::from_mut(&mut env),
            &[job],
            &mut rng,
        )
        .unwrap_err();
        assert!(err.to_string().contains("no room"), "{err}");
    }

    #[test]
    fn greedy_expert_like_policy_path_parses_calls() {
        // A forced path through the driver: feed a known-good action through the codec and
        // env, as the engine would after sampling it.
        let codec = codec();
        let mut env = ScriptedEnv::new();
        let first = env.reset("task2").unwrap();
        let edit = ToolCall {
            name: "edit".into(),
            arguments: serde_json::json!({"candidate": 2}),
        };
        let ids = codec.encode_call(&edit).unwrap();
        let action = ChatCodec::parse_action(&codec, &ids, &first);
        assert_eq!(action, Action::Call(edit));
        env.step(&action).unwrap();
        let step = env.step(&submit_call()).unwrap();
        assert!(step.done && step.reward.unwrap().solved());
    }
}
