//! The endpoints of a remote engine: which server a request goes to, how many may be in flight
//! on each, and what happens when one fails.
//!
//! Where it sits: [`super::RemoteEngine`] hands the pool one closure per batch ("send request
//! `i` to this endpoint"); the pool runs the requests on scoped threads, at most
//! `max_in_flight` per endpoint, picks each endpoint by the configured [`Balance`], and retries
//! a retryable failure (connection error, timeout, HTTP 5xx or 429, an aborted generation) with
//! exponential backoff, preferring an endpoint the request has not tried yet. An endpoint that
//! refused a connection is avoided for a cool-down while others are up. A request that still
//! fails makes the whole call an error that names the request and every endpoint it tried: a
//! result is never dropped, and results come back in request order whichever endpoint served
//! them (each request carries its own seed, so the samples do not depend on the routing).
//!
//! Threads rather than an async runtime: a batch is at most a few thousand blocking HTTP
//! calls, the workspace has no async code anywhere else, and `std::thread::scope` keeps the
//! borrowing simple.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How a request picks its endpoint among those with a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// The endpoint with the fewest requests in flight (ties: the next in round-robin order).
    #[default]
    LeastInFlight,
    /// Each endpoint in turn.
    RoundRobin,
}

/// Why one attempt failed, and whether another attempt may succeed.
#[derive(Debug)]
pub struct Failure {
    pub error: anyhow::Error,
    pub retryable: bool,
    /// The endpoint could not be reached at all (its slot is better given to another one for a
    /// while).
    pub unreachable: bool,
}

impl Failure {
    pub fn fatal(error: anyhow::Error) -> Self {
        Self {
            error,
            retryable: false,
            unreachable: false,
        }
    }

    pub fn retry(error: anyhow::Error) -> Self {
        Self {
            error,
            retryable: true,
            unreachable: false,
        }
    }

    pub fn unreachable(error: anyhow::Error) -> Self {
        Self {
            error,
            retryable: true,
            unreachable: true,
        }
    }
}

/// Retry policy of one request.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: usize,
    /// Wait before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
}

#[derive(Debug)]
struct State {
    in_flight: Vec<usize>,
    /// An endpoint that refused a connection is skipped until then while another one is up.
    down_until: Vec<Option<Instant>>,
    /// Round-robin cursor.
    next: usize,
}

/// The endpoints and their load.
#[derive(Debug)]
pub struct Pool {
    urls: Vec<String>,
    max_in_flight: usize,
    balance: Balance,
    retry: RetryPolicy,
    state: Mutex<State>,
    freed: Condvar,
}

