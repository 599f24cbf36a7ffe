//! Demonstrations: episodes whose actions are scripted tool calls (the gym's expert,
//! `agentrl_gym::expert`), rendered and scored by the same driver as sampled episodes.
//!
//! Where it sits: task → **expert calls → episode** → batch → supervised loss (`agentrl sft`).
//! A [`ScriptedEngine`] stands in for the policy: each turn it answers with the ids
//! [`ChatCodec::encode_call`] gives for the episode's next planned call, so
//! [`crate::driver::run_episodes`] renders the prompt, parses the action, steps the real env
//! (sandboxed tests, hidden-test verifier) and appends the observation ids exactly as for a
//! sampled episode. One path builds every multi-turn episode; a demonstration differs from a
//! rollout only in where its action ids came from (their log-probs are 0: nothing sampled them).
//!
//! Plans are made from each episode's first observation, so a candidate edit names the
//! candidate's position in the view the episode shows (a [`crate::ShuffledCandidates`] view
//! lists them in a fresh order).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentrl_chat::ChatCodec;
use agentrl_engine::{
    Completion, Engine, FinishReason, GenerateParams, GenerateRequest, LogprobKind, WeightSync,
};
use agentrl_gym::expert::{self, EditForm, Variant};
use agentrl_gym::{Action, Env, Observation, Step, TaskSet, ToolCall};
use anyhow::Context;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::driver::{run_episodes, EpisodeJob, RolloutLimits};
use crate::episode::Episode;

/// The calls of job `i`, planned from its episode's first observation.
pub type PlanFn<'a> = dyn Fn(usize, &Observation) -> anyhow::Result<Vec<ToolCall>> + Sync + 'a;

/// An env that keeps a copy of each episode's first observation for the planner.
struct Recorded<E> {
    inner: E,
    first: Arc<Mutex<Option<Observation>>>,
}

impl<E: Env> Env for Recorded<E> {
    type Error = E::Error;

    fn reset(&mut self, task_id: &str) -> Result<Observation, Self::Error> {
        let observation = self.inner.reset(task_id)?;
        // A poisoned slot stays empty; the engine then names the episode it cannot plan.
        if let Ok(mut slot) = self.first.lock() {
            *slot = Some(observation.clone());
        }
        Ok(observation)
    }

    fn step(&mut self, action: &Action) -> Result<Step, Self::Error> {
        self.inner.step(action)
    }
}

/// An engine that "samples" each episode's planned calls, one per turn.
///
/// The driver's first call asks for every job's first action in job order (all episodes are
/// live then), which ties each session to its job; later calls are matched by session.
pub struct ScriptedEngine<'a> {
    codec: &'a dyn ChatCodec,
    jobs: &'a [EpisodeJob],
    plan: &'a PlanFn<'a>,
    firsts: Vec<Arc<Mutex<Option<Observation>>>>,
    /// Session → (job, calls made so far).
    sessions: HashMap<u64, (usize, usize)>,
    scripts: Vec<Option<Vec<ToolCall>>>,
}

impl ScriptedEngine<'_> {
    fn script(&mut self, job: usize) -> anyhow::Result<&[ToolCall]> {
        if self.scripts[job].is_none() {
            let first = self.firsts[job]
                .lock()
                .ok()
                .and_then(|slot| slot.clone())
                .with_context(|| {
                    format!(
                        "task {}: no first observation to plan from",
                        self.jobs[job].task_id
                    )
                })?;
            self.scripts[job] = Some((self.plan)(job, &first)?);
        }
        Ok(self.scripts[job].as_deref().unwrap_or_default())
    }
}

impl Engine for ScriptedEngine<'_> {
    fn generate(
        &mut self,
        requests: &[GenerateRequest],
        params: &GenerateParams,
    ) -> anyhow::Result<Vec<Completion>> {
        if self.sessions.is_empty() {
            anyhow::ensure!(
                requests.len() == self.jobs.len(),
                "scripted engine: the first call has {} requests for {} jobs",
                requests.len(),
                self.jobs.len()
            );
            for (job, request) in requests.iter().enumerate() {
                let session = request
                    .session
                    .context("scripted engine: a request without a session")?;
                self.sessions.insert(session, (job, 0));
            }
        }
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            let session = request
                .session
                .context("scripted engine: a request without a session")?;
            let &(job, made) = self
                .sessions
                .get(&session)
                .with_context(|| format!("scripted engine: unknown session {session}"))?;
            let task = self.jobs[job].task_id.clone();
            let call = self.script(job)?.get(made).cloned().with_context(|| {
                format!("task {task}: the expert's {made} calls ended before the episode did")
            })?;
            let tokens = self
                .codec
                .encode_call(&call)
                .with_context(|| format!("task {task}: encoding the expert's call {call:?}"))?;
            anyhow::ensure!(
                !tokens.is_empty() && tokens.len() <= params.max_tokens,
                "task {task}: the expert's call {} takes {} tokens; the action cap is {} \
                 (raise rollout.max_action_tokens)",
                call.name,
                tokens.len(),
                params.max_tokens
            );
            let finish = match tokens.last() {
                Some(last) if params.stop.contains(last) => FinishReason::Stop,
                _ => FinishReason::Length,
            };
            self.sessions.insert(session, (job, made + 1));
            out.push(Completion {
                logprobs: vec![0.0; tokens.len()],
                tokens,
                finish,
                logprob_kind: LogprobKind::TemperatureScaled,
                weight_version: 0,
            });
        }
        Ok(out)
    }

    fn max_seq(&self) -> usize {
        usize::MAX
    }

    fn sync_weights(&mut self, _sync: &WeightSync) -> anyhow::Result<()> {
        Ok(())
    }

    fn weight_version(&self) -> u64 {
        0
    }
}

