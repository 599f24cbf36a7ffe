//! The trainer's side of the gym service: a [`GymFleet`] of `agentrl gym serve` endpoints and
//! the [`RemoteEnv`] that runs one episode on them as if the gym were in process.
//!
//! Where it sits: the trainer builds one fleet from `[gym]` ([`FleetConfig`]) and hands out a
//! [`RemoteEnv`] per episode where it would make a `BugFixEnv` ([`super::GymEnv`]); the
//! rollout driver cannot tell them apart.
//!
//! **Placement.** A new episode goes to the reachable endpoint with the fewest live episodes
//! of this fleet (ties: the first listed). A server that answers 429 (full) is passed over for
//! the next; when every one is full the start waits with backoff, up to `timeout_s`.
//!
//! **Failures.** A request that cannot reach its server, times out, or gets a 5xx (or a 404
//! for an episode the server no longer knows, after a restart) counts as a failure
//! (`env/remote_failures`); the endpoint is avoided for a cool-down and probed with
//! `GET /health` before it is used again. The episode is then *restarted*: started again on
//! the best other endpoint from its task and seed, and every action it had taken replayed
//! (the tasks are deterministic: each replayed answer must equal the recorded one, else the
//! error says the servers disagree; only a public test run a time limit stopped may differ,
//! as it depends on load) before the pending action is sent (`env/remote_retries`).
//! After `retries` restarts the step fails with an error naming every endpoint tried: an
//! episode is never dropped or scored 0 behind the trainer's back.
//!
//! **At connect**, every endpoint must answer `/health` with this protocol version and list
//! every task the trainer knows with the same fingerprint ([`crate::Task::fingerprint`]): a
//! server with other task files would score other tasks.
//!
//! Concurrency: at most `max_in_flight` requests per endpoint (the rest wait for a slot).
//! HTTP through `ureq` (blocking, as the remote engine's client; plain HTTP on a cluster
//! network).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::access::API_KEY_ENV;
use super::wire::{
    error_message, Health, StartRequest, StartResponse, StepRequest, StepResponse, TaskList,
    PROTOCOL_VERSION,
};
use crate::env::EnvConfig;
use crate::task::TaskSet;
use crate::types::{Action, Env, Observation, Step};

/// `[gym]` of a run config: where episodes run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Gym servers (`http://host:port` of `agentrl gym serve`); empty = the gym runs in the
    /// trainer's process.
    pub endpoints: Vec<String>,
    /// Requests in flight per endpoint at most.
    pub max_in_flight: usize,
    /// Seconds before a request counts as lost (a verdict on a loaded server takes a while).
    pub timeout_s: f64,
    /// Restarts of one episode on another server before its step fails.
    pub retries: usize,
    /// Wait before a restart, doubled for each further one (at most 8 s).
    pub backoff_s: f64,
    /// Name of the environment variable holding the servers' API key; unset = `AGENTRL_API_KEY`
    /// when that is set. The key itself never sits in a config file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            max_in_flight: 16,
            timeout_s: 300.0,
            retries: 3,
            backoff_s: 0.25,
            api_key_env: None,
        }
    }
}

impl FleetConfig {
    /// Whether episodes run on servers.
    pub fn is_remote(&self) -> bool {
        !self.endpoints.is_empty()
    }

    /// Checks the fields; errors name them as `gym.<field>`.
    pub fn validate(&self) -> anyhow::Result<()> {
        for url in &self.endpoints {
            anyhow::ensure!(
                url.starts_with("http://") || url.starts_with("https://"),
                "gym.endpoints: {url:?} is not an http:// URL"
            );
        }
        anyhow::ensure!(
            self.max_in_flight > 0,
            "gym.max_in_flight must be at least 1"
        );
        anyhow::ensure!(
            self.timeout_s > 0.0 && self.timeout_s.is_finite(),
            "gym.timeout_s must be > 0, got {}",
            self.timeout_s
        );
        anyhow::ensure!(
            self.backoff_s >= 0.0 && self.backoff_s.is_finite(),
            "gym.backoff_s must be >= 0, got {}",
            self.backoff_s
        );
        Ok(())
    }

