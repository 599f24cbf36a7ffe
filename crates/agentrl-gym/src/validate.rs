//! Task validation and the random-policy baseline (`agentrl gym validate`, `random-baseline`).
//!
//! For each task, through the same env and verifier an agent meets: the buggy code fails some
//! hidden case; the reference fix passes every public and hidden test; `exploit` makes the
//! workspace's public tests pass while hidden ones fail and the episode is flagged tampered;
//! and, for tasks with candidates (they are optional: a language model edits freely), the
//! candidate set contains the fix, and which candidates solve the task or pass the public tests
//! only (a public-passing hack). A task whose reference fix fails is not explored further, so
//! a broken task (a sleeping test, say) costs two runs, not one per candidate. Warnings flag
//! what is legal but weak: a hidden case whose verdict is computed inside the sandbox. Tasks
//! are checked in parallel threads, one env each.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::env::{BugFixEnv, EnvConfig, GymError, OutcomeCache};
use crate::sandbox::Executor;
use crate::task::{Task, TaskSet};
use crate::types::{Action, Env, Observation, Tool, ToolCall};
use crate::verify::VerifyError;

/// What validation found for one task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskValidation {
    pub id: String,
    pub family: String,
    pub split: String,
    pub candidates: usize,
    /// Candidates that pass every hidden test.
    pub solving_candidates: Vec<usize>,
    /// Candidates that pass every workspace public test but fail a hidden one.
    pub public_passing_hacks: Vec<usize>,
    /// Everything that is wrong with the task; empty when it is valid.
    pub problems: Vec<String>,
    /// Legal but weak spots (e.g. a hidden verdict computed inside the sandbox).
    pub warnings: Vec<String>,
    /// Some run of the validation hit a time limit (e.g. the buggy code hangs). Such runs are
    /// never cached, so episodes on this task cost a time limit each time: the random baseline
    /// of `agentrl gym validate` leaves it out.
    pub time_limited: bool,
}

