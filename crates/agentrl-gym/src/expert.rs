//! A scripted expert: for a task with a reference (its fix candidate, or the reference module
//! it ships), the tool calls that solve it, for supervised fine-tuning (ALGORITHMS.md §14).
//!
//! Where it sits: at the very start of the data flow, beside the env. [`plan`] turns a
//! [`Task`] into a list of [`ToolCall`]s — the gold trajectory `read, test, edit, test,
//! submit` or an imperfect [`Variant`] — that any policy format can express; the rollout
//! crate's `demonstrate` module runs those calls through a codec and a real env, so an expert
//! episode is rendered and scored exactly as a sampled one (task → **calls** → episode →
//! batch → supervised loss).
//!
//! Edits come in two [`EditForm`]s: `edit {candidate: k}` with the task's fix candidate (what
//! TinyAgent can say), or a free-form `edit {path, old, new}` taken from the diff between the
//! module and its reference fix (what a language model writes). The imperfect variants keep
//! SFT data from being all of one shape: [`Variant::Recovery`] applies a decoy first, runs the
//! failing tests, then recovers with the fix; [`Variant::Brief`] skips the tests.
//!
//! Candidate indices here are the task's own (stored) order; [`in_view`] maps them to the
//! order an episode shows (shuffled training views list the same candidates in another order).

use crate::task::{CandidateRole, Task};
use crate::types::{CandidateEdit, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The shape of an expert trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// `read, test, edit (fix), test, submit`.
    Gold,
    /// `read, edit (a decoy), test (fails), edit (fix), test, submit`: a wrong edit and its
    /// recovery. `decoy` picks among the task's decoys (modulo their number).
    Recovery { decoy: usize },
    /// `read, edit (fix), submit`: no tests.
    Brief,
}

impl Variant {
    /// One of each shape, the recovery's decoy chosen by `index` (so a data set of many
    /// episodes varies its decoys).
    pub fn cycle(index: usize) -> Variant {
        match index % 3 {
            0 => Variant::Gold,
            1 => Variant::Recovery { decoy: index / 3 },
            _ => Variant::Brief,
        }
    }

    /// A short name for logs and metrics: `gold`, `recovery`, `brief`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Gold => "gold",
            Variant::Recovery { .. } => "recovery",
            Variant::Brief => "brief",
        }
    }
}

/// How the expert's edits are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditForm {
    /// `edit {candidate: k}`: the fix (or decoy) candidate of the task.
    Candidate,
    /// `edit {path, old, new}`: the diff from the current module to its reference fix.
    FreeForm,
}

/// Why the expert cannot script a task.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expert, task {task}: {message}")]
pub struct ExpertError {
    pub task: String,
    pub message: String,
}

fn fault(task: &Task, message: impl Into<String>) -> ExpertError {
    ExpertError {
        task: task.id.clone(),
        message: message.into(),
    }
}

/// One planned call and how readily it is dropped to fit a turn budget (`None`: never).
struct Planned {
    call: ToolCall,
    drop_rank: Option<u8>,
}

fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        name: name.to_string(),
        arguments,
    }
}

/// The calls of `variant` on `task`, with edits in `form`, in at most `max_turns` calls:
/// optional calls are dropped to fit (the first test, then the read, then the last test), and
/// a task whose shortest trajectory does not fit is an error.
pub fn plan(
    task: &Task,
    variant: Variant,
    form: EditForm,
    max_turns: usize,
) -> Result<Vec<ToolCall>, ExpertError> {
    let fix_module = fix_module(task)?;
    let read = call("read", json!({ "path": fix_module }));
    let test = || call("test", json!({}));
    let submit = call("submit", json!({}));
    let original = module_text(task, &fix_module)?;
    let planned = match variant {
        Variant::Gold => vec![
            Planned {
                call: read,
                drop_rank: Some(2),
            },
            Planned {
                call: test(),
                drop_rank: Some(1),
            },
            Planned {
                call: fix_edit(task, form, &fix_module, original)?,
                drop_rank: None,
            },
            Planned {
                call: test(),
                drop_rank: Some(3),
            },
            Planned {
                call: submit,
                drop_rank: None,
            },
        ],
        Variant::Recovery { decoy } => {
            let (decoy_call, after_decoy) = decoy_edit(task, form, decoy)?;
            vec![
                Planned {
                    call: read,
                    drop_rank: Some(1),
                },
                Planned {
                    call: decoy_call,
                    drop_rank: None,
                },
                Planned {
                    call: test(),
                    drop_rank: Some(3),
                },
                Planned {
                    call: fix_edit(task, form, &fix_module, &after_decoy)?,
                    drop_rank: None,
                },
                Planned {
                    call: test(),
                    drop_rank: Some(2),
                },
                Planned {
                    call: submit,
                    drop_rank: None,
                },
            ]
        }
        Variant::Brief => vec![
            Planned {
                call: read,
                drop_rank: Some(1),
            },
            Planned {
                call: fix_edit(task, form, &fix_module, original)?,
                drop_rank: None,
            },
            Planned {
                call: submit,
                drop_rank: None,
            },
        ],
    };
    fit(task, planned, max_turns)
}

