//! How many gym servers and inference engines a config needs for a target step time, from the
//! costs a run measured (`agentrl plan --target-step-s T --costs-from RUN`).
//!
//! Where it sits: beside [`crate::plan`] (memory), before a cluster run. It reads a finished
//! run's `metrics.jsonl` and `config.toml`, never the trainer.
//!
//! **The costs**, medians over the run's RL steps, per unit of work and per server of the run's
//! kind (a run that used `n` servers did `n` servers' worth of work in its wall time):
//! - gym: `timing_s/env` × gym servers used (1 in process) / episodes, server-seconds per
//!   episode (its tool calls and verdict);
//! - engine: (`timing_s/gen` − `timing_s/env`) × engines used (1 local) / `perf/total_num_tokens`,
//!   engine-seconds per token (the rollout's time less its environments' is its sampling);
//! - update: `timing_s/update_actor` / episodes, trainer-seconds per episode (one trainer).
//!
//! Episodes per step are `perf/total_num_tokens` / `env/episode_tokens/mean`.
//!
//! **The model of a step** (the rollout driver's, `agentrl_rollout::driver`): a turn's engine
//! call and its environment steps alternate, so a synchronous step takes
//! `update + gym work / gym servers + engine work / engines`. The plan is the fewest servers in
//! all (ties: fewer engines, the dearer kind) whose step fits the target. It assumes the
//! servers are like the run's machine(s) and the work spreads evenly; a config whose episodes
//! are longer or shorter than the run's scales with its episodes, not its tokens.

use std::path::Path;

use agentrl_run::metrics::names;
use anyhow::Context;
use serde::Serialize;

/// Most servers of one kind the plan considers.
const MAX_SERVERS: usize = 4096;

/// What a run measured, per unit of work (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredCosts {
    pub run: String,
    /// RL steps read.
    pub steps: usize,
    pub episodes_per_step: f64,
    pub tokens_per_episode: f64,
    pub gym_s_per_episode: f64,
    pub engine_s_per_token: f64,
    pub update_s_per_episode: f64,
    /// Servers of each kind the run used (1 = in process / local).
    pub gym_servers_used: usize,
    pub engines_used: usize,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

impl MeasuredCosts {
    /// Reads `run`'s `metrics.jsonl` and `config.toml`; errors name the file and what is missing.
    pub fn from_run(run: &Path) -> anyhow::Result<Self> {
        let metrics_path = run.join("metrics.jsonl");
        let text = std::fs::read_to_string(&metrics_path)
            .with_context(|| format!("reading {}", metrics_path.display()))?;
        let config_path = run.join("config.toml");
        let config: toml::Value = toml::from_str(
            &std::fs::read_to_string(&config_path)
                .with_context(|| format!("reading {}", config_path.display()))?,
        )
        .with_context(|| format!("parsing {}", config_path.display()))?;
        let endpoints = |section: &str| {
            config
                .get(section)
                .and_then(|s| s.get("endpoints"))
                .and_then(|e| e.as_array())
                .map_or(0, |e| e.len())
                .max(1)
        };
        let (gym_servers_used, engines_used) = (endpoints("gym"), endpoints("engine"));
        let (mut episodes, mut tokens_per_episode, mut gym, mut engine, mut update) =
            (vec![], vec![], vec![], vec![], vec![]);
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let get = |name: &str| v.get(name).and_then(|x| x.as_f64());
            let (Some(env), Some(gen), Some(upd), Some(total), Some(per_episode)) = (
                get(names::TIME_ENV),
                get(names::TIME_GEN),
                get(names::TIME_UPDATE),
                get(names::TOTAL_TOKENS),
                get(names::EPISODE_TOKENS),
            ) else {
                continue;
            };
            if total <= 0.0 || per_episode <= 0.0 {
                continue;
            }
            let n = total / per_episode;
            episodes.push(n);
            tokens_per_episode.push(per_episode);
            gym.push(env * gym_servers_used as f64 / n);
            engine.push((gen - env).max(0.0) * engines_used as f64 / total);
            update.push(upd / n);
        }
        anyhow::ensure!(
            !episodes.is_empty(),
            "{}: no RL step records {}, {}, {} and {} (a run of `agentrl train` has them)",
            metrics_path.display(),
            names::TIME_ENV,
            names::TIME_GEN,
            names::TIME_UPDATE,
            names::TOTAL_TOKENS
        );
        Ok(Self {
            run: run.display().to_string(),
            steps: episodes.len(),
            episodes_per_step: median(episodes),
            tokens_per_episode: median(tokens_per_episode),
            gym_s_per_episode: median(gym),
            engine_s_per_token: median(engine),
            update_s_per_episode: median(update),
            gym_servers_used,
            engines_used,
        })
    }
}