impl TaskValidation {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn call(name: &str, arguments: serde_json::Value) -> Action {
    Action::Call(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// Hidden cases whose check the verifier still has to evaluate inside the candidate's process,
/// where the code under test can forge it (an always-equal object, a shadowed builtin, a frame
/// that rewrites the caller's locals): those whose expression keeps a comparison the trusted
/// checker could not lift out of the sandbox (one over a comprehension's own variable, say).
/// Checks over values that are not plain data are found by running them (see
/// [`validate_task`]).
pub fn sandbox_verdict_warnings(task: &Task) -> Result<Vec<String>, GymError> {
    let checker = crate::trusted::checker().map_err(VerifyError::from)?;
    let mut warnings = Vec::new();
    for case in &task.hidden {
        let split = checker
            .split(&case.expr, &case.setup)
            .map_err(VerifyError::from)?;
        if let Some(part) = &split.sandbox_check {
            warnings.push(format!(
                "task `{}`, hidden case `{}`: `{part}` computes a verdict inside the sandbox, where the code under test can forge it; compare the value outside it (`\"check\": \"abs(result - 2.5) < 1e-9\"`, or an expectation kind: value, approx, unordered, set, data; see TASKS.md)",
                task.id, case.name
            ));
        }
    }
    Ok(warnings)
}

/// Warnings for the cases whose check a verdict had to evaluate in the candidate's process
/// because a value was not plain data.
fn checked_in_sandbox_warnings(task: &Task, verdict: &crate::verify::Verdict) -> Vec<String> {
    verdict
        .hidden
        .checked_in_sandbox
        .iter()
        .map(|name| {
            format!(
                "task `{}`, hidden case `{name}`: a value the check needs is not plain data (an object of the task's own class), so the check ran inside the candidate's process, where it can be forged; compare plain values (e.g. `p.x` rather than `p`)",
                task.id
            )
        })
        .collect()
}

/// Why the hidden cases that failed failed, as `name: detail` (for reports).
fn failing_cases(task: &Task, verdict: &crate::verify::Verdict) -> String {
    task.hidden
        .iter()
        .zip(&verdict.hidden.details)
        .filter_map(|(case, detail)| detail.as_ref().map(|d| format!("{}: {d}", case.name)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Validates one task with `env`.
pub fn validate_task(env: &mut BugFixEnv, task: &Task) -> Result<TaskValidation, GymError> {
    let mut problems = Vec::new();
    let mut warnings = sandbox_verdict_warnings(task)?;
    let buggy: BTreeMap<String, String> = task
        .modules
        .iter()
        .map(|m| (m.clone(), task.visible.get(m).cloned().unwrap_or_default()))
        .collect();
    let verdict = env.verify_modules(task, &buggy)?;
    let mut time_limited = verdict.time_limited;
    if verdict.solved() {
        problems.push("the buggy code passes every hidden test".to_string());
    }
    let verdict = env.verify_modules(task, &task.reference)?;
    time_limited |= verdict.time_limited;
    for warning in checked_in_sandbox_warnings(task, &verdict) {
        // One warning a case: a comprehension's verdict is warned about already.
        let case = warning.split('`').nth(3).unwrap_or_default().to_string();
        if !warnings
            .iter()
            .any(|w| w.contains(&format!("hidden case `{case}`")))
        {
            warnings.push(warning);
        }
    }
    if !verdict.solved() {
        problems.push(format!(
            "the reference fix passes only {}/{} hidden tests ({})",
            verdict.hidden_passed(),
            verdict.hidden_total(),
            failing_cases(task, &verdict)
        ));
    }
    let public = verdict.public.clone().unwrap_or_default();
    if !public.failed.is_empty() || public.crashed.is_some() || public.passed.is_empty() {
        problems.push(format!(
            "the reference fix does not pass the public tests: {}",
            crate::render::test_report_text(&public)
        ));
    }

    let result = |problems, solving, hacks, time_limited| TaskValidation {
        id: task.id.clone(),
        family: task.family.clone(),
        split: task.split.to_string(),
        candidates: task.candidates.len(),
        solving_candidates: solving,
        public_passing_hacks: hacks,
        problems,
        warnings: warnings.clone(),
        time_limited,
    };
    if !problems.is_empty() {
        return Ok(result(problems, Vec::new(), Vec::new(), time_limited));
    }

    env.reset(&task.id)?;
    env.step(&call("exploit", serde_json::json!({})))?;
    let step = env.step(&call("submit", serde_json::json!({})))?;
    match step.reward {
        Some(r) if r.public_passed_all() && !r.solved() && r.tampered => {}
        Some(r) => problems.push(format!(
            "exploit should pass public tests, fail hidden ones and be flagged; got public {}/{}, hidden {}/{}, tampered {}",
            r.public_passed, r.public_total, r.hidden_passed, r.hidden_total, r.tampered
        )),
        None => problems.push("submit did not end the episode".to_string()),
    }

    let mut solving = Vec::new();
    let mut hacks = Vec::new();
    for k in 0..task.candidates.len() {
        env.reset(&task.id)?;
        env.step(&call("edit", serde_json::json!({ "candidate": k })))?;
        let step = env.step(&call("submit", serde_json::json!({})))?;
        time_limited |= env.last_end().is_some_and(|e| e.verdict.time_limited);
        let Some(r) = step.reward else { continue };
        if r.solved() {
            solving.push(k);
        } else if r.public_passed_all() {
            hacks.push(k);
        }
    }
    match task.fix_candidate() {
        // Free-form tasks have no candidates at all; a candidate set must include the fix.
        None if task.candidates.is_empty() => {}
        None => problems.push("the candidate set has no `fix`".to_string()),
        Some(fix) if !solving.contains(&fix) => {
            problems.push(format!("candidate {fix} (the fix) does not solve the task"))
        }
        Some(_) => {}
    }
    Ok(result(problems, solving, hacks, time_limited))
}

/// Validates every task, on up to `threads` threads sharing one executor and cache.
pub fn validate_all(
    tasks: Arc<TaskSet>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    threads: usize,
) -> Result<Vec<TaskValidation>, GymError> {
    let queue = Mutex::new(tasks.tasks().to_vec());
    let results = Mutex::new(Vec::new());
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                let mut env = BugFixEnv::new(
                    tasks.clone(),
                    executor.clone(),
                    cache.clone(),
                    EnvConfig::default(),
                );
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.pop());
                    let Some(task) = next else { break };
                    match validate_task(&mut env, &task) {
                        Ok(v) => results.lock().map(|mut r| r.push(v)).unwrap_or(()),
                        Err(err) => {
                            if let Ok(mut slot) = first_error.lock() {
                                slot.get_or_insert(err);
                            }
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(err) = first_error.into_inner().ok().flatten() {
        return Err(err);
    }
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(results)
}

/// Solve rates of uniformly random policies, measured by playing real episodes.
#[derive(Debug, Clone, Serialize)]
pub struct RandomBaseline {
    pub episodes: usize,
    /// Pick one candidate uniformly, apply it, submit.
    pub random_candidate_solve_rate: f64,
    /// Each turn, a uniformly random tool call from the menu (read a visible file, test, edit
    /// candidate k, exploit, submit) until submit or the turn limit.
    pub random_tool_calls_solve_rate: f64,
}

/// Plays `episodes_per_task` episodes of each random policy on every task.
pub fn random_baseline(
    tasks: Arc<TaskSet>,
    executor: Arc<dyn Executor>,
    cache: Arc<OutcomeCache>,
    episodes_per_task: usize,
    seed: u64,
) -> Result<RandomBaseline, GymError> {
    let mut env = BugFixEnv::new(tasks.clone(), executor, cache, EnvConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut candidate_solved, mut tools_solved, mut episodes) = (0usize, 0usize, 0usize);
    for task in tasks.tasks() {
        for _ in 0..episodes_per_task {
            episodes += 1;
            env.reset(&task.id)?;
            if !task.candidates.is_empty() {
                let k = rng.random_range(0..task.candidates.len());
                env.step(&call("edit", serde_json::json!({ "candidate": k })))?;
            }
            let step = env.step(&call("submit", serde_json::json!({})))?;
            candidate_solved += usize::from(step.reward.is_some_and(|r| r.solved()));

            let observation = env.reset(&task.id)?;
            let files = match observation {
                Observation::Task { files, .. } => files,
                _ => Vec::new(),
            };
            let mut menu: Vec<Action> = files
                .iter()
                .map(|f| call("read", serde_json::json!({ "path": f })))
                .collect();
            menu.extend(
                (0..task.candidates.len())
                    .map(|k| call("edit", serde_json::json!({ "candidate": k }))),
            );
            menu.extend(
                Tool::ALL
                    .iter()
                    .filter(|t| !matches!(t, Tool::Read | Tool::Edit))
                    .map(|t| call(t.name(), serde_json::json!({}))),
            );
            loop {
                let action = &menu[rng.random_range(0..menu.len())];
                let step = env.step(action)?;
                if step.done {
                    tools_solved += usize::from(step.reward.is_some_and(|r| r.solved()));
                    break;
                }
            }
        }
    }
    let rate = |n: usize| {
        if episodes == 0 {
            0.0
        } else {
            n as f64 / episodes as f64
        }
    };
    Ok(RandomBaseline {
        episodes,
        random_candidate_solve_rate: rate(candidate_solved),
        random_tool_calls_solve_rate: rate(tools_solved),
    })
}
