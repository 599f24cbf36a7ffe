//! The gym as a service: `agentrl gym serve` ([`server`]), the trainer's client over a fleet
//! of such servers ([`client`]), their protocol ([`wire`], `docs/GYM_SERVICE.md`) and the
//! token rule both HTTP servers of agentrl follow ([`access`]).
//!
//! Where it sits: beside [`crate::env`]. A trainer makes a [`GymEnv`] per episode: the
//! in-process `BugFixEnv`, or a [`client::RemoteEnv`] on gym servers when `[gym] endpoints` is
//! set. Both are the same [`Env`] to the rollout driver, and give the same episodes: the server
//! runs the very same `BugFixEnv`.

pub mod access;
pub mod client;
#[cfg(feature = "service")]
pub mod episodes;
#[cfg(feature = "service")]
pub mod http;
#[cfg(feature = "service")]
pub mod openenv;
#[cfg(feature = "service")]
pub mod ors;
#[cfg(feature = "service")]
pub mod server;
pub mod wire;

pub use access::AccessRule;
pub use client::{FleetConfig, GymFleet, RemoteCounts, RemoteEnv, RemoteGymError};
#[cfg(feature = "service")]
pub use episodes::GymServeOptions;
#[cfg(feature = "service")]
pub use server::GymServer;

use crate::env::{BugFixEnv, GymError};
use crate::types::{Action, Env, Observation, Step};

/// An episode's environment: in this process, or on a gym server.
#[allow(clippy::large_enum_variant)]
pub enum GymEnv {
    Local(BugFixEnv),
    Remote(RemoteEnv),
}

/// The error of either kind of env.
#[derive(Debug, thiserror::Error)]
pub enum GymEnvError {
    #[error(transparent)]
    Local(#[from] GymError),
    #[error(transparent)]
    Remote(#[from] RemoteGymError),
}

impl Env for GymEnv {
    type Error = GymEnvError;

    fn reset(&mut self, task_id: &str) -> Result<Observation, GymEnvError> {
        Ok(match self {
            GymEnv::Local(env) => env.reset(task_id)?,
            GymEnv::Remote(env) => env.reset(task_id)?,
        })
    }

    fn step(&mut self, action: &Action) -> Result<Step, GymEnvError> {
        Ok(match self {
            GymEnv::Local(env) => env.step(action)?,
            GymEnv::Remote(env) => env.step(action)?,
        })
    }
}

/// Where a trainer's episodes run: in this process (one sandbox executor and outcome cache
/// shared by every env), or on a fleet of gym servers (`[gym] endpoints`).
pub enum GymBackend {
    InProcess {
        tasks: std::sync::Arc<crate::task::TaskSet>,
        executor: std::sync::Arc<dyn crate::sandbox::Executor>,
        cache: std::sync::Arc<crate::env::OutcomeCache>,
    },
    Servers(std::sync::Arc<GymFleet>),
}

impl GymBackend {
    /// In process when `config` names no endpoint, else connected to every endpoint (each
    /// checked to serve `tasks`, see [`GymFleet::connect`]).
    pub fn new(
        config: &FleetConfig,
        tasks: std::sync::Arc<crate::task::TaskSet>,
    ) -> anyhow::Result<Self> {
        if config.is_remote() {
            return Ok(GymBackend::Servers(GymFleet::connect(config, &tasks)?));
        }
        Ok(GymBackend::InProcess {
            tasks,
            executor: crate::sandbox::default_executor()?,
            cache: crate::env::OutcomeCache::new(),
        })
    }

    /// A fresh env for one episode with `config`'s turn limit and reward.
    pub fn env(&self, config: &crate::env::EnvConfig) -> GymEnv {
        match self {
            GymBackend::InProcess {
                tasks,
                executor,
                cache,
            } => GymEnv::Local(BugFixEnv::new(
                tasks.clone(),
                executor.clone(),
                cache.clone(),
                config.clone(),
            )),
            GymBackend::Servers(fleet) => GymEnv::Remote(fleet.env(config)),
        }
    }

    /// Environment steps worth running at once: `local_threads` in process (the tests run on
    /// this machine's cores), every endpoint's request slots on servers.
    pub fn concurrency(&self, local_threads: usize) -> usize {
        match self {
            GymBackend::InProcess { .. } => local_threads,
            GymBackend::Servers(fleet) => fleet.concurrency(),
        }
    }

    /// The servers' failures and restarts since the last call; `None` in process.
    pub fn take_counts(&self) -> Option<RemoteCounts> {
        match self {
            GymBackend::InProcess { .. } => None,
            GymBackend::Servers(fleet) => Some(fleet.take_counts()),
        }
    }
}
