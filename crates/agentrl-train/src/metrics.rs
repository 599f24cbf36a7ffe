//! The trainer's step record under the run's metric names: the one place where
//! [`StepRecord`] and [`UpdateMetrics`] fields become `agentrl_run::metrics::names`.
//!
//! Where it sits: a recipe's step → [`StepRecord`] (`crate::step_record`) → [`metric_line`] → `RunDir::log_metrics`
//! (`metrics.jsonl` and TensorBoard) → the monitor (dashboard, doctor). Sampled episodes go
//! to `episodes/` as [`EpisodeRecord`]s, with each token's text beside its id.

use agentrl_chat::ChatCodec;
use agentrl_rollout::Episode;
use agentrl_run::metrics::{names, MetricLine};
use serde::Serialize;

use crate::step_record::StepRecord;
use crate::update::UpdateMetrics;

/// A step record under the run's metric names (verl's where verl has one). A supervised step
/// (format warm-up, `agentrl sft`) records its loss, learning rate and any evaluation only: it
/// samples no episodes.
pub fn metric_line(record: &StepRecord) -> MetricLine {
    let mut line = MetricLine::new(record.step);
    line.set(names::LR, record.lr)
        .set(names::TIME_STEP, record.time_step_s)
        .set(names::TIME_UPDATE, record.time_update_s);
    if let Some(seconds) = record.time_env_s {
        line.set(names::TIME_ENV, seconds);
    }
    if let Some(seconds) = record.time_sync_s {
        line.set(names::TIME_SYNC, seconds);
    }
    if let Some(failures) = record.remote_failures {
        line.set(names::REMOTE_FAILURES, failures);
    }
    if let Some(retries) = record.remote_retries {
        line.set(names::REMOTE_RETRIES, retries);
    }
    if let Some(peak) = agentrl_run::metrics::peak_rss_bytes() {
        line.set(names::PEAK_MEMORY_GB, peak as f64 / 1e9);
    }
    for (name, value) in &record.recipe_metrics {
        line.set(name, *value);
    }
    if let Some(loss) = record.format_warmup_loss {
        line.set(names::SFT_LOSS, loss);
        eval_scalars(&mut line, record);
        return line;
    }
    if record.episodes == 0 && !record.recipe_metrics.is_empty() {
        // A recipe step that sampled nothing (DPO on its pool): its own figures only.
        eval_scalars(&mut line, record);
        return line;
    }
    let s = &record.rollout;
    line.set(names::REWARD_MEAN, record.reward)
        .set(names::REWARD_STD, s.reward_std)
        .set(names::REWARD_MAX, s.reward_max)
        .set(names::REWARD_MIN, s.reward_min)
        // verl's `critic/score/*`: the episodes' verifier scores. Here they equal
        // `critic/rewards/*`: a KL-in-reward penalty shapes the token rewards of the update
        // (`crate::update`), never an episode's recorded reward.
        .set(names::SCORE_MEAN, record.reward)
        .set(names::SCORE_MAX, s.reward_max)
        .set(names::SCORE_MIN, s.reward_min)
        .set(names::SOLVE_HIDDEN, record.hidden_solve_rate)
        .set(names::SOLVE_PUBLIC, record.public_solve_rate)
        .set(
            names::SOLVE_GAP,
            record.public_solve_rate - record.hidden_solve_rate,
        )
        .set(names::HACKING_RATE, record.hacking_rate)
        .set(names::TAMPER_RATE, s.tamper_rate)
        .set(names::VERDICT_RERUNS, s.verdict_reruns)
        .set(names::FORMAT_ERROR_RATE, record.format_error_rate)
        .set(names::SUBMIT_RATE, s.submit_rate)
        .set(names::TURN_LIMIT_RATE, s.turn_limit_rate)
        .set(names::ZERO_VARIANCE_GROUPS, s.zero_variance_group_rate)
        .set(names::GROUPS_DROPPED, record.groups_dropped as f64)
        .set(names::KL_COEF, record.kl_coef)
        .set(names::RESPONSE_LENGTH_MEAN, record.action_tokens)
        .set(names::RESPONSE_LENGTH_MAX, s.action_tokens_max)
        .set(names::RESPONSE_LENGTH_MIN, s.action_tokens_min)
        .set(names::RESPONSE_CLIP_RATIO, record.truncated_rate)
        .set(names::EPISODE_TOKENS, record.episode_tokens)
        .set(names::NUM_TURNS, record.turns)
        .set(names::TOOL_CALLS, s.tool_calls)
        .set(names::TIME_GEN, record.time_rollout_s)
        .set(names::TOTAL_TOKENS, s.total_tokens)
        .set(
            names::THROUGHPUT,
            if record.time_step_s > 0.0 {
                s.total_tokens / record.time_step_s
            } else {
                0.0
            },
        )
        .set(names::STALENESS_MEAN, s.staleness_mean)
        .set(names::STALENESS_MAX, s.staleness_max)
        .set(names::RETOKENIZATION_DRIFT, s.retokenization_drift_rate);
    update_scalars(&mut line, &record.update);
    eval_scalars(&mut line, record);
    line
}

