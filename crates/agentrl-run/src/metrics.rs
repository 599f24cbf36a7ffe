//! A training step's scalars, by name: the one vocabulary of metric names, the line
//! `metrics.jsonl` holds per step, and the reader of that file.
//!
//! Where it sits: the trainer maps its step record onto these names once
//! (`agentrl_train::metrics::metric_line`); [`crate::RunDir::log_metrics`] writes each line to
//! both sinks, `metrics.jsonl` and the TensorBoard event file ([`crate::tensorboard`]); the
//! monitor (`agentrl-monitor`: dashboard, doctor) reads them back by the same names. Names
//! follow verl 0.9 (`verl/trainer/ppo/metric_utils.py`, `core_algos.py`) where verl has one,
//! TRL's `clip_ratio/*` for the split of clipping into its two sides, and `env/` for what only
//! the BugFix gym measures (hidden and public tests, tampering).
//!
//! A line of `metrics.jsonl` is flat: `{"step": N, "<name>": value, …, "eval": {…}}`, one JSON
//! number per scalar; a non-finite value is written as `null` (JSON has no NaN) and read back
//! as NaN, so a diverged step stays visible instead of breaking the reader.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Every metric name the trainer writes, with its unit. verl's meaning is kept exactly where
/// the name is verl's; the doc says where ours differs.
pub mod names {
    // ── outcome ────────────────────────────────────────────────────────────────────────
    /// Mean outcome reward of the step's episodes (the verifier's score incl. format penalty).
    pub const REWARD_MEAN: &str = "critic/rewards/mean";
    pub const REWARD_STD: &str = "critic/rewards/std";
    pub const REWARD_MAX: &str = "critic/rewards/max";
    pub const REWARD_MIN: &str = "critic/rewards/min";
    /// verl's headline score (`compute_data_metrics`: the token-level scores, before a KL
    /// penalty), beside `critic/rewards/*`: the episodes' verifier scores.
    pub const SCORE_MEAN: &str = "critic/score/mean";
    pub const SCORE_MAX: &str = "critic/score/max";
    pub const SCORE_MIN: &str = "critic/score/min";
    /// Share of episodes whose hidden tests all pass (the real solve rate).
    pub const SOLVE_HIDDEN: &str = "env/solve_hidden";
    /// Share of episodes whose public tests all pass in the agent's own workspace (what a
    /// hackable reward sees).
    pub const SOLVE_PUBLIC: &str = "env/solve_public";
    /// `env/solve_public − env/solve_hidden`: what the public tests claim beyond the truth.
    pub const SOLVE_GAP: &str = "env/solve_gap";
    /// Share of episodes that pass the public tests but fail the hidden ones.
    pub const HACKING_RATE: &str = "env/hacking_rate";
    /// Share of episodes that changed test files or planted hooks in the workspace (their
    /// hidden result fails and their verdict scores nothing).
    pub const TAMPER_RATE: &str = "env/tamper_rate";
    /// Verifier runs of the step's episodes repeated because a time limit stopped them the
    /// first time (a stalled machine; a hang pays its limit twice).
    pub const VERDICT_RERUNS: &str = "env/verdict_reruns";
    /// Requests to gym servers (`[gym] endpoints`) that failed this step: a server
    /// unreachable, a time-out, a 5xx, an episode the server lost. Absent in process.
    pub const REMOTE_FAILURES: &str = "env/remote_failures";
    /// Episodes restarted on a gym server from their task (every action replayed) after such a
    /// failure: none is dropped or scored 0. Absent in process.
    pub const REMOTE_RETRIES: &str = "env/remote_retries";
    /// Malformed or rejected actions over all actions.
    pub const FORMAT_ERROR_RATE: &str = "env/format_error_rate";
    /// Share of episodes that called `submit` themselves.
    pub const SUBMIT_RATE: &str = "env/submit_rate";
    /// Share of episodes that used every turn without submitting (submitted for them).
    pub const TURN_LIMIT_RATE: &str = "env/turn_limit_rate";
    /// Groups whose rewards were all equal: no gradient from them (GRPO-style baselines).
    pub const ZERO_VARIANCE_GROUPS: &str = "env/zero_variance_group_rate";
    /// Groups dropped by dynamic sampling (DAPO), over all sampling rounds of the step.
    pub const GROUPS_DROPPED: &str = "training/filter_groups/dropped_groups";