    /// The key sent as a bearer token, if any.
    fn api_key(&self) -> anyhow::Result<Option<String>> {
        match &self.api_key_env {
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.is_empty() => Ok(Some(key)),
                _ => anyhow::bail!("gym.api_key_env names {var:?}, which is not set"),
            },
            None => Ok(std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty())),
        }
    }
}

/// Failures and restarts since the last [`GymFleet::take_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// Requests that failed (unreachable server, time-out, 5xx, an episode the server lost).
    pub failures: u64,
    /// Episodes restarted from their task and seed after a failure.
    pub retries: u64,
}

/// Why a request failed, and what the client may do about it.
#[derive(Debug)]
enum Failure {
    /// Connection refused or reset, time-out, 5xx, or the episode is gone: try elsewhere.
    Lost(String),
    /// 429: the server is full; not a failure of the server.
    Full(String),
    /// The request itself is wrong (4xx): no server will take it.
    Refused(String),
}

/// One endpoint and what the fleet knows of it.
#[derive(Debug)]
struct Endpoint {
    url: String,
    in_flight: Mutex<usize>,
    slot_free: Condvar,
    /// Live episodes of this fleet placed here.
    live: AtomicUsize,
    /// Avoided until then, after a failure.
    down_until: Mutex<Option<Instant>>,
}

impl Endpoint {
    fn is_down(&self) -> bool {
        self.down_until
            .lock()
            .map(|d| d.is_some_and(|t| Instant::now() < t))
            .unwrap_or(false)
    }

    /// Whether it was marked down (and the cool-down may have passed): probe before use.
    fn was_marked(&self) -> bool {
        self.down_until.lock().map(|d| d.is_some()).unwrap_or(false)
    }

    fn mark_down(&self, for_: Duration) {
        if let Ok(mut d) = self.down_until.lock() {
            *d = Some(Instant::now() + for_);
        }
    }

    fn mark_up(&self) {
        if let Ok(mut d) = self.down_until.lock() {
            *d = None;
        }
    }
}

/// Gym servers an episode can run on (see the module doc).
#[derive(Debug)]
pub struct GymFleet {
    endpoints: Vec<Endpoint>,
    agent: ureq::Agent,
    api_key: Option<String>,
    config: FleetConfig,
    failures: AtomicU64,
    retries: AtomicU64,
    seeds: AtomicU64,
}