/// Runs job `i` on `envs[i]` with the calls `plan(i, first observation)`, through the rollout
/// driver; the episodes come back in job order, rewarded by the env.
pub fn demonstrate<E: Env + Send>(
    codec: &dyn ChatCodec,
    limits: &RolloutLimits,
    envs: Vec<E>,
    jobs: &[EpisodeJob],
    plan: &PlanFn<'_>,
) -> anyhow::Result<Vec<Episode>> {
    let firsts: Vec<Arc<Mutex<Option<Observation>>>> =
        (0..jobs.len()).map(|_| Arc::default()).collect();
    let mut envs: Vec<Recorded<E>> = envs
        .into_iter()
        .zip(&firsts)
        .map(|(inner, first)| Recorded {
            inner,
            first: first.clone(),
        })
        .collect();
    let mut engine = ScriptedEngine {
        codec,
        jobs,
        plan,
        firsts,
        sessions: HashMap::new(),
        scripts: vec![None; jobs.len()],
    };
    // Scripted actions draw nothing: the generator only seeds the (unused) sampling rows.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    run_episodes(
        &mut engine,
        codec,
        &agentrl_engine::SamplingParams::default(),
        limits,
        &mut envs,
        jobs,
        &mut rng,
    )
}

/// Whether every call encodes within the codec's action cap (a call that does not encode is
/// left to the scripted engine, which names it).
fn fits_the_action_cap(codec: &dyn ChatCodec, calls: &[ToolCall]) -> bool {
    let cap = codec.max_action_tokens();
    calls.iter().all(|call| {
        codec
            .encode_call(call)
            .map_or(true, |tokens| tokens.len() <= cap)
    })
}

/// One expert demonstration: a task, its group, the trajectory's shape and its edit form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertJob {
    pub task_id: String,
    pub group_id: u32,
    pub variant: Variant,
    pub form: EditForm,
}

/// The edit forms `codec` can express: candidate edits always, free-form edits where the
/// format writes them (Qwen3's JSON calls; not TinyAgent's symbols).
pub fn edit_forms(codec: &dyn ChatCodec) -> Vec<EditForm> {
    let free = ToolCall {
        name: "edit".to_string(),
        arguments: serde_json::json!({ "path": "m.py", "old": "a", "new": "b" }),
    };
    if codec.encode_call(&free).is_ok() {
        vec![EditForm::Candidate, EditForm::FreeForm]
    } else {
        vec![EditForm::Candidate]
    }
}

/// `per_task` demonstrations of each task (group `g` = `task_ids[g]`), cycling through the
/// variants ([`Variant::cycle`], from `offset`) and the `forms`, so every shape and form
/// appears once the data set is large enough.
pub fn expert_jobs(
    task_ids: &[String],
    per_task: usize,
    forms: &[EditForm],
    offset: usize,
) -> Vec<ExpertJob> {
    let mut jobs = Vec::with_capacity(task_ids.len() * per_task);
    for (g, task_id) in task_ids.iter().enumerate() {
        for i in 0..per_task {
            let index = offset + g + i;
            jobs.push(ExpertJob {
                task_id: task_id.clone(),
                group_id: g as u32,
                variant: Variant::cycle(index),
                form: forms[index % forms.len().max(1)],
            });
        }
    }
    jobs
}

/// The expert's episodes of `jobs` (job `i` on `envs[i]`): each planned from the task's
/// reference within `max_turns` calls ([`expert::plan`]), renumbered to the candidates the
/// episode shows ([`expert::in_view`]), and run through the driver ([`demonstrate`]).
pub fn expert_episodes<E: Env + Send>(
    codec: &dyn ChatCodec,
    limits: &RolloutLimits,
    tasks: &TaskSet,
    envs: Vec<E>,
    jobs: &[ExpertJob],
    max_turns: usize,
) -> anyhow::Result<Vec<Episode>> {
    let episode_jobs: Vec<EpisodeJob> = jobs
        .iter()
        .map(|j| EpisodeJob {
            task_id: j.task_id.clone(),
            group_id: j.group_id,
        })
        .collect();
    let plan = |i: usize, first: &Observation| -> anyhow::Result<Vec<ToolCall>> {
        let job = &jobs[i];
        let task = tasks.get(&job.task_id)?;
        let mut calls = expert::plan(&task, job.variant, job.form, max_turns)?;
        // A free-form edit longer than the action cap is an action the policy could never
        // sample whole: the expert writes that demonstration's edits as candidates instead
        // (a task's own diff can run to hundreds of tokens; its candidate edit is a few).
        if job.form == EditForm::FreeForm && !fits_the_action_cap(codec, &calls) {
            calls = expert::plan(&task, job.variant, EditForm::Candidate, max_turns)?;
        }
        let shown = match first {
            Observation::Task { candidates, .. } => candidates.as_slice(),
            _ => &[],
        };
        Ok(expert::in_view(&task, &calls, shown)?)
    };
    demonstrate(codec, limits, envs, &episode_jobs, &plan)
}