    // ── policy health ──────────────────────────────────────────────────────────────────
    /// Masked mean entropy of the policy on action tokens, nats per token.
    pub const ENTROPY: &str = "actor/entropy";
    /// KL estimate to the reference policy (only when a reference exists, β > 0 or a target).
    pub const KL_REF: &str = "actor/kl_loss";
    pub const KL_COEF: &str = "actor/kl_coef";
    pub const PG_LOSS: &str = "actor/pg_loss";
    /// The whole loss the optimizer minimised (policy + KL + entropy + value terms).
    pub const LOSS: &str = "actor/loss";
    /// verl: `mean(log π_old − log π_θ)` (k1 of KL(π_old‖π_θ)).
    pub const PPO_KL: &str = "actor/ppo_kl";
    /// verl: share of tokens whose clipped term was active, both sides combined.
    pub const PG_CLIPFRAC: &str = "actor/pg_clipfrac";
    /// verl: share of tokens where the dual-clip bound (A < 0, c·|A|) was active.
    pub const PG_CLIPFRAC_LOWER: &str = "actor/pg_clipfrac_lower";
    /// TRL: share of tokens clipped at the upper bound (A > 0, r > 1 + ε_high).
    pub const CLIP_HIGH: &str = "clip_ratio/high_mean";
    /// TRL: share of tokens clipped at the lower bound (A < 0, r < 1 − ε_low).
    pub const CLIP_LOW: &str = "clip_ratio/low_mean";
    /// Importance ratio π_θ/π_old on action tokens (no standard name).
    pub const RATIO_MEAN: &str = "actor/ratio/mean";
    pub const RATIO_MAX: &str = "actor/ratio/max";
    /// Mean |advantage| on action tokens (verl logs mean/max/min; the mean of a whitened
    /// advantage is 0 by construction, so its magnitude is what carries information).
    pub const ADVANTAGE_ABS_MEAN: &str = "critic/advantages/abs_mean";
    /// Global gradient norm before clipping, mean over the step's optimizer steps.
    pub const GRAD_NORM: &str = "actor/grad_norm";
    pub const GRAD_NORM_MAX: &str = "actor/grad_norm_max";
    pub const LR: &str = "actor/lr";
    pub const VALUE_LOSS: &str = "critic/vf_loss";
    pub const VALUE_CLIPFRAC: &str = "critic/vf_clipfrac";
    /// Loss of a supervised format warm-up step.
    pub const SFT_LOSS: &str = "actor/sft_loss";

    // ── length ─────────────────────────────────────────────────────────────────────────
    /// Action (policy-sampled) tokens per episode. verl's multi-turn `response_length`
    /// counts tool-result tokens too; ours counts only what the policy generated, and
    /// [`EPISODE_TOKENS`] counts everything.
    pub const RESPONSE_LENGTH_MEAN: &str = "response_length/mean";
    pub const RESPONSE_LENGTH_MAX: &str = "response_length/max";
    pub const RESPONSE_LENGTH_MIN: &str = "response_length/min";
    /// verl: share of episodes cut at the length budget.
    pub const RESPONSE_CLIP_RATIO: &str = "response_length/clip_ratio";
    /// All tokens of an episode (prompt, actions, tool results).
    pub const EPISODE_TOKENS: &str = "env/episode_tokens/mean";
    pub const NUM_TURNS: &str = "num_turns/mean";
    pub const TOOL_CALLS: &str = "tool_call_counts/mean";