impl GymFleet {
    /// Connects to every endpoint of `config` and checks it serves `tasks` (see the module
    /// doc). Errors name the endpoint and what is wrong.
    pub fn connect(config: &FleetConfig, tasks: &TaskSet) -> anyhow::Result<Arc<Self>> {
        config.validate()?;
        anyhow::ensure!(
            config.is_remote(),
            "gym.endpoints is empty: the gym runs in process"
        );
        let timeout = Duration::from_secs_f64(config.timeout_s);
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5).min(timeout))
            .timeout(timeout)
            // One connection per request: a pooled connection that the server closed when its
            // read time-out passed would fail the next POST, which ureq does not retry (and
            // the episode would be restarted elsewhere for nothing). A handshake costs
            // microseconds next to a tool call.
            .max_idle_connections(0)
            .build();
        let fleet = Self {
            endpoints: config
                .endpoints
                .iter()
                .map(|url| Endpoint {
                    url: url.trim_end_matches('/').to_string(),
                    in_flight: Mutex::new(0),
                    slot_free: Condvar::new(),
                    live: AtomicUsize::new(0),
                    down_until: Mutex::new(None),
                })
                .collect(),
            agent,
            api_key: config.api_key()?,
            config: config.clone(),
            failures: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            seeds: AtomicU64::new(0),
        };
        let wanted: BTreeMap<&str, String> = tasks
            .tasks()
            .iter()
            .map(|t| (t.id.as_str(), t.fingerprint()))
            .collect();
        for index in 0..fleet.endpoints.len() {
            fleet.check_endpoint(index, &wanted)?;
        }
        Ok(Arc::new(fleet))
    }

    fn check_endpoint(&self, index: usize, wanted: &BTreeMap<&str, String>) -> anyhow::Result<()> {
        let url = &self.endpoints[index].url;
        let health: Health = self
            .get_json(index, "/health")
            .map_err(|e| anyhow::anyhow!("gym server {url}: {}", e.message()))?;
        anyhow::ensure!(
            health.protocol == PROTOCOL_VERSION,
            "gym server {url} speaks protocol {} ({}); this client speaks {PROTOCOL_VERSION}",
            health.protocol,
            health.server
        );
        let listed: TaskList = self
            .get_json(index, "/v1/tasks")
            .map_err(|e| anyhow::anyhow!("gym server {url}: {}", e.message()))?;
        let served: BTreeMap<String, String> = listed
            .tasks
            .into_iter()
            .map(|t| (t.id, t.fingerprint))
            .collect();
        for (id, fingerprint) in wanted {
            match served.get(*id) {
                None => anyhow::bail!(
                    "gym server {url} has no task {id:?}: start it with the trainer's tasks \
                     (`agentrl gym serve --tasks-dir` = the run's rollout.tasks_dir)"
                ),
                Some(theirs) if theirs != fingerprint => anyhow::bail!(
                    "gym server {url} serves another task {id:?} than the trainer's (its files, \
                     hidden cases or limits differ): both must load the same task folders"
                ),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Environment steps worth running at once over the fleet (every endpoint's slots).
    pub fn concurrency(&self) -> usize {
        (self.endpoints.len() * self.config.max_in_flight).clamp(1, 64)
    }

    /// A fresh env that runs episodes on this fleet with `config`'s turn limit and reward (the
    /// sandbox limits are each server's own).
    pub fn env(self: &Arc<Self>, config: &EnvConfig) -> RemoteEnv {
        RemoteEnv {
            fleet: self.clone(),
            max_turns: config.max_turns,
            reward: config.reward.clone(),
            episode: None,
        }
    }

    /// Failures and restarts since the last call (the step's `env/remote_*`).
    pub fn take_counts(&self) -> RemoteCounts {
        RemoteCounts {
            failures: self.failures.swap(0, Ordering::Relaxed),
            retries: self.retries.swap(0, Ordering::Relaxed),
        }
    }

    fn backoff(&self, attempt: usize) -> Duration {
        let base = self.config.backoff_s * 2f64.powi(attempt.min(16) as i32);
        Duration::from_secs_f64(base.min(8.0))
    }

    fn cool_down(&self) -> Duration {
        Duration::from_secs_f64((self.config.backoff_s * 8.0).clamp(0.5, 10.0))
    }

    /// Endpoints in the order a new episode tries them: up before down, fewest live
    /// episodes first, `avoid` (the one that just failed) last.
    fn placement_order(&self, avoid: Option<usize>) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.endpoints.len()).collect();
        order.sort_by_key(|&i| {
            let e = &self.endpoints[i];
            (
                Some(i) == avoid,
                e.is_down(),
                e.live.load(Ordering::Relaxed),
                i,
            )
        });
        order
    }

    fn lost(&self, index: usize, failure: &Failure) {
        if let Failure::Lost(message) = failure {
            tracing::warn!(
                endpoint = %self.endpoints[index].url,
                "gym server request failed: {message}"
            );
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.endpoints[index].mark_down(self.cool_down());
        }
    }

    /// Runs `call` holding one of the endpoint's in-flight slots.
    fn with_slot<T>(&self, index: usize, call: impl FnOnce() -> T) -> T {
        let endpoint = &self.endpoints[index];
        let limit = self.config.max_in_flight;
        {
            let mut n = endpoint.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            while *n >= limit {
                n = endpoint
                    .slot_free
                    .wait(n)
                    .unwrap_or_else(|p| p.into_inner());
            }
            *n += 1;
        }
        let result = call();
        let mut n = endpoint.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        endpoint.slot_free.notify_one();
        result
    }

    fn request(
        &self,
        index: usize,
        method: &str,
        route: &str,
        body: Option<&Value>,
    ) -> Result<String, Failure> {
        let url = format!("{}{route}", self.endpoints[index].url);
        self.with_slot(index, || {
            let mut request = self.agent.request(method, &url).set("Connection", "close");
            if let Some(key) = &self.api_key {
                request = request.set("Authorization", &format!("Bearer {key}"));
            }
            let result = match body {
                Some(body) => request
                    .set("Content-Type", "application/json")
                    .send_string(&body.to_string()),
                None => request.call(),
            };
            match result {
                Ok(response) => {
                    let mut text = String::new();
                    response
                        .into_reader()
                        .take(64 << 20)
                        .read_to_string(&mut text)
                        .map_err(|e| Failure::Lost(format!("{method} {route}: reading: {e}")))?;
                    Ok(text)
                }
                Err(ureq::Error::Status(code, response)) => {
                    let message = format!(
                        "{method} {route}: HTTP {code}: {}",
                        error_message(&response.into_string().unwrap_or_default())
                    );
                    Err(match code {
                        429 => Failure::Full(message),
                        // The server lost the episode (it restarted, or reaped it).
                        404 if route.starts_with("/v1/episodes/") => Failure::Lost(message),
                        408 | 500.. => Failure::Lost(message),
                        _ => Failure::Refused(message),
                    })
                }
                Err(e) => Err(Failure::Lost(format!("{method} {route}: {e}"))),
            }
        })
    }

    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        index: usize,
        route: &str,
    ) -> Result<T, Failure> {
        let text = self.request(index, "GET", route, None)?;
        serde_json::from_str(&text)
            .map_err(|e| Failure::Refused(format!("GET {route}: not the gym protocol: {e}")))
    }

    fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        index: usize,
        route: &str,
        body: &impl Serialize,
    ) -> Result<T, Failure> {
        let body = serde_json::to_value(body)
            .map_err(|e| Failure::Refused(format!("POST {route}: {e}")))?;
        let text = self.request(index, "POST", route, Some(&body))?;
        serde_json::from_str(&text)
            .map_err(|e| Failure::Lost(format!("POST {route}: not the gym protocol: {e}")))
    }

    /// Whether a server marked down answers again.
    fn probe(&self, index: usize) -> bool {
        let endpoint = &self.endpoints[index];
        if !endpoint.was_marked() {
            return true;
        }
        match self.get_json::<Health>(index, "/health") {
            Ok(_) => {
                endpoint.mark_up();
                true
            }
            Err(f) => {
                self.lost(index, &f);
                false
            }
        }
    }
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Lost(m) | Failure::Full(m) | Failure::Refused(m) => m,
        }
    }
}