/// The periodic evaluation of a step, when it ran (supervised steps have one too).
fn eval_scalars(line: &mut MetricLine, record: &StepRecord) {
    if let Some(eval) = &record.eval {
        let split = eval.split.as_str();
        line.set(&names::eval(split, "solve_hidden"), eval.hidden_solve_rate)
            .set(&names::eval(split, "solve_public"), eval.public_solve_rate)
            .set(
                &names::eval(split, &format!("pass@{}", eval.k)),
                eval.pass_at_k,
            );
        line.eval = serde_json::to_value(eval).ok();
    }
}

/// The update's diagnostics. A step whose every group had equal rewards ran no optimizer
/// step: it records no policy figures rather than zeros that would read as a healthy 0.
fn update_scalars(line: &mut MetricLine, u: &UpdateMetrics) {
    if u.optimizer_steps == 0 {
        return;
    }
    line.set(names::LOSS, u.loss)
        .set(names::PG_LOSS, u.policy_loss)
        .set(names::ENTROPY, u.entropy)
        .set(names::PPO_KL, u.approx_kl)
        .set(names::PG_CLIPFRAC, u.clipfrac)
        .set(names::PG_CLIPFRAC_LOWER, u.dual_clipfrac)
        .set(names::CLIP_HIGH, u.clipfrac_upper)
        .set(names::CLIP_LOW, u.clipfrac_lower)
        .set(names::RATIO_MEAN, u.ratio_mean)
        .set(names::RATIO_MAX, u.ratio_max)
        .set(names::GRAD_NORM, u.grad_norm)
        .set(names::GRAD_NORM_MAX, u.grad_norm_max)
        .set(names::ADVANTAGE_ABS_MEAN, u.advantage_abs_mean)
        .set(names::VALUE_LOSS, u.value_loss)
        .set(names::VALUE_CLIPFRAC, u.value_clipfrac);
    if let Some(kl) = u.kl_ref {
        line.set(names::KL_REF, kl);
    }
    if let Some(gap) = u.engine_logprob_gap {
        line.set(names::MISMATCH, gap);
    }
    for (name, &value) in &u.rollout_corr {
        line.set(name, value);
    }
}

/// One line of `episodes/step_N.jsonl`: the episode as sampled, plus the text of every token
/// (the codec's word for it) so a reader needs no vocabulary to read it, and the trainer's
/// log-prob of every token beside the engine's (`logprobs`) where the trainer scored them.
#[derive(Debug, Serialize)]
pub struct EpisodeRecord<'a> {
    #[serde(flatten)]
    pub episode: &'a Episode,
    /// `token_text[i]` is the text of `tokens[i]`.
    pub token_text: Vec<String>,
    /// `trainer_logprobs[i]`: the trainer's log-prob of `tokens[i]` at the weights the engine
    /// sampled with (0 on prompt and observation tokens, as `logprobs`); absent where the run
    /// did not score them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainer_logprobs: Option<&'a [f32]>,
}

/// The records of `episodes`, with token text from `codec`'s vocabulary and, where given,
/// `trainer_logprobs[i]` for episode `i` (`crate::update::trainer_token_logprobs`).
pub fn episode_records<'a>(
    episodes: &'a [Episode],
    codec: &dyn ChatCodec,
    trainer_logprobs: Option<&'a [Vec<f32>]>,
) -> Vec<EpisodeRecord<'a>> {
    episodes
        .iter()
        .enumerate()
        .map(|(i, episode)| EpisodeRecord {
            episode,
            token_text: episode
                .tokens
                .iter()
                .map(|&id| codec.decode(&[id]))
                .collect(),
            trainer_logprobs: trainer_logprobs
                .and_then(|all| all.get(i))
                .map(Vec::as_slice),
        })
        .collect()
}