    // ── systems ────────────────────────────────────────────────────────────────────────
    /// Sampling the step's episodes, environment steps included, seconds.
    pub const TIME_GEN: &str = "timing_s/gen";
    /// Of the rollouts, the wall time an environment was busy (tool calls, test runs), seconds.
    pub const TIME_ENV: &str = "timing_s/env";
    /// Weight sync to the engine (its copy, or the inference servers), seconds.
    pub const TIME_SYNC: &str = "timing_s/update_weights";
    /// The policy update (forward, backward, optimizer), seconds.
    pub const TIME_UPDATE: &str = "timing_s/update_actor";
    pub const TIME_STEP: &str = "timing_s/step";
    /// Tokens of the step's episodes.
    pub const TOTAL_TOKENS: &str = "perf/total_num_tokens";
    /// Episode tokens per second of step time.
    pub const THROUGHPUT: &str = "perf/throughput";
    /// The process's peak resident memory so far, GB (CPU runs; verl's
    /// `perf/max_memory_allocated_gb` is the GPU allocator's).
    pub const PEAK_MEMORY_GB: &str = "perf/max_memory_rss_gb";
    /// Mean |log π_engine − log π_trainer| on action tokens, measured when the update runs an
    /// old-log-prob pass (verl's `rollout_corr/log_ppl_abs_diff` is per sequence; this is per
    /// token).
    pub const MISMATCH: &str = "rollout_corr/logprob_abs_diff";
    /// Trainer weight version at update time minus the version the episode was sampled with.
    pub const STALENESS_MEAN: &str = "training/off_policy/trajectory_staleness/mean";
    pub const STALENESS_MAX: &str = "training/off_policy/trajectory_staleness/max";
    /// Episodes whose re-rendered conversation tokenises differently from the sampled ids.
    pub const RETOKENIZATION_DRIFT: &str = "env/retokenization_drift_rate";

    /// Periodic evaluation during training: `eval/<split>/<what>`.
    pub fn eval(split: &str, what: &str) -> String {
        format!("eval/{split}/{what}")
    }
}

/// Whether a metric's value depends on the machine's speed or memory rather than on the
/// seed (timings, throughput, memory): equal seeds give equal lines except for these.
pub fn is_wall_clock(name: &str) -> bool {
    name.starts_with("timing_s/") || name.starts_with("perf/")
}

/// One line of `metrics.jsonl`: a training step's scalars by name, and the periodic
/// evaluation report when one ran at this step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricLine {
    /// Training steps completed after this one (1-based).
    pub step: usize,
    /// The step's scalars by metric name ([`names`]). Non-finite values are written as
    /// `null` and read back as NaN.
    #[serde(flatten, with = "nullable_map")]
    pub scalars: BTreeMap<String, f64>,
    /// The periodic evaluation report at this step, as the trainer wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<serde_json::Value>,
}

impl MetricLine {
    pub fn new(step: usize) -> Self {
        Self {
            step,
            ..Self::default()
        }
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: f64) -> &mut Self {
        self.scalars.insert(name.to_string(), value);
        self
    }

    /// The value of `name` at this step, if the step recorded it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.scalars.get(name).copied()
    }
}

/// `null` ⇄ NaN for the flattened scalar map (JSON has no NaN; serde_json writes non-finite
/// floats as `null`).
mod nullable_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(map: &BTreeMap<String, f64>, s: S) -> Result<S::Ok, S::Error> {
        let nullable: BTreeMap<&String, Option<f64>> = map
            .iter()
            .map(|(k, v)| (k, v.is_finite().then_some(*v)))
            .collect();
        nullable.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
        let nullable = BTreeMap::<String, Option<f64>>::deserialize(d)?;
        Ok(nullable
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
            .collect())
    }
}

/// Reads `metrics.jsonl`: every complete line, in file order. A torn last line (a kill
/// mid-write) is skipped; a malformed line elsewhere is an error naming its line number.
pub fn read_metrics(path: &Path) -> anyhow::Result<Vec<MetricLine>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let count = text.lines().count();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<MetricLine>(line) {
            Ok(parsed) => lines.push(parsed),
            Err(_) if i + 1 == count && !text.ends_with('\n') => break,
            Err(err) => {
                return Err(err).with_context(|| {
                    format!(
                        "{} line {}: not a metrics line {{\"step\": N, \"<name>\": value, …}}",
                        path.display(),
                        i + 1
                    )
                })
            }
        }
    }
    Ok(lines)
}

/// The peak resident memory of this process so far (Linux `VmHWM`), bytes; `None` where
/// the platform does not say.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
