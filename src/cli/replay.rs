//! `agentrl replay RUN --task ID`: plays the run's policy (its newest checkpoint) on one task
//! and prints the transcript as `agentrl gym play` shows a person's game: each observation,
//! then the policy's action as it would be typed, with the tokens it sampled.
//!
//! The episode is sampled through the same engine and driver as evaluation (gym candidate
//! order, the run's sampling and turn limit), then its actions are stepped through a fresh
//! environment to show each observation in full (the episode keeps the tokens the policy
//! saw, not the observations themselves).

use std::path::PathBuf;
use std::sync::Arc;

use agentrl_engine::{LogprobKind, SamplingParams, WeightSync};
use agentrl_gym::render::render_text;
use agentrl_gym::sandbox::default_executor;
use agentrl_gym::{Action, BugFixEnv, Env, EnvConfig, OutcomeCache, ToolCall};
use agentrl_rollout::{driver::run_groups, RolloutLimits, TokenSource};
use agentrl_train::build::load_tasks;
use agentrl_train::trainer::Trainer;
use anyhow::Context;
use clap::Args;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run directory whose newest checkpoint plays (read-only: safe on a live run).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// Task id (see `agentrl gym list`).
    #[arg(long, value_name = "ID")]
    pub task: String,
    /// Sampling temperature (0 = greedy; default: the run's eval.temperature).
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Seed of the sampling stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// An action as a person types it in `gym play`.
fn typed(action: &Action) -> String {
    match action {
        Action::Call(ToolCall { name, arguments }) => {
            let args = arguments.as_object();
            match (name.as_str(), args) {
                (_, Some(a)) if a.is_empty() => name.clone(),
                ("read", Some(a)) if a.len() == 1 && a["path"].is_string() => {
                    format!("read {}", a["path"].as_str().unwrap_or_default())
                }
                ("edit", Some(a)) if a.len() == 1 && a["candidate"].is_u64() => {
                    format!("edit {}", a["candidate"])
                }
                _ => format!("{name} {arguments}"),
            }
        }
        Action::Malformed { raw, reason } => format!("{raw}    (malformed: {reason})"),
    }
}

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let trainer = Trainer::open_for_eval(&args.run)?;
    let config = &trainer.config;
    let tasks = Arc::new(load_tasks(config)?);
    tasks.get(&args.task)?;
    let env_config = EnvConfig {
        max_turns: config.rollout.max_turns as u32,
        reward: config.reward.clone(),
        ..EnvConfig::default()
    };
    let executor = default_executor().context("starting the gym's sandbox executor")?;
    let cache = OutcomeCache::new();
    let new_env = || {
        BugFixEnv::new(
            tasks.clone(),
            executor.clone(),
            cache.clone(),
            env_config.clone(),
        )
    };
    let temperature = args.temperature.unwrap_or(config.eval.temperature);
    anyhow::ensure!(
        temperature.is_finite() && temperature >= 0.0,
        "--temperature {temperature} must be >= 0 (0 = greedy)"
    );
    let sampling = SamplingParams {
        temperature,
        ..config.sampling.clone()
    };
    let mut engine = trainer.policy.local_engine(LogprobKind::TemperatureScaled);
    engine.sync_weights(&WeightSync::Shared {
        version: trainer.state.step as u64,
    })?;
    let limits = RolloutLimits {
        max_episode_tokens: config.model.max_seq,
        env_threads: 1,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let episodes = run_groups(
        engine.as_mut(),
        trainer.codec.as_ref(),
        &sampling,
        &limits,
        &mut [new_env()],
        std::slice::from_ref(&args.task),
        1,
        &mut rng,
    )?;
    let episode = episodes.first().context("the driver returned no episode")?;
    println!(
        "{} at step {} on task {} (temperature {temperature}, seed {})",
        args.run.display(),
        trainer.state.step,
        args.task,
        args.seed
    );

    // The tokens of each action, in order, for the transcript.
    let codec = trainer.codec.as_ref();
    let mut action_tokens: Vec<Vec<u32>> = Vec::new();
    let mut previous = TokenSource::Prompt;
    for (&token, &source) in episode.tokens.iter().zip(&episode.sources) {
        if source == TokenSource::Action {
            if previous != TokenSource::Action {
                action_tokens.push(Vec::new());
            }
            if let Some(last) = action_tokens.last_mut() {
                last.push(token);
            }
        }
        previous = source;
    }

    let mut env = new_env();
    println!("{}", render_text(&env.reset(&args.task)?));
    let mut reward = None;
    for (i, action) in episode.actions.iter().enumerate() {
        let tokens = action_tokens
            .get(i)
            .map(|t| codec.decode(t))
            .unwrap_or_default();
        println!("> {}    [{tokens}]", typed(action));
        let step = env.step(action)?;
        println!("{}", render_text(&step.observation));
        if step.done {
            reward = step.reward;
            break;
        }
    }
    if reward.is_none() {
        // Cut at the token budget: the driver submitted on the agent's behalf.
        println!("(cut at the token budget; submitted on the agent's behalf)");
        let submit = Action::Call(ToolCall {
            name: "submit".into(),
            arguments: serde_json::json!({}),
        });
        let step = env.step(&submit)?;
        println!("{}", render_text(&step.observation));
        reward = step.reward;
    }
    let r = reward.unwrap_or_else(|| episode.reward.clone());
    println!(
        "reward {:.2}: hidden tests {}/{}, public tests {}/{}{}{}",
        r.score,
        r.hidden_passed,
        r.hidden_total,
        r.public_passed,
        r.public_total,
        if r.tampered { ", tampered" } else { "" },
        if r.hacked() {
            " (hacked: public pass, hidden fail)"
        } else {
            ""
        }
    );
    Ok(())
}