/// The servers a config's step needs to fit a target time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetPlan {
    pub target_step_s: f64,
    pub episodes_per_step: usize,
    pub gym_servers: usize,
    pub engines: usize,
    /// The step on that fleet: update + gym + engine time.
    pub expected_step_s: f64,
    pub update_s: f64,
    /// Server-seconds of gym and engine work per step (divided among the servers).
    pub gym_work_s: f64,
    pub engine_work_s: f64,
    pub costs: MeasuredCosts,
}

impl FleetPlan {
    /// The fewest servers for `episodes_per_step` episodes a step within `target_step_s`;
    /// an error when the trainer's update alone takes longer, or no fleet of up to
    /// `MAX_SERVERS` of each kind fits.
    pub fn new(
        costs: MeasuredCosts,
        episodes_per_step: usize,
        target_step_s: f64,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            target_step_s > 0.0 && target_step_s.is_finite(),
            "--target-step-s must be > 0, got {target_step_s}"
        );
        let e = episodes_per_step as f64;
        let update_s = e * costs.update_s_per_episode;
        let gym_work_s = e * costs.gym_s_per_episode;
        let engine_work_s = e * costs.tokens_per_episode * costs.engine_s_per_token;
        let budget = target_step_s - update_s;
        anyhow::ensure!(
            budget > 0.0,
            "the trainer's update alone takes {update_s:.2} s for {episodes_per_step} episodes \
             (measured in {}): no fleet of servers brings the step under {target_step_s} s",
            costs.run
        );
        let mut best: Option<(usize, usize)> = None;
        for gym_servers in 1..=MAX_SERVERS {
            let left = budget - gym_work_s / gym_servers as f64;
            if left <= 0.0 {
                continue;
            }
            let engines = ((engine_work_s / left).ceil() as usize).max(1);
            if engines > MAX_SERVERS {
                continue;
            }
            let better = best.is_none_or(|(g, n)| (gym_servers + engines, engines) < (g + n, n));
            if better {
                best = Some((gym_servers, engines));
            }
            if best.is_some_and(|(g, n)| gym_servers + 1 >= g + n) {
                break; // more gym servers (and at least one engine) cannot use fewer in all
            }
        }
        let (gym_servers, engines) = best.ok_or_else(|| {
            anyhow::anyhow!(
                "no fleet of up to {MAX_SERVERS} gym servers and engines brings the step under \
                 {target_step_s} s (gym work {gym_work_s:.1} s, engine work {engine_work_s:.1} s \
                 per step)"
            )
        })?;
        Ok(Self {
            target_step_s,
            episodes_per_step,
            gym_servers,
            engines,
            expected_step_s: update_s
                + gym_work_s / gym_servers as f64
                + engine_work_s / engines as f64,
            update_s,
            gym_work_s,
            engine_work_s,
            costs,
        })
    }

    /// The plan as lines for the terminal.
    pub fn table(&self) -> String {
        let c = &self.costs;
        format!(
            "fleet for a step of ≤ {:.1} s ({} episodes; costs measured in {}, median of {} steps)\n  \
             gym per episode             {:>10.4} s (of one gym server)\n  \
             engine per token            {:>10.6} s (of one engine), {:.0} tokens per episode\n  \
             update per episode          {:>10.4} s (the trainer)\n  \
             gym servers                 {:>10}\n  \
             engines                     {:>10}\n  \
             expected step time          {:>10.2} s (update {:.2} + gym {:.2} + engine {:.2})\n",
            self.target_step_s,
            self.episodes_per_step,
            c.run,
            c.steps,
            c.gym_s_per_episode,
            c.engine_s_per_token,
            c.tokens_per_episode,
            c.update_s_per_episode,
            self.gym_servers,
            self.engines,
            self.expected_step_s,
            self.update_s,
            self.gym_work_s / self.gym_servers as f64,
            self.engine_work_s / self.engines as f64,
        )
    }
}
