//! Wall time spent in the environment: an [`Env`] wrapper that records when each `reset` and
//! `step` ran, and a clock that reports the time during which any environment was busy.
//!
//! Where it sits: around the gym's envs in the trainer's rollouts, so a step's metrics can
//! split its rollout time into the engine's and the environment's (`timing_s/env`). Envs of
//! one rollout run on several threads at once, so a sum of their durations would count
//! overlapping seconds twice; the clock measures the union of the busy intervals instead,
//! which is the wall time a faster environment could save.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use agentrl_gym::{Action, Env, Observation, Step};

/// Busy intervals of the envs that share it, since the last [`EnvClock::take_busy_seconds`].
#[derive(Debug, Default)]
pub struct EnvClock {
    intervals: Mutex<Vec<(Instant, Instant)>>,
}

impl EnvClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records that one env was busy from `start` to `end`.
    pub fn record(&self, start: Instant, end: Instant) {
        self.intervals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((start, end));
    }

    /// Seconds during which at least one env was busy, and forgets the intervals.
    pub fn take_busy_seconds(&self) -> f64 {
        let mut intervals = std::mem::take(
            &mut *self
                .intervals
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        intervals.sort();
        let mut busy = 0.0;
        let mut current: Option<(Instant, Instant)> = None;
        for (start, end) in intervals {
            current = match current {
                Some((s, e)) if start <= e => Some((s, e.max(end))),
                Some((s, e)) => {
                    busy += (e - s).as_secs_f64();
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        }
        if let Some((s, e)) = current {
            busy += (e - s).as_secs_f64();
        }
        busy
    }
}

/// An env whose calls are timed on a shared [`EnvClock`].
pub struct Timed<E> {
    inner: E,
    clock: Arc<EnvClock>,
}

impl<E> Timed<E> {
    pub fn new(inner: E, clock: Arc<EnvClock>) -> Self {
        Self { inner, clock }
    }
}

impl<E: Env> Env for Timed<E> {
    type Error = E::Error;

    fn reset(&mut self, task_id: &str) -> Result<Observation, Self::Error> {
        let start = Instant::now();
        let out = self.inner.reset(task_id);
        self.clock.record(start, Instant::now());
        out
    }

    fn step(&mut self, action: &Action) -> Result<Step, Self::Error> {
        let start = Instant::now();
        let out = self.inner.step(action);
        self.clock.record(start, Instant::now());
        out
    }
}