/// A remote episode's errors: every one names the task and the servers at fault.
#[derive(Debug, thiserror::Error)]
pub enum RemoteGymError {
    #[error("no episode is running: call reset first")]
    NoEpisode,
    #[error("task {task}: gym server {endpoint} refused the request: {message}")]
    Refused {
        task: String,
        endpoint: String,
        message: String,
    },
    #[error("task {task}: no gym server could run the episode ({attempts} attempts): {tried}")]
    Exhausted {
        task: String,
        attempts: usize,
        tried: String,
    },
    #[error(
        "task {task}: gym server {endpoint} replays turn {turn} differently than the episode \
         ran: the servers do not run the same gym"
    )]
    Diverged {
        task: String,
        endpoint: String,
        turn: usize,
    },
}

/// Where a remote episode is and what it has done.
#[derive(Debug)]
struct RemoteEpisode {
    task_id: String,
    seed: u64,
    /// Where it runs now; `None` after a failure, until it is restarted.
    placed: Option<(usize, String)>,
    first: Observation,
    /// Every action applied, with the step it gave.
    history: Vec<(Action, Step)>,
}

/// One episode at a time on a [`GymFleet`]; an [`Env`] like `BugFixEnv`.
#[derive(Debug)]
pub struct RemoteEnv {
    fleet: Arc<GymFleet>,
    max_turns: u32,
    reward: crate::reward::RewardFn,
    episode: Option<RemoteEpisode>,
}

impl RemoteEnv {
    fn start_request(&self, task_id: &str, seed: u64) -> StartRequest {
        StartRequest {
            task_id: task_id.to_string(),
            seed,
            max_turns: Some(self.max_turns),
            reward: Some(self.reward.clone()),
        }
    }

