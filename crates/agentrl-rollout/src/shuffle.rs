//! Candidate-order augmentation for training rollouts: an [`Env`] wrapper that shows a task's
//! candidate edits in a fresh random order each episode and maps the policy's `edit {candidate:
//! k}` back to the real index.
//!
//! Why: the gym shuffles candidates once per task, so on the train split the fix sits at a
//! fixed position per task and a small policy can score by remembering positions (the greedy
//! policy collapsed onto `edit C2`, the most common fix slot, and never used the candidates'
//! content). Reordering every episode makes position carry no reward, so the only signal left
//! is the content of the candidates, which is what transfers to unseen tasks. Evaluation runs
//! on the unwrapped env, in the gym's own order.
//!
//! Sits between the trainer's rollout sampler (`agentrl_train::sampler`) and `BugFixEnv`; the
//! episode records the tokens of the shuffled view, which is what the policy saw.

use agentrl_gym::{Action, Env, Observation, Step};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Wraps an env; each `reset` draws a new permutation from its own seeded stream (or, made
/// with [`ShuffledCandidates::unshuffled`], keeps the gym's order).
pub struct ShuffledCandidates<E> {
    inner: E,
    /// `None`: the identity order (evaluation).
    rng: Option<ChaCha8Rng>,
    /// `shown[j]` = real index of the candidate shown at position `j` this episode.
    shown: Vec<usize>,
}

impl<E: Env> ShuffledCandidates<E> {
    pub fn new(inner: E, seed: u64) -> Self {
        Self {
            inner,
            rng: Some(ChaCha8Rng::seed_from_u64(seed)),
            shown: Vec::new(),
        }
    }

    /// The env as it is: candidates in the gym's order, so one env type serves training and
    /// evaluation.
    pub fn unshuffled(inner: E) -> Self {
        Self {
            inner,
            rng: None,
            shown: Vec::new(),
        }
    }

    /// The wrapped env.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The real candidate index behind shown position `k` (out-of-range stays as is, so the
    /// gym reports its own bad-candidate error).
    fn real_index(&self, k: usize) -> usize {
        self.shown.get(k).copied().unwrap_or(k)
    }

    /// The shown position of real candidate `k`.
    fn shown_index(&self, k: usize) -> usize {
        self.shown.iter().position(|&r| r == k).unwrap_or(k)
    }

    fn translate_action(&self, action: &Action) -> Action {
        let Action::Call(call) = action else {
            return action.clone();
        };
        let mut call = call.clone();
        if call.name == "edit" {
            if let Some(k) = call.arguments.get("candidate").and_then(|v| v.as_u64()) {
                let real = self.real_index(k as usize) as u64;
                call.arguments["candidate"] = serde_json::json!(real);
            }
        }
        Action::Call(call)
    }
}

impl<E: Env> Env for ShuffledCandidates<E> {
    type Error = E::Error;

    fn reset(&mut self, task_id: &str) -> Result<Observation, Self::Error> {
        let observation = self.inner.reset(task_id)?;
        Ok(match observation {
            Observation::Task {
                task_id,
                prompt,
                files,
                candidates,
            } => {
                self.shown = (0..candidates.len()).collect();
                if let Some(rng) = &mut self.rng {
                    self.shown.shuffle(rng);
                }
                let candidates = self.shown.iter().map(|&r| candidates[r].clone()).collect();
                Observation::Task {
                    task_id,
                    prompt,
                    files,
                    candidates,
                }
            }
            other => {
                self.shown.clear();
                other
            }
        })
    }

    fn step(&mut self, action: &Action) -> Result<Step, Self::Error> {
        let mut step = self.inner.step(&self.translate_action(action))?;
        if let Observation::Edited {
            candidate: Some(k), ..
        } = &mut step.observation
        {
            *k = self.shown_index(*k);
        }
        Ok(step)
    }
}
