//! The trusted checker: the one place a hidden case's check is computed.
//!
//! Where it sits: between the sandbox's reports and [`crate::check`]'s comparison. A hidden
//! case's `expr` may be a check written as a Python boolean expression (`abs(f(x) - 2.5) <
//! 1e-6`, the natural way to test a float), and its optional `check` is one over the result.
//! Evaluated next to the code under test, either can be forged (an overridden comparison, a
//! rebound builtin, a frame that rewrites the caller's locals). So the checker, a long-lived
//! Python process that never sees candidate code (checker.py), first *splits* the expression
//! into the calls under test (its `parts`, run in the sandbox, whose values come back as
//! plain data by exact type) and a *skeleton* that combines them; then it *evaluates* the
//! skeleton and the `check` over those values itself. A case whose expression is a single
//! call under test (the usual `f(x)` with an `expect`) never reaches the checker.
//!
//! The process is confined like a fork server (same spawn path: empty network namespace,
//! socket filter, read-only Landlock, its own uid where we are root, a memory limit) because it
//! evaluates task authors' expressions over values a candidate chose. A check that runs past
//! its case's time limit kills the process (a fresh one starts on the next request) and is
//! reported as a time limit, which the verifier re-runs and never caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::sandbox::host::{self, HostSetup};
use crate::sandbox::pool::{Entry, Worker};
use crate::sandbox::SandboxError;

/// The checker's own memory limit.
const CHECKER_MEMORY_BYTES: u64 = 1 << 30;

/// How long a split may take (it only parses the expression).
const SPLIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A hidden case's expression cut into calls under test and the trusted skeleton.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Split {
    /// Python expressions that run in the sandbox; `_part(i)` in the skeleton stands for the
    /// value (or exception) of `parts[i]`.
    pub parts: Vec<String>,
    /// `None`: the expression is `parts[0]` alone, and its value is the case's value.
    pub skeleton: Option<String>,
    /// A part that still computes a verdict inside the sandbox (a comparison the checker could
    /// not lift out, e.g. one over a comprehension's variable), for `validate`'s warning.
    pub sandbox_check: Option<String>,
}

impl Split {
    /// The whole expression as its one call under test: nothing left to compute here.
    pub fn is_trivial(&self) -> bool {
        self.skeleton.is_none()
    }
}

/// What the trusted evaluation of a case gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluated {
    /// The outcome record (`{"value": …}` or `{"raises": …, "lookalike": …}`), in the
    /// sandbox's encoding.
    Outcome(serde_json::Value),
    /// The check ran past its time limit.
    TimedOut,
}

/// The process-wide checker, started on first use.
pub struct TrustedChecker {
    host: Arc<HostSetup>,
    process: Mutex<Option<Worker>>,
    splits: Mutex<HashMap<(String, String), Arc<Split>>>,
}

static CHECKER: OnceLock<TrustedChecker> = OnceLock::new();

/// The shared checker (spawned lazily; respawned after a time-out or a crash).
pub fn checker() -> Result<&'static TrustedChecker, SandboxError> {
    if let Some(checker) = CHECKER.get() {
        return Ok(checker);
    }
    let host = host::host()?;
    Ok(CHECKER.get_or_init(|| TrustedChecker {
        host,
        process: Mutex::new(None),
        splits: Mutex::new(HashMap::new()),
    }))
}

enum Failure {
    TimedOut,
    Other(SandboxError),
}

impl TrustedChecker {
    /// One request, on a live process (spawned if needed); the process is dropped (killed)
    /// after any failure. A process that died between requests is replaced once.
    fn request(
        &self,
        header: &serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, Failure> {
        let mut slot = self.process.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if !slot.as_mut().is_some_and(Worker::is_alive) {
                *slot = None;
                let entry = Entry::TrustedChecker {
                    address_space_bytes: CHECKER_MEMORY_BYTES,
                };
                *slot = Some(Worker::spawn_entry(&self.host, &entry).map_err(Failure::Other)?);
            }
            let Some(process) = slot.as_mut() else {
                continue;
            };
            let deadline = Instant::now() + timeout;
            match process.request(header, deadline) {
                Ok(reply) => {
                    if let Some(error) = reply.get("error").and_then(|e| e.as_str()) {
                        return Err(Failure::Other(SandboxError::Protocol(format!(
                            "trusted checker: {error}"
                        ))));
                    }
                    return Ok(reply);
                }
                Err(error) => {
                    let died = !process.is_alive();
                    *slot = None;
                    if Instant::now() >= deadline {
                        return Err(Failure::TimedOut);
                    }
                    if !died || attempt == 1 {
                        return Err(Failure::Other(error));
                    }
                }
            }
        }
        Err(Failure::Other(SandboxError::Protocol(
            "trusted checker unavailable".into(),
        )))
    }

    /// The split of a case's expression (cached: a task's cases are split once per process).
    pub fn split(&self, expr: &str, setup: &str) -> Result<Arc<Split>, SandboxError> {
        let key = (expr.to_string(), setup.to_string());
        if let Some(split) = self.splits.lock().ok().and_then(|s| s.get(&key).cloned()) {
            return Ok(split);
        }
        let request = serde_json::json!({"op": "split", "expr": expr, "setup": setup});
        let reply = self.request(&request, SPLIT_TIMEOUT).map_err(|f| match f {
            Failure::TimedOut => SandboxError::Protocol(format!(
                "trusted checker: splitting `{expr}` took over {} s",
                SPLIT_TIMEOUT.as_secs()
            )),
            Failure::Other(e) => e,
        })?;
        let split: Split = serde_json::from_value(reply)
            .map_err(|e| SandboxError::Protocol(format!("trusted checker: bad split: {e}")))?;
        let split = Arc::new(split);
        if let Ok(mut splits) = self.splits.lock() {
            splits.insert(key, split.clone());
        }
        Ok(split)
    }

    /// The skeleton over the parts' outcome records, then `check` over its value as `result`.
    pub fn evaluate(
        &self,
        skeleton: Option<&str>,
        check: Option<&str>,
        parts: &[serde_json::Value],
        timeout: Duration,
    ) -> Result<Evaluated, SandboxError> {
        let request = serde_json::json!({
            "op": "eval", "skeleton": skeleton, "check": check, "parts": parts,
        });
        match self.request(&request, timeout) {
            Ok(reply) => Ok(Evaluated::Outcome(reply)),
            Err(Failure::TimedOut) => Ok(Evaluated::TimedOut),
            Err(Failure::Other(e)) => Err(e),
        }
    }
}