    /// Starts `task_id` on the best endpoint (not `avoid` while another is up): returns the
    /// endpoint, the episode id and the first observation.
    fn start_somewhere(
        &self,
        task_id: &str,
        seed: u64,
        avoid: Option<usize>,
    ) -> Result<(usize, StartResponse), RemoteGymError> {
        let fleet = &self.fleet;
        let request = self.start_request(task_id, seed);
        let deadline = Instant::now() + Duration::from_secs_f64(fleet.config.timeout_s);
        let mut tried = Vec::new();
        let mut lost_rounds = 0;
        for round in 0.. {
            let mut all_full = true;
            for index in fleet.placement_order(avoid) {
                if !fleet.probe(index) {
                    tried.push(format!("{}: down", fleet.endpoints[index].url));
                    all_full = false;
                    continue;
                }
                // Counted before the answer, so episodes started together spread out.
                let live = &fleet.endpoints[index].live;
                live.fetch_add(1, Ordering::Relaxed);
                let answer = fleet.post_json::<StartResponse>(index, "/v1/episodes", &request);
                if answer.is_err() {
                    live.fetch_sub(1, Ordering::Relaxed);
                }
                match answer {
                    Ok(started) => return Ok((index, started)),
                    Err(Failure::Refused(message)) => {
                        return Err(RemoteGymError::Refused {
                            task: task_id.to_string(),
                            endpoint: fleet.endpoints[index].url.clone(),
                            message,
                        })
                    }
                    Err(failure) => {
                        all_full &= matches!(failure, Failure::Full(_));
                        fleet.lost(index, &failure);
                        tried.push(format!(
                            "{}: {}",
                            fleet.endpoints[index].url,
                            failure.message()
                        ));
                    }
                }
            }
            if !all_full {
                lost_rounds += 1;
            }
            if lost_rounds > fleet.config.retries || Instant::now() >= deadline {
                return Err(RemoteGymError::Exhausted {
                    task: task_id.to_string(),
                    attempts: round + 1,
                    tried: tried.join("; "),
                });
            }
            std::thread::sleep(fleet.backoff(round));
        }
        unreachable!("the loop returns")
    }

    fn close_current(&mut self) {
        if let Some(episode) = self.episode.take() {
            if let Some((index, id)) = episode.placed {
                let fleet = &self.fleet;
                let live = &fleet.endpoints[index].live;
                if history_done(&episode.history) {
                    // Counted down when it finished.
                } else {
                    live.fetch_sub(1, Ordering::Relaxed);
                }
                if !fleet.endpoints[index].is_down() {
                    // Best effort: the server reaps what is not closed.
                    let _ = fleet.request(index, "DELETE", &format!("/v1/episodes/{id}"), None);
                }
            }
        }
    }

