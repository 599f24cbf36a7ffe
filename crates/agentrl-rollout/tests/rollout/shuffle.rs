//! The candidate-shuffling env wrapper: an edit of a shown position applies the candidate
//! that was shown there.

use agentrl_gym::{Action, Env, Observation, Step};
use agentrl_gym::{CandidateEdit, Reward, ToolCall};
use agentrl_rollout::ShuffledCandidates;

/// A fake env with three candidates that records the candidate each edit applied.
struct Recorder {
    applied: Vec<usize>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Env for Recorder {
    type Error = Never;
    fn reset(&mut self, task_id: &str) -> Result<Observation, Never> {
        Ok(Observation::Task {
            task_id: task_id.into(),
            prompt: String::new(),
            files: vec![],
            candidates: (0..3)
                .map(|i| CandidateEdit {
                    path: "m.py".into(),
                    old: format!("old{i}\n"),
                    new: format!("new{i}\n"),
                })
                .collect(),
        })
    }
    fn step(&mut self, action: &Action) -> Result<Step, Never> {
        let Action::Call(call) = action else {
            unreachable!("the test sends calls only")
        };
        let k = call.arguments["candidate"].as_u64().unwrap_or(99) as usize;
        self.applied.push(k);
        Ok(Step {
            observation: Observation::Edited {
                path: "m.py".into(),
                candidate: Some(k),
                summary: String::new(),
            },
            done: false,
            reward: None::<Reward>,
        })
    }
}

#[test]
fn edits_map_back_to_the_candidate_that_was_shown() {
    let mut env = ShuffledCandidates::new(Recorder { applied: vec![] }, 7);
    let mut orders = Vec::new();
    for _ in 0..8 {
        let Observation::Task { candidates, .. } = env.reset("t").unwrap() else {
            panic!("task observation expected")
        };
        let order: Vec<String> = candidates.iter().map(|c| c.new.clone()).collect();
        for (shown, candidate) in candidates.iter().enumerate() {
            let edit = Action::Call(ToolCall {
                name: "edit".into(),
                arguments: serde_json::json!({ "candidate": shown }),
            });
            let step = env.step(&edit).unwrap();
            let real = *env.inner().applied.last().unwrap();
            assert_eq!(candidate.new, format!("new{real}\n"));
            assert!(matches!(
                step.observation,
                Observation::Edited { candidate: Some(k), .. } if k == shown
            ));
        }
        orders.push(order);
    }
    orders.sort();
    orders.dedup();
    assert!(orders.len() > 1, "the order never changed: {orders:?}");
}