impl Pool {
    pub fn new(
        urls: Vec<String>,
        max_in_flight: usize,
        balance: Balance,
        retry: RetryPolicy,
    ) -> Self {
        let n = urls.len();
        Self {
            urls,
            max_in_flight: max_in_flight.max(1),
            balance,
            retry,
            state: Mutex::new(State {
                in_flight: vec![0; n],
                down_until: vec![None; n],
                next: 0,
            }),
            freed: Condvar::new(),
        }
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Runs `job(endpoint_url, i)` for every `i < count` and returns the results in order, or
    /// the first request that failed for good (with every attempt's endpoint and error).
    pub fn run<T, F>(&self, count: usize, what: &str, job: F) -> anyhow::Result<Vec<T>>
    where
        T: Send,
        F: Fn(&str, usize) -> Result<T, Failure> + Sync,
    {
        if count == 0 {
            return Ok(Vec::new());
        }
        let workers = count.min(self.urls.len() * self.max_in_flight);
        let next_job = AtomicUsize::new(0);
        let cancelled = AtomicBool::new(false);
        let results: Mutex<Vec<Option<T>>> = Mutex::new((0..count).map(|_| None).collect());
        let first_error: Mutex<Option<(usize, anyhow::Error)>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    if cancelled.load(Ordering::SeqCst) {
                        return;
                    }
                    let i = next_job.fetch_add(1, Ordering::SeqCst);
                    if i >= count {
                        return;
                    }
                    match self.run_one(i, count, what, &job, &cancelled) {
                        Ok(value) => {
                            if let Ok(mut slots) = results.lock() {
                                slots[i] = Some(value);
                            }
                        }
                        Err(err) => {
                            cancelled.store(true, Ordering::SeqCst);
                            if let Ok(mut first) = first_error.lock() {
                                // Report a real failure over a request cancelled because of
                                // it, and among those the lowest index: the report does not
                                // depend on which thread failed first.
                                let rank = |i: usize, e: &anyhow::Error| (e.is::<Cancelled>(), i);
                                if first
                                    .as_ref()
                                    .is_none_or(|(j, e)| rank(i, &err) < rank(*j, e))
                                {
                                    *first = Some((i, err));
                                }
                            }
                            return;
                        }
                    }
                });
            }
        });
        let first_error = first_error
            .into_inner()
            .map_err(|_| anyhow::anyhow!("remote engine: a request thread panicked"))?;
        if let Some((_, err)) = first_error {
            return Err(err);
        }
        let results = results
            .into_inner()
            .map_err(|_| anyhow::anyhow!("remote engine: a request thread panicked"))?;
        results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.ok_or_else(|| anyhow::anyhow!("remote engine: {what} {i} got no result"))
            })
            .collect()
    }

    fn run_one<T, F>(
        &self,
        i: usize,
        count: usize,
        what: &str,
        job: &F,
        cancelled: &AtomicBool,
    ) -> anyhow::Result<T>
    where
        F: Fn(&str, usize) -> Result<T, Failure>,
    {
        let mut tried: Vec<usize> = Vec::new();
        let mut attempts: Vec<String> = Vec::new();
        for attempt in 0..=self.retry.retries {
            if attempt > 0 {
                let factor = 1u32 << (attempt - 1).min(16);
                std::thread::sleep((self.retry.backoff * factor).min(self.retry.max_backoff));
                if cancelled.load(Ordering::SeqCst) {
                    return Err(anyhow::Error::new(Cancelled(format!(
                        "remote engine: {what} {i} of {count} cancelled"
                    ))));
                }
            }
            let endpoint = self.acquire(&tried)?;
            let url = &self.urls[endpoint];
            let outcome = job(url, i);
            self.release(endpoint, outcome.as_ref().err());
            match outcome {
                Ok(value) => return Ok(value),
                Err(failure) => {
                    attempts.push(format!("{url}: {:#}", failure.error));
                    if !tried.contains(&endpoint) {
                        tried.push(endpoint);
                    }
                    if !failure.retryable {
                        break;
                    }
                }
            }
        }
        anyhow::bail!(
            "remote engine: {what} {i} of {count} failed after {} attempt{}: {}",
            attempts.len(),
            if attempts.len() == 1 { "" } else { "s" },
            attempts.join("; then ")
        )
    }

    /// Waits for a free slot and takes it: among endpoints this request has not tried (all of
    /// them once it tried every one), those not cooling down (all once every one is), by the
    /// balance rule.
    fn acquire(&self, tried: &[usize]) -> anyhow::Result<usize> {
        let poisoned = || anyhow::anyhow!("remote engine: the endpoint state lock was poisoned");
        let mut state = self.state.lock().map_err(|_| poisoned())?;
        loop {
            let n = self.urls.len();
            let now = Instant::now();
            let untried: Vec<usize> = (0..n).filter(|e| !tried.contains(e)).collect();
            let pool = if untried.is_empty() {
                (0..n).collect()
            } else {
                untried
            };
            let up: Vec<usize> = pool
                .iter()
                .copied()
                .filter(|&e| state.down_until[e].is_none_or(|t| t <= now))
                .collect();
            let candidates = if up.is_empty() { pool } else { up };
            let free: Vec<usize> = candidates
                .into_iter()
                .filter(|&e| state.in_flight[e] < self.max_in_flight)
                .collect();
            if !free.is_empty() {
                // Round-robin order starting at the cursor, so ties rotate.
                let start = state.next % n;
                let order = |e: usize| (e + n - start) % n;
                let chosen = match self.balance {
                    Balance::RoundRobin => free.iter().copied().min_by_key(|&e| order(e)),
                    Balance::LeastInFlight => free
                        .iter()
                        .copied()
                        .min_by_key(|&e| (state.in_flight[e], order(e))),
                }
                .ok_or_else(|| anyhow::anyhow!("remote engine: no endpoint to choose"))?;
                state.in_flight[chosen] += 1;
                state.next = chosen + 1;
                return Ok(chosen);
            }
            state = self.freed.wait(state).map_err(|_| poisoned())?;
        }
    }

    fn release(&self, endpoint: usize, failure: Option<&Failure>) {
        if let Ok(mut state) = self.state.lock() {
            state.in_flight[endpoint] = state.in_flight[endpoint].saturating_sub(1);
            match failure {
                Some(f) if f.unreachable => {
                    state.down_until[endpoint] = Some(Instant::now() + self.retry.max_backoff);
                }
                None => state.down_until[endpoint] = None,
                _ => {}
            }
        }
        self.freed.notify_all();
    }
}

/// A request given up because another request of the same call failed for good.
#[derive(Debug)]
struct Cancelled(String);

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Cancelled {}
