//! Sampling a run's episodes: the tasks, the gym's environments (the run's turn limit and
//! reward, in process or on gym servers), the codec and the engine on its weights
//! ([`EngineWeights`]), driven by `agentrl_rollout` in bounded chunks.
//!
//! Where it sits: the trainer lends a [`Sampler`] (its fields, borrowed apart from the
//! optimizer) to a recipe's step, evaluation and the preflight → `agentrl_rollout` →
//! episodes. It knows no recipe and no trainer.

use std::sync::Arc;

use agentrl_chat::ChatCodec;
use agentrl_engine::{Engine, NoisyLogprobs, OnThreads, SamplingParams, WeightSync};
use agentrl_gym::service::{GymBackend, GymEnv};
use agentrl_gym::{EnvConfig, TaskSet};
use agentrl_rollout::{
    run_groups_bounded, EnvClock, Episode, LiveBound, RolloutLimits, ShuffledCandidates, Timed,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::Config;
use crate::engine_sync::EngineWeights;

// The live-episode bound is a memory plan's decision (`crate::plan`); the sampler applies it.
pub use crate::plan::{live_episode_bound, MAX_LIVE_EPISODES};

/// What sampling reads of a trainer: the tasks, the gym, the codec and the engine's
/// weights; not the optimizer. Borrowed apart from it, so an asynchronous step samples the
/// next step's rollouts on the engine's weights while the update changes the trainer's.
pub struct Sampler<'a> {
    pub config: &'a Config,
    pub tasks: &'a Arc<TaskSet>,
    /// Where episodes run: in process or on gym servers.
    pub gym: &'a GymBackend,
    pub env_clock: &'a Arc<EnvClock>,
    pub codec: &'a (dyn ChatCodec + Send + Sync),
    pub weights: EngineWeights<'a>,
}

impl<'a> Sampler<'a> {
    pub fn env_config(&self) -> EnvConfig {
        EnvConfig {
            max_turns: self.config.rollout.max_turns as u32,
            reward: self.config.reward.clone(),
            ..EnvConfig::default()
        }
    }

    pub fn rollout_limits(&self) -> RolloutLimits {
        RolloutLimits {
            max_episode_tokens: self.config.model.max_seq,
            env_threads: self.gym.concurrency(self.config.threads().max(2)),
        }
    }

    pub fn envs(&self, count: usize) -> Vec<GymEnv> {
        let config = self.env_config();
        (0..count).map(|_| self.gym.env(&config)).collect()
    }

    /// The engine the rollouts sample with; with `engine.logprob_noise`, behind the injected
    /// noise.
    pub fn engine(&self) -> anyhow::Result<Box<dyn Engine + Send + 'a>> {
        let kind = self.config.engine.logprobs;
        let local_engine_threads = self.config.engine_threads();
        let on_threads = |engine: Box<dyn Engine + Send + 'a>| -> anyhow::Result<_> {
            Ok(if local_engine_threads == self.config.threads() {
                engine
            } else {
                Box::new(OnThreads::new(engine, local_engine_threads)?)
            })
        };
        let mut engine: Box<dyn Engine + Send + 'a> = match self.weights {
            EngineWeights::Remote(remote) => Box::new(remote),
            EngineWeights::Copy(copy) => on_threads(copy.replica.engine(kind, copy.version)?)?,
            EngineWeights::Trainer { policy, version } => {
                let mut engine = policy.local_engine(kind);
                engine.sync_weights(&WeightSync::Shared { version })?;
                on_threads(engine)?
            }
        };
        if self.config.engine.logprob_noise > 0.0 {
            engine = Box::new(NoisyLogprobs::new(
                engine,
                self.config.engine.logprob_noise,
            )?);
        }
        Ok(engine)
    }

    /// Samples `group_size` episodes of each task; with `shuffle_candidates`, each episode
    /// sees the task's candidates in a fresh order (training only, see
    /// `agentrl_rollout::shuffle`).
    ///
    /// At most [`MAX_LIVE_EPISODES`] episodes (workspaces, KV caches) live at once: larger
    /// requests are sampled in chunks of whole groups, a group larger than the bound in
    /// pieces. Requests within the bound (the default run) are sampled in one go.
    pub fn sample(
        &self,
        task_ids: &[String],
        group_size: usize,
        sampling: &SamplingParams,
        shuffle_candidates: bool,
        rng: &mut ChaCha8Rng,
    ) -> anyhow::Result<Vec<Episode>> {
        let mut engine = self.engine()?;
        let mut make_envs =
            |n: usize, rng: &mut ChaCha8Rng| -> Vec<ShuffledCandidates<Timed<GymEnv>>> {
                self.envs(n)
                    .into_iter()
                    .map(|env| {
                        let env = Timed::new(env, self.env_clock.clone());
                        if shuffle_candidates {
                            ShuffledCandidates::new(env, rng.random())
                        } else {
                            ShuffledCandidates::unshuffled(env)
                        }
                    })
                    .collect()
            };
        run_groups_bounded(
            engine.as_mut(),
            self.codec,
            sampling,
            &self.rollout_limits(),
            &mut make_envs,
            task_ids,
            group_size,
            LiveBound {
                max_episodes: live_episode_bound(self.config),
                max_tasks: usize::MAX,
            },
            rng,
        )
    }
}