    /// Starts the episode again on another endpoint and replays its history there.
    fn restart(&mut self, avoid: Option<usize>) -> Result<(), RemoteGymError> {
        let episode = self.episode.as_ref().ok_or(RemoteGymError::NoEpisode)?;
        let (task_id, seed) = (episode.task_id.clone(), episode.seed);
        let (index, started) = self.start_somewhere(&task_id, seed, avoid)?;
        let fleet = self.fleet.clone();
        let url = fleet.endpoints[index].url.clone();
        let episode = self.episode.as_mut().ok_or(RemoteGymError::NoEpisode)?;
        let diverged = |turn| RemoteGymError::Diverged {
            task: task_id.clone(),
            endpoint: url.clone(),
            turn,
        };
        if started.observation != episode.first {
            fleet.endpoints[index].live.fetch_sub(1, Ordering::Relaxed);
            return Err(diverged(0));
        }
        episode.placed = Some((index, started.episode_id.clone()));
        let route = format!("/v1/episodes/{}/step", started.episode_id);
        for (turn, (action, recorded)) in episode.history.iter().enumerate() {
            let request = StepRequest {
                action: action.clone(),
                turn: Some(turn as u32),
            };
            match fleet.post_json::<StepResponse>(index, &route, &request) {
                Ok(replayed) if replayed.step == *recorded => {}
                Ok(replayed) if load_dependent(recorded, &replayed.step) => {}
                Ok(_) => return Err(diverged(turn + 1)),
                Err(failure) => {
                    fleet.lost(index, &failure);
                    episode.placed = None;
                    fleet.endpoints[index].live.fetch_sub(1, Ordering::Relaxed);
                    return Err(RemoteGymError::Exhausted {
                        task: task_id.clone(),
                        attempts: 1,
                        tried: format!("{url}: replaying turn {turn}: {}", failure.message()),
                    });
                }
            }
        }
        fleet.retries.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Whether a replayed answer may differ from the recorded one by machine load alone: a public
/// test run that a time limit stopped on one server and not on the other (or at another
/// point). A test run changes no workspace file, so the episode's state is the same either way
/// and the recorded answer (the one the policy saw) stands.
fn load_dependent(recorded: &Step, replayed: &Step) -> bool {
    let timed_out = |step: &Step| {
        matches!(&step.observation, Observation::Tests(report)
            if report.crashed.as_deref().is_some_and(|c| c.contains("time limit")))
    };
    matches!(
        (&recorded.observation, &replayed.observation),
        (Observation::Tests(_), Observation::Tests(_))
    ) && !recorded.done
        && !replayed.done
        && (timed_out(recorded) || timed_out(replayed))
}

fn history_done(history: &[(Action, Step)]) -> bool {
    history.last().is_some_and(|(_, step)| step.done)
}

impl Env for RemoteEnv {
    type Error = RemoteGymError;

    fn reset(&mut self, task_id: &str) -> Result<Observation, RemoteGymError> {
        self.close_current();
        let seed = self.fleet.seeds.fetch_add(1, Ordering::Relaxed);
        let (index, started) = self.start_somewhere(task_id, seed, None)?;
        let first = started.observation.clone();
        self.episode = Some(RemoteEpisode {
            task_id: task_id.to_string(),
            seed,
            placed: Some((index, started.episode_id)),
            first: started.observation,
            history: Vec::new(),
        });
        Ok(first)
    }

    fn step(&mut self, action: &Action) -> Result<Step, RemoteGymError> {
        let fleet = self.fleet.clone();
        let mut errors = Vec::new();
        let mut avoid = None;
        for attempt in 0..=fleet.config.retries {
            let placed = self
                .episode
                .as_ref()
                .ok_or(RemoteGymError::NoEpisode)?
                .placed
                .clone();
            let (index, id) = match placed {
                Some(placed) => placed,
                None => {
                    if attempt > 0 {
                        std::thread::sleep(fleet.backoff(attempt - 1));
                    }
                    match self.restart(avoid) {
                        Ok(()) => {}
                        Err(RemoteGymError::Exhausted { tried, .. }) => {
                            errors.push(tried);
                            continue;
                        }
                        Err(other) => return Err(other),
                    }
                    match &self
                        .episode
                        .as_ref()
                        .ok_or(RemoteGymError::NoEpisode)?
                        .placed
                    {
                        Some(placed) => placed.clone(),
                        None => continue,
                    }
                }
            };
            let episode = self.episode.as_mut().ok_or(RemoteGymError::NoEpisode)?;
            let request = StepRequest {
                action: action.clone(),
                turn: Some(episode.history.len() as u32),
            };
            let route = format!("/v1/episodes/{id}/step");
            match fleet.post_json::<StepResponse>(index, &route, &request) {
                Ok(answer) => {
                    if answer.step.done {
                        fleet.endpoints[index].live.fetch_sub(1, Ordering::Relaxed);
                    }
                    episode.history.push((action.clone(), answer.step.clone()));
                    return Ok(answer.step);
                }
                Err(Failure::Refused(message)) => {
                    return Err(RemoteGymError::Refused {
                        task: episode.task_id.clone(),
                        endpoint: fleet.endpoints[index].url.clone(),
                        message,
                    })
                }
                Err(failure) => {
                    fleet.lost(index, &failure);
                    errors.push(format!(
                        "{}: {}",
                        fleet.endpoints[index].url,
                        failure.message()
                    ));
                    fleet.endpoints[index].live.fetch_sub(1, Ordering::Relaxed);
                    episode.placed = None;
                    avoid = Some(index);
                }
            }
        }
        let episode = self.episode.as_ref().ok_or(RemoteGymError::NoEpisode)?;
        Err(RemoteGymError::Exhausted {
            task: episode.task_id.clone(),
            attempts: fleet.config.retries + 1,
            tried: errors.join("; "),
        })
    }
}

impl Drop for RemoteEnv {
    fn drop(&mut self) {
        self.close_current();
    }
}
