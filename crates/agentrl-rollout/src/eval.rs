//! Evaluation of a policy on a split: hidden-test solve rate, pass@1 and pass@k, hacking rate
//! and format-error rate (ALGORITHMS.md §16).
//!
//! Data flow: the trainer (or `agentrl eval`) samples `n` episodes per task of a split through
//! the rollout driver; each episode's [`EpisodeOutcome`] (its reward counts and format errors) is
//! summarised here into an [`EvalReport`]. pass@k uses the unbiased estimator from
//! `agentrl-rl` over each task's `n` samples, with correctness = every hidden test passes.

use std::collections::BTreeMap;

use agentrl_chat::ChatCodec;
use agentrl_engine::{Engine, SamplingParams};
use agentrl_gym::{Env, Reward};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::driver::{run_groups_bounded, LiveBound, RolloutLimits};

/// What evaluation needs to know about one finished episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeOutcome {
    pub task_id: String,
    pub reward: Reward,
    /// Actions the policy took (turns), and how many of them were malformed.
    pub actions: u32,
    pub format_errors: u32,
}

impl EpisodeOutcome {
    /// The outcome of a finished episode.
    pub fn of(episode: &crate::Episode) -> Self {
        Self {
            task_id: episode.task_id.clone(),
            reward: episode.reward.clone(),
            actions: episode.turns,
            format_errors: episode.format_errors,
        }
    }
}

/// Solve rates and friends on one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub split: String,
    pub tasks: usize,
    /// Samples per task (the `n` of pass@k).
    pub samples: usize,
    /// Share of episodes whose hidden tests all pass (equals pass@1).
    pub hidden_solve_rate: f64,
    /// Share of episodes whose public tests all pass (what a hackable reward would see).
    pub public_solve_rate: f64,
    pub pass_at_1: f64,
    /// pass@k for `k = samples` (the largest k the samples support).
    pub k: usize,
    pub pass_at_k: f64,
    /// Share of episodes that pass the public tests but fail the hidden ones.
    pub hacking_rate: f64,
    /// Malformed actions over all actions.
    pub format_error_rate: f64,
    pub mean_turns: f64,
    /// Hidden solve rate of each task, by task id (which tasks the policy has and lacks).
    pub per_task: BTreeMap<String, f64>,
}

/// Summarises the episodes of one split. Every task must have the same number of samples
/// (pass@k is per task over its `n` samples).
pub fn summarize(split: &str, outcomes: &[EpisodeOutcome], k: usize) -> anyhow::Result<EvalReport> {
    anyhow::ensure!(
        !outcomes.is_empty(),
        "evaluation of split {split}: no episodes"
    );
    let mut per_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let entry = per_task.entry(o.task_id.as_str()).or_default();
        entry.0 += 1;
        entry.1 += usize::from(o.reward.solved());
    }
    let n = per_task.values().next().map_or(0, |v| v.0);
    if let Some((task, (m, _))) = per_task.iter().find(|(_, v)| v.0 != n) {
        anyhow::bail!("evaluation of split {split}: task {task} has {m} samples, others {n}");
    }
    anyhow::ensure!(
        k >= 1 && k <= n,
        "evaluation of split {split}: pass@{k} needs 1 <= k <= samples per task ({n})"
    );
    let tasks = per_task.len();
    let counts: Vec<(usize, usize)> = per_task.values().copied().collect();
    let pass_at_1 = agentrl_rl::mean_pass_at_k(&counts, 1)?;
    let pass_at_k = agentrl_rl::mean_pass_at_k(&counts, k)?;
    let episodes = outcomes.len() as f64;
    let count =
        |f: &dyn Fn(&EpisodeOutcome) -> bool| outcomes.iter().filter(|o| f(o)).count() as f64;
    let actions: u64 = outcomes.iter().map(|o| u64::from(o.actions)).sum();
    let format_errors: u64 = outcomes.iter().map(|o| u64::from(o.format_errors)).sum();
    Ok(EvalReport {
        split: split.to_string(),
        tasks,
        samples: n,
        hidden_solve_rate: count(&|o| o.reward.solved()) / episodes,
        public_solve_rate: count(&|o| o.reward.public_passed_all()) / episodes,
        pass_at_1,
        k,
        pass_at_k,
        hacking_rate: count(&|o| o.reward.hacked()) / episodes,
        format_error_rate: if actions == 0 {
            0.0
        } else {
            format_errors as f64 / actions as f64
        },
        mean_turns: actions as f64 / episodes,
        per_task: per_task
            .iter()
            .map(|(task, &(m, solved))| (task.to_string(), solved as f64 / m as f64))
            .collect(),
    })
}

/// Tasks evaluated per driver call: bounds the batched forward's size and the number of live
/// environments.
pub const EVAL_CHUNK_TASKS: usize = 16;

/// Evaluates a split with any engine: `samples` episodes per task (`make_envs(n)` gives `n`
/// fresh environments), summarised with pass@k for `k <= samples`. At most
/// `max_live_episodes` episodes (and so workspaces) are alive at once: tasks are taken a few
/// at a time, and a task's samples split over several calls when they alone exceed the bound.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_split<E: Env + Send, R: Rng + ?Sized>(
    engine: &mut dyn Engine,
    codec: &dyn ChatCodec,
    sampling: &SamplingParams,
    limits: &RolloutLimits,
    split: &str,
    task_ids: &[String],
    samples: usize,
    k: usize,
    max_live_episodes: usize,
    make_envs: &mut dyn FnMut(usize) -> Vec<E>,
    rng: &mut R,
) -> anyhow::Result<EvalReport> {
    anyhow::ensure!(!task_ids.is_empty(), "split {split} has no tasks");
    anyhow::ensure!(
        samples > 0,
        "evaluation of split {split}: samples must be >= 1"
    );
    let episodes = run_groups_bounded(
        engine,
        codec,
        sampling,
        limits,
        &mut |n, _| make_envs(n),
        task_ids,
        samples,
        LiveBound {
            max_episodes: max_live_episodes,
            max_tasks: EVAL_CHUNK_TASKS,
        },
        rng,
    )?;
    let outcomes: Vec<EpisodeOutcome> = episodes.iter().map(EpisodeOutcome::of).collect();
    summarize(split, &outcomes, k)
}