/// Drops the most droppable calls until at most `max_turns` remain.
fn fit(
    task: &Task,
    mut planned: Vec<Planned>,
    max_turns: usize,
) -> Result<Vec<ToolCall>, ExpertError> {
    while planned.len() > max_turns {
        let Some(i) = planned
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.drop_rank.map(|r| (r, i)))
            .min()
            .map(|(_, i)| i)
        else {
            return Err(fault(
                task,
                format!(
                    "the shortest trajectory takes {} calls, over the turn limit of {max_turns}",
                    planned.len()
                ),
            ));
        };
        planned.remove(i);
    }
    Ok(planned.into_iter().map(|p| p.call).collect())
}

/// The module the reference changes (the fix candidate's, else the first that differs).
fn fix_module(task: &Task) -> Result<String, ExpertError> {
    if let Some(k) = task.fix_candidate() {
        return Ok(task.candidates[k].path.clone());
    }
    task.modules
        .iter()
        .find(|m| task.reference.get(*m) != task.visible.get(*m))
        .cloned()
        .ok_or_else(|| {
            fault(
                task,
                "no fix candidate, and the reference changes no module",
            )
        })
}

fn module_text<'a>(task: &'a Task, module: &str) -> Result<&'a str, ExpertError> {
    task.visible.get(module).map(String::as_str).ok_or_else(|| {
        fault(
            task,
            format!("module {module} is not among the task's files"),
        )
    })
}

/// The edit that fixes `module`, whose text is now `current`.
fn fix_edit(
    task: &Task,
    form: EditForm,
    module: &str,
    current: &str,
) -> Result<ToolCall, ExpertError> {
    match form {
        EditForm::Candidate => {
            let k = task
                .fix_candidate()
                .ok_or_else(|| fault(task, "no fix candidate for a candidate edit"))?;
            Ok(call("edit", json!({ "candidate": k })))
        }
        EditForm::FreeForm => {
            let target = task
                .reference
                .get(module)
                .ok_or_else(|| fault(task, format!("no reference for {module}")))?;
            edit_between(module, current, target)
                .ok_or_else(|| fault(task, format!("{module} already matches its reference")))
        }
    }
}

/// A decoy edit (the `pick`-th decoy, modulo their number) and the text of its module after it.
fn decoy_edit(task: &Task, form: EditForm, pick: usize) -> Result<(ToolCall, String), ExpertError> {
    let decoys: Vec<usize> = task
        .candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.role == CandidateRole::Decoy)
        .map(|(k, _)| k)
        .collect();
    if decoys.is_empty() {
        return Err(fault(task, "no decoy candidate for a recovery trajectory"));
    }
    let k = decoys[pick % decoys.len()];
    let decoy = &task.candidates[k];
    let after = module_text(task, &decoy.path)?.replacen(&decoy.old, &decoy.new, 1);
    let edit = match form {
        EditForm::Candidate => call("edit", json!({ "candidate": k })),
        EditForm::FreeForm => call(
            "edit",
            json!({ "path": decoy.path, "old": decoy.old, "new": decoy.new }),
        ),
    };
    Ok((edit, after))
}

/// The free-form edit `{path, old, new}` that turns `current` into `target`: the lines between
/// their common prefix and suffix, widened by a line of context at a time until `old` is
/// non-empty and occurs once, there (the gym refuses an ambiguous `old`). `None` when they are
/// equal.
///
/// Hand-rolled rather than with a diff crate: one replacement between the common prefix and
/// suffix is always a valid edit (every built-in reference differs from its module in one
/// hunk), and the gym's edit tool takes exactly one replacement per call.
pub fn edit_between(path: &str, current: &str, target: &str) -> Option<ToolCall> {
    if current == target {
        return None;
    }
    let a: Vec<&str> = current.split_inclusive('\n').collect();
    let b: Vec<&str> = target.split_inclusive('\n').collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let (mut start, mut end_a, mut end_b) = (prefix, a.len() - suffix, b.len() - suffix);
    loop {
        let old: String = a[start..end_a].concat();
        let offset: usize = a[..start].iter().map(|line| line.len()).sum();
        // The gym replaces the first match and refuses a repeated one: the first match must
        // be this one, and the only one the gym counts.
        if !old.is_empty()
            && current.find(old.as_str()) == Some(offset)
            && current.matches(old.as_str()).count() == 1
        {
            let new: String = b[start..end_b].concat();
            return Some(call(
                "edit",
                json!({ "path": path, "old": old, "new": new }),
            ));
        }
        if start == 0 && end_a == a.len() {
            // The whole file is the context: rewrite it.
            return Some(call("edit", json!({ "path": path, "text": target })));
        }
        start = start.saturating_sub(1);
        if end_a < a.len() {
            end_a += 1;
            end_b += 1;
        }
    }
}

/// `calls` with every `edit {candidate: k}` renumbered from the task's order to the order of
/// `shown` (the candidates an episode's first observation lists), matched by content.
pub fn in_view(
    task: &Task,
    calls: &[ToolCall],
    shown: &[CandidateEdit],
) -> Result<Vec<ToolCall>, ExpertError> {
    calls
        .iter()
        .map(|c| {
            let Some(k) = c.arguments.get("candidate").and_then(|v| v.as_u64()) else {
                return Ok(c.clone());
            };
            let stored = task
                .candidates
                .get(k as usize)
                .ok_or_else(|| fault(task, format!("candidate {k} does not exist")))?;
            let position = shown
                .iter()
                .position(|s| s.path == stored.path && s.old == stored.old && s.new == stored.new)
                .ok_or_else(|| {
                    fault(task, format!("candidate {k} is not in the episode's view"))
                })?;
            Ok(call("edit", json!({ "candidate": position })))
        })
        .collect()
}
