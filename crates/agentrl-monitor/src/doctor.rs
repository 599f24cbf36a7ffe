//! The doctor: names the failure signatures of an RL run from its metrics, with the evidence
//! (step range, values against the run's own early baseline) and the usual remedies.
//!
//! Where it sits: after the run directory. Offline, `agentrl doctor RUN` feeds every line of
//! `metrics.jsonl` to [`diagnose`]; live (`train.doctor = true`), the training session feeds
//! each step's line to [`Doctor::observe`] and warns as a signature appears.
//!
//! How a rule judges (shared/MONITOR.md, after rewardspy and Flight Recorder): never against
//! a fixed number alone. The **baseline** of a metric is the median of its first
//! [`DoctorConfig::baseline_steps`] values; the **recent** value is the median of the last
//! [`DoctorConfig::window`] values (a median, so one noisy step moves neither); a rule holds
//! at a step when the recent value departs from the baseline by a ratio or a margin; a
//! signature is reported once its rule has held for [`DoctorConfig::persistence`] consecutive
//! steps. The few absolute floors are in units that mean the same for any model (nats of KL,
//! shares of tokens or episodes), so one rule serves TinyAgent and Qwen3. Rates that every
//! healthy run moves a lot (entropy falls, length grows as the agent learns to read before it
//! edits) are judged together with the outcome: a fall of entropy while the hidden solve rate
//! climbs is learning, not collapse.
//!
//! Silence on a healthy run is tested as hard as firing on a broken one
//! (`tests/cli/monitor_runs.rs`: real runs made to fail on purpose, and healthy ones).

use std::collections::BTreeMap;

use agentrl_run::metrics::{names, MetricLine};
use serde::{Deserialize, Serialize};

/// A failure signature the doctor knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signature {
    EntropyCollapse,
    RewardHacking,
    KlBlowUp,
    LengthExplosion,
    LengthCollapse,
    ClipFractionSpike,
    GrowingMismatch,
    WeightsNeverSynced,
    ZeroVarianceGroups,
    FormatCollapse,
    RewardPlateau,
    NeverSubmits,
}

impl Signature {
    pub const ALL: [Signature; 12] = [
        Signature::RewardHacking,
        Signature::EntropyCollapse,
        Signature::KlBlowUp,
        Signature::ClipFractionSpike,
        Signature::GrowingMismatch,
        Signature::WeightsNeverSynced,
        Signature::LengthExplosion,
        Signature::LengthCollapse,
        Signature::FormatCollapse,
        Signature::NeverSubmits,
        Signature::ZeroVarianceGroups,
        Signature::RewardPlateau,
    ];

    /// The name a report prints.
    pub fn title(self) -> &'static str {
        match self {
            Signature::EntropyCollapse => "entropy collapse",
            Signature::RewardHacking => "reward hacking",
            Signature::KlBlowUp => "KL blow-up",
            Signature::LengthExplosion => "length explosion",
            Signature::LengthCollapse => "length collapse",
            Signature::ClipFractionSpike => "clip-fraction spike",
            Signature::GrowingMismatch => "growing engine/trainer mismatch",
            Signature::WeightsNeverSynced => "weights never synced",
            Signature::ZeroVarianceGroups => "zero-variance groups starve the gradient",
            Signature::FormatCollapse => "format collapse",
            Signature::RewardPlateau => "reward plateau",
            Signature::NeverSubmits => "never submits (turn limit every time)",
        }
    }

    /// The metrics the rule reads: every group must have a metric recorded over the
    /// baseline and a recent window (any one metric of a group will do) for the rule to judge
    /// the run. A run that lacks them (a synchronous run has no staleness) is not checked for
    /// that signature, and the report says so.
    pub fn inputs(self) -> &'static [&'static [&'static str]] {
        match self {
            Signature::EntropyCollapse => &[&[names::ENTROPY], &[names::SOLVE_HIDDEN]],
            Signature::RewardHacking => &[&[names::REWARD_MEAN], &[names::SOLVE_HIDDEN]],
            Signature::KlBlowUp => &[&[names::PPO_KL, names::KL_REF]],
            Signature::LengthExplosion | Signature::LengthCollapse => {
                &[&[names::RESPONSE_LENGTH_MEAN]]
            }
            Signature::ClipFractionSpike => &[&[names::PG_CLIPFRAC]],
            Signature::GrowingMismatch => &[&[names::MISMATCH]],
            Signature::WeightsNeverSynced => &[&[names::STALENESS_MEAN]],
            Signature::ZeroVarianceGroups => {
                &[&[names::ZERO_VARIANCE_GROUPS], &[names::SOLVE_HIDDEN]]
            }
            Signature::FormatCollapse => &[&[names::FORMAT_ERROR_RATE]],
            Signature::RewardPlateau => &[&[names::REWARD_MEAN]],
            Signature::NeverSubmits => &[&[names::TURN_LIMIT_RATE]],
        }
    }

    /// The usual remedies, most common first (config keys where agentrl has one).
    pub fn remedies(self) -> &'static [&'static str] {
        match self {
            Signature::EntropyCollapse => &[
                "add or raise the entropy bonus (algorithm.entropy_coef, e.g. 0.01)",
                "lower the learning rate (optim.lr)",
                "clip higher on the upside (algorithm.eps_high, DAPO's 0.28) or use clip_cov / kl_cov",
                "sample hotter or larger groups (sampling.temperature, rollout.group_size)",
            ],
            Signature::RewardHacking => &[
                "reward the hidden tests only (reward.kind = \"hidden\"): the verifier runs them on a pristine harness",
                "read the flagged episodes (dashboard episode view, agentrl replay RUN --task ID) to see the exploit",
                "make the exploit impossible or penalised in the environment (test files read-only, tamper flag as reward 0)",
                "add a KL penalty to slow the drift toward the exploit (algorithm.kl_coef)",
            ],
            Signature::KlBlowUp => &[
                "lower the learning rate (optim.lr) or clip gradients harder (optim.grad_clip)",
                "add a KL penalty or an adaptive target (algorithm.kl_coef, algorithm.kl_target)",
                "fewer epochs or more minibatches per update (algorithm.epochs, algorithm.minibatches)",
                "tighter PPO clipping (algorithm.eps_low / eps_high) or a dual clip (algorithm.dual_clip_c)",
            ],
            Signature::LengthExplosion => &[
                "shape overlong episodes (DAPO's overlong buffer: algorithm.overlong_cache)",
                "use a length-unbiased aggregation (algorithm.agg = \"seq-mean-token-sum-norm\", Dr. GRPO)",
                "check that truncated episodes are not rewarded, and the stop tokens end actions",
            ],
            Signature::LengthCollapse => &[
                "check the reward for a bias toward short episodes (format penalty per action, length shaping)",
                "token-level aggregation rewards long correct answers less than sequence-mean: try algorithm.agg = \"token-mean\"",
                "read short episodes: an early submit that the reward accepts is a hack",
            ],
            Signature::ClipFractionSpike => &[
                "lower the learning rate (optim.lr) or clip gradients harder (optim.grad_clip)",
                "fewer epochs over the same batch (algorithm.epochs)",
                "check for stale or mismatched rollouts (rollout_corr/* panels)",
            ],
            Signature::GrowingMismatch => &[
                "check that the engine and trainer score the same distribution (temperature, top-p/top-k, logprob kind)",
                "correct for it: truncated importance sampling (TIS) or masking of mismatched tokens",
                "compare precisions (bf16 engine vs f32 trainer) and kernels",
            ],
            Signature::WeightsNeverSynced => &[
                "check that the engine receives each update (weight version, sync_weights / load_lora_adapter)",
                "bound staleness in an asynchronous setup, and correct off-policy samples (TIS)",
            ],
            Signature::ZeroVarianceGroups => &[
                "drop uninformative groups and resample (algorithm.dynamic_sampling = true, DAPO)",
                "adjust task difficulty, or use larger groups (rollout.group_size) so some episodes differ",
                "a denser reward (reward.kind = \"fraction\") separates episodes that fail differently",
            ],
            Signature::FormatCollapse => &[
                "add a format penalty (reward.format_penalty) or constrain actions (model.action_vocab = \"grammar\")",
                "warm up on well-formed calls first (train.format_warmup_steps)",
                "lower the learning rate: format errors rising mid-run is a policy drifting off its prior",
            ],
            Signature::RewardPlateau => &[
                "raise the learning rate or the group size if the policy barely moves (actor/ppo_kl, actor/grad_norm)",
                "check that tasks are learnable: pass@k of the untrained policy above 0 (agentrl eval)",
                "look for zero-variance groups and entropy collapse, which stall learning",
            ],
            Signature::NeverSubmits => &[
                "check that submit is reachable and parsed (agentrl replay RUN --task ID)",
                "reward a submitted fix above a turn-limit submit, or give fewer turns (rollout.max_turns)",
                "a format penalty per wasted action nudges toward submitting (reward.format_penalty)",
            ],
        }
    }
}

/// One signature found, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub signature: Signature,
    /// First and last training steps at which the rule held.
    pub first_step: usize,
    pub last_step: usize,
    /// The steps whose medians are the baseline and the recent values in the evidence.
    pub baseline_steps: (usize, usize),
    pub recent_steps: (usize, usize),
    /// What was measured, one line per metric: `name baseline → recent`.
    pub evidence: String,
    pub remedies: Vec<String>,
}

impl Finding {
    /// The window the evidence compares: `baseline: median of steps 1–5; recent: …`.
    pub fn windows(&self) -> String {
        format!(
            "baseline = median of steps {}–{}, recent = median of steps {}–{}",
            self.baseline_steps.0, self.baseline_steps.1, self.recent_steps.0, self.recent_steps.1
        )
    }

    /// `[title] steps a–b`, the evidence line by line, then the remedies.
    pub fn render(&self) -> String {
        let mut out = format!(
            "[{}] steps {}–{} ({})\n",
            self.signature.title(),
            self.first_step,
            self.last_step,
            self.windows()
        );
        for line in self.evidence.lines() {
            out.push_str(&format!("  {line}\n"));
        }
        out.push_str("  remedies:\n");
        for r in &self.remedies {
            out.push_str(&format!("    - {r}\n"));
        }
        out
    }
}

/// The doctor's thresholds. Defaults were tuned on the runs of `tests/cli/monitor_runs.rs`
/// (seed 0; seeds 0–11 for entropy collapse) and checked on other seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoctorConfig {
    /// Steps whose median is a metric's baseline.
    pub baseline_steps: usize,
    /// Steps whose median is a metric's recent value.
    pub window: usize,
    /// Consecutive steps a rule must hold before it is reported.
    pub persistence: usize,
    /// Entropy collapse, deep: recent entropy below this share of the baseline…
    pub entropy_collapse_ratio: f64,
    /// … or a crash: the windowed median fell by at least this share of the baseline from
    /// one window to the next (`window` steps apart) at some step since the baseline, and the
    /// recent entropy is still below `entropy_recovered` × baseline…
    pub entropy_crash_drop: f64,
    pub entropy_recovered: f64,
    /// … while hidden solve is still low: below `low_solve_rate`, or not improving (below
    /// this, the ceiling, and up by less than 0.2 over its baseline). Entropy that falls as
    /// the solve rate climbs is learning, as in the README's PPO run at `optim.lr=1e-3`,
    /// whose entropy crashed at steps 9–14 while hidden solve went 0.05 → 0.86 → 1.0.
    /// Also the ceiling of the outcome elsewhere (a solved task may be deterministic).
    pub solved_rate: f64,
    pub low_solve_rate: f64,
    /// Entropy collapse, however the outcome climbed: recent entropy below this share of the
    /// baseline while hidden solve is below `floor_solve_rate` is a policy that stopped
    /// exploring before it solved the tasks (the README's PPO recipe on seed 1 ends at 7% of
    /// its baseline while solving 0.88–1.0: not that).
    pub entropy_floor_ratio: f64,
    pub floor_solve_rate: f64,
    /// Reward hacking: the reward, and the public solve rate, up by at least this much over
    /// their baselines…
    pub hacking_public_rise: f64,
    /// … while the hidden solve rate rose by less than this share of the rise.
    pub hacking_hidden_share: f64,
    /// Reward hacking: tamper rate up by at least this much over its baseline, together with
    /// the hacking rate (public pass, hidden fail) up by `hacking_rise`.
    pub tamper_rise: f64,
    pub hacking_rise: f64,
    /// KL blow-up: the recent peak of `actor/ppo_kl` above this many nats (the KL to the
    /// reference: ten times this)…
    pub kl_floor: f64,
    /// … and above this multiple of its baseline (also the clip-fraction spike's multiple).
    pub kl_growth: f64,
    /// Length explosion: recent length above this multiple of the baseline, or…
    pub length_growth: f64,
    /// … truncated share up by this much over its baseline.
    pub truncation_rise: f64,
    /// Length collapse: recent length below this share of the baseline (outcome not rising).
    pub length_shrink: f64,
    /// Clip-fraction spike: recent clip fraction above this share of tokens and above
    /// `kl_growth` × baseline.
    pub clipfrac_floor: f64,
    /// Mismatch: recent |Δ log p| per token above this many nats, growing over the window.
    pub mismatch_floor: f64,
    /// Zero-variance groups: share of groups with equal rewards above this (outcome below
    /// `solved_rate`).
    pub zero_variance_rate: f64,
    /// Format collapse: format-error rate up by this much over its baseline, while the
    /// outcome is not improving or has fallen by `outcome_fall` below its best 5-step median.
    pub format_error_rise: f64,
    pub outcome_fall: f64,
    /// Reward plateau: steps after the baseline before a plateau can be judged.
    pub plateau_steps: usize,
    /// Reward plateau: the best recent reward must beat the baseline by this much.
    pub plateau_gain: f64,
    /// Never submits: share of episodes at the turn limit without a submit above this.
    pub turn_limit_rate: f64,
}

impl Default for DoctorConfig {
    fn default() -> Self {
        Self {
            baseline_steps: 5,
            window: 5,
            persistence: 3,
            entropy_collapse_ratio: 0.25,
            entropy_crash_drop: 0.25,
            entropy_recovered: 0.9,
            solved_rate: 0.9,
            low_solve_rate: 0.5,
            entropy_floor_ratio: 0.1,
            floor_solve_rate: 0.75,
            hacking_public_rise: 0.15,
            hacking_hidden_share: 0.5,
            tamper_rise: 0.15,
            hacking_rise: 0.1,
            kl_floor: 0.1,
            kl_growth: 10.0,
            length_growth: 2.0,
            truncation_rise: 0.3,
            length_shrink: 0.5,
            clipfrac_floor: 0.1,
            mismatch_floor: 0.05,
            zero_variance_rate: 0.9,
            format_error_rise: 0.2,
            outcome_fall: 0.2,
            plateau_steps: 20,
            plateau_gain: 0.05,
            turn_limit_rate: 0.9,
        }
    }
}

/// Values of one metric seen so far, in step order.
#[derive(Debug, Default, Clone)]
struct Track {
    steps: Vec<usize>,
    values: Vec<f64>,
}

/// What a rule sees: every metric's track, and the thresholds.
struct Ctx<'a> {
    tracks: &'a BTreeMap<String, Track>,
    config: &'a DoctorConfig,
}

/// A metric's baseline and recent medians.
struct Compare {
    base: f64,
    recent: f64,
}

impl Compare {
    /// `name baseline → recent` (the finding's header says which steps each covers).
    fn text(&self, name: &str) -> String {
        format!("{name} {} → {}", num(self.base), num(self.recent))
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// A number as a report prints it: 3 significant digits, scientific when tiny or huge.
fn num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == 0.0 {
        "0".into()
    } else if x.abs() < 1e-3 || x.abs() >= 1e5 {
        format!("{x:.2e}")
    } else if x.abs() < 1.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.2}")
    }
}

impl Ctx<'_> {
    fn track(&self, name: &str) -> Option<&Track> {
        self.tracks.get(name).filter(|t| !t.values.is_empty())
    }

    /// Baseline and recent medians of `name`, once it has a baseline and a full recent
    /// window after it.
    fn compare(&self, name: &str) -> Option<Compare> {
        let t = self.track(name)?;
        let (b, w) = (self.config.baseline_steps, self.config.window);
        let n = t.values.len();
        if n < b + w {
            return None;
        }
        Some(Compare {
            base: median(&t.values[..b]),
            recent: median(&t.values[n - w..]),
        })
    }

    /// The last `window` values of `name`.
    fn recent_values(&self, name: &str) -> Option<&[f64]> {
        let t = self.track(name)?;
        let w = self.config.window;
        (t.values.len() >= w).then(|| &t.values[t.values.len() - w..])
    }

    /// How far the recent hidden solve rate sits below its best window median since the
    /// baseline (0 when it is at its best).
    fn outcome_fall_from_best(&self) -> f64 {
        let (Some(t), Some(c)) = (
            self.track(names::SOLVE_HIDDEN),
            self.compare(names::SOLVE_HIDDEN),
        ) else {
            return 0.0;
        };
        let (b, w) = (self.config.baseline_steps, self.config.window);
        let best = (b + w..=t.values.len())
            .map(|end| median(&t.values[end - w..end]))
            .filter(|m| !m.is_nan())
            .fold(f64::MIN, f64::max);
        (best - c.recent).max(0.0)
    }

    /// Whether the outcome (hidden solve rate) is at the ceiling or rising clearly: the
    /// context in which falling entropy or shrinking length is learning.
    fn outcome_improving(&self) -> bool {
        match self.compare(names::SOLVE_HIDDEN) {
            Some(c) => c.recent >= self.config.solved_rate || c.recent - c.base >= 0.2,
            None => false,
        }
    }
}

type Rule = fn(&Ctx) -> Option<String>;

fn rule(signature: Signature) -> Rule {
    match signature {
        Signature::EntropyCollapse => entropy_collapse,
        Signature::RewardHacking => reward_hacking,
        Signature::KlBlowUp => kl_blow_up,
        Signature::LengthExplosion => length_explosion,
        Signature::LengthCollapse => length_collapse,
        Signature::ClipFractionSpike => clip_fraction_spike,
        Signature::GrowingMismatch => growing_mismatch,
        Signature::WeightsNeverSynced => weights_never_synced,
        Signature::ZeroVarianceGroups => zero_variance_groups,
        Signature::FormatCollapse => format_collapse,
        Signature::RewardPlateau => reward_plateau,
        Signature::NeverSubmits => never_submits,
    }
}

/// Entropy collapse: the policy's entropy either sits far below its own baseline (deep), or
/// crashed, losing a large share of its baseline within one window, and has not come back.
/// A healthy run's entropy falls too, as it learns, but slowly (about 1% of its baseline per
/// step here); judging the fall per window catches a crash that stops at half the baseline,
/// which a deep-only rule misses.
///
/// Tuned on real runs (the `tests/cli/monitor_runs.rs` setup: 25 steps of 4 tasks × 8) of "high
/// LR, no entropy bonus" (`optim.lr=3e-2 algorithm.entropy_coef=0`) and the default recipe.
/// The feature is the largest fall of the 5-step median from one window to the next, as a
/// share of the baseline. Tuning seeds 0–11: collapse 0.34–0.94 (seed 2, crashing to 40% and
/// back to about half: 0.60; seed 11, stuck at 64%: 0.34, which a first threshold of 0.35
/// missed), healthy 0.07–0.17, and 0.15/0.17 on 60-step default runs (seeds 0, 1) whose
/// entropy learns its way down to 45%/28% of baseline. Held out, thresholds fixed first, seeds
/// 12–15: collapse 0.34–0.72, all named; healthy 0.08–0.20, all silent. So 0.25 sits about
/// 0.05 above the steepest healthy fall and 0.09 below the gentlest crash. Recent entropy over
/// baseline at step 25: collapse 0.00–0.64, healthy 0.70–0.95 (the deep rule's 0.25 alone
/// misses seeds 2 and 11). The policy's maximum entropy is not used: the run's own baseline
/// means the same for TinyAgent's grammar and a 150k-token Qwen3 vocabulary, a maximum does not.
///
/// Judged with the outcome (issue 44): the deep and crash rules hold only while hidden solve
/// is still low (below [`DoctorConfig::low_solve_rate`], or not improving), because a
/// learning run's entropy falls as fast as a collapsing one's: the README's PPO run at
/// `optim.lr=1e-3` lost 42% of its baseline in 5 steps while hidden solve went 0.05 → 0.86,
/// and a preset's default run (bypass_ppo_clip_k3_rs, seed 0) sat at 25% of its baseline
/// while solving 0.69. Below [`DoctorConfig::entropy_floor_ratio`] of the baseline with
/// hidden solve below [`DoctorConfig::floor_solve_rate`], it is collapse whatever the climb
/// (the high-LR run of seed 5: entropy at 1% of its baseline, solving 0.5; the PPO recipe of
/// seed 1: 7% while solving 0.88, not a collapse). On the 25-step high-LR runs of seeds 0, 2,
/// 3, 5, 11 and 12 the rule still names the collapse, by step 12–16.
fn entropy_collapse(cx: &Ctx) -> Option<String> {
    let c = cx.config;
    let e = cx.compare(names::ENTROPY)?;
    let solve = cx.compare(names::SOLVE_HIDDEN)?;
    if solve.recent >= c.solved_rate || e.base.is_nan() || e.base <= 0.0 {
        return None;
    }
    let share = |x: f64| 100.0 * x / e.base;
    let context = format!(
        "{} ({:.0}% of its baseline) while {}",
        e.text(names::ENTROPY),
        share(e.recent),
        solve.text(names::SOLVE_HIDDEN)
    );
    // Near zero while a quarter of the tasks still fail: the policy stopped exploring before
    // it solved them.
    if e.recent < c.entropy_floor_ratio * e.base && solve.recent < c.floor_solve_rate {
        return Some(context);
    }
    // Entropy that falls while the hidden solve rate climbs is the policy learning what to
    // do; a collapse is a policy that stopped exploring while hidden solve is still low.
    if solve.recent >= c.low_solve_rate && cx.outcome_improving() {
        return None;
    }
    if e.recent < c.entropy_collapse_ratio * e.base {
        return Some(context);
    }
    if e.recent >= c.entropy_recovered * e.base {
        return None;
    }
    // The steepest fall from one window to the next since the baseline.
    let t = cx.track(names::ENTROPY)?;
    let w = c.window;
    let first_end = (2 * w).max(c.baseline_steps + w);
    let (drop, before, after, end) = (first_end..=t.values.len())
        .map(|end| {
            let before = median(&t.values[end - 2 * w..end - w]);
            let after = median(&t.values[end - w..end]);
            (before - after, before, after, end)
        })
        .filter(|(drop, ..)| !drop.is_nan())
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    (drop >= c.entropy_crash_drop * e.base).then(|| {
        format!(
            "{} crashed from {} (median of steps {}–{}) to {} (steps {}–{}): {:.0}% of its baseline lost in {w} steps\n{context}",
            names::ENTROPY,
            num(before),
            t.steps[end - 2 * w],
            t.steps[end - w - 1],
            num(after),
            t.steps[end - w],
            t.steps[end - 1],
            share(drop),
        )
    })
}

/// Reward hacking: the reward being optimised rises while the real objective (hidden tests)
/// does not follow: public solve up with hidden flat or falling, or tampering up together
/// with public-pass-hidden-fail episodes. A policy that breaks down and passes public tests
/// by accident while its reward falls is not hacking (that run shows other signatures).
fn reward_hacking(cx: &Ctx) -> Option<String> {
    let c = cx.config;
    let reward = cx.compare(names::REWARD_MEAN)?;
    let hidden = cx.compare(names::SOLVE_HIDDEN)?;
    let reward_rise = reward.recent - reward.base;
    if reward_rise < c.hacking_public_rise
        || hidden.recent - hidden.base >= c.hacking_hidden_share * reward_rise
    {
        return None;
    }
    let mut evidence = vec![format!(
        "{} while {}",
        reward.text(names::REWARD_MEAN),
        hidden.text(names::SOLVE_HIDDEN)
    )];
    let mut signs = 0;
    if let Some(public) = cx.compare(names::SOLVE_PUBLIC) {
        let rise = public.recent - public.base;
        if rise >= c.hacking_public_rise
            && hidden.recent - hidden.base < c.hacking_hidden_share * rise
        {
            evidence.push(public.text(names::SOLVE_PUBLIC));
            signs += 1;
        }
    }
    // Tampering alone is not hacking: an untrained policy pokes at the harness at random,
    // and under a hidden-test reward it gains nothing. It counts when episodes that pass the
    // public tests but fail the hidden ones rise with it.
    if let (Some(tamper), Some(hacked)) = (
        cx.compare(names::TAMPER_RATE),
        cx.compare(names::HACKING_RATE),
    ) {
        if tamper.recent - tamper.base >= c.tamper_rise
            && hacked.recent - hacked.base >= c.hacking_rise
        {
            evidence.push(tamper.text(names::TAMPER_RATE));
            signs += 1;
        }
    }
    if signs == 0 {
        return None;
    }
    if let Some(h) = cx.compare(names::HACKING_RATE) {
        evidence.push(h.text(names::HACKING_RATE));
    }
    Some(evidence.join("\n"))
}

/// KL blow-up: a KL the run measures spikes above an absolute floor (nats mean the same for
/// any model) and far above its own baseline. Judged on the *peak since the baseline*, not a
/// median, because a blow-up often lasts one or two steps before the policy (and so the KL)
/// collapses: `actor/ppo_kl`
/// (how far one update moved the policy, π_old‖π_θ; about 1e-9 with one minibatch, 1e-3–1e-2
/// with several) against [`DoctorConfig::kl_floor`], and the KL to the reference, which grows
/// as any run learns, against a floor ten times higher. A non-finite KL is a blow-up.
fn kl_blow_up(cx: &Ctx) -> Option<String> {
    let c = cx.config;
    for (name, floor) in [
        (names::PPO_KL, c.kl_floor),
        (names::KL_REF, 10.0 * c.kl_floor),
    ] {
        let (Some(kl), Some(t)) = (cx.compare(name), cx.track(name)) else {
            continue;
        };
        let b = c.baseline_steps;
        let (peak_at, peak) =
            t.steps[b..]
                .iter()
                .zip(&t.values[b..])
                .fold((0, f64::MIN), |best, (&s, &v)| {
                    // A NaN, once seen, is the peak: the KL diverged.
                    let higher = v.is_nan() || v > best.1;
                    if !best.1.is_nan() && higher {
                        (s, v)
                    } else {
                        best
                    }
                });
        let scale = kl.base.abs().max(floor / 100.0);
        let spiked = peak > floor && peak > c.kl_growth * scale;
        if spiked || !peak.is_finite() {
            let mut text = format!(
                "{name} peaked at {} at step {peak_at}, {:.0}× its baseline {}",
                num(peak),
                peak / scale,
                num(kl.base)
            );
            if let Some(r) = cx.compare(names::RATIO_MAX) {
                text.push_str(&format!("\n{}", r.text(names::RATIO_MAX)));
            }
            return Some(text);
        }
    }
    None
}

fn length_explosion(cx: &Ctx) -> Option<String> {
    let c = cx.config;
    let len = cx.compare(names::RESPONSE_LENGTH_MEAN)?;
    let mut evidence = Vec::new();
    if len.recent > c.length_growth * len.base {
        evidence.push(len.text(names::RESPONSE_LENGTH_MEAN));
    }
    if let Some(clip) = cx.compare(names::RESPONSE_CLIP_RATIO) {
        if clip.recent - clip.base >= c.truncation_rise {
            evidence.push(clip.text(names::RESPONSE_CLIP_RATIO));
        }
    }
    (!evidence.is_empty()).then(|| evidence.join("\n"))
}

fn length_collapse(cx: &Ctx) -> Option<String> {
    let len = cx.compare(names::RESPONSE_LENGTH_MEAN)?;
    (len.recent < cx.config.length_shrink * len.base && !cx.outcome_improving()).then(|| {
        let mut text = len.text(names::RESPONSE_LENGTH_MEAN);
        if let Some(s) = cx.compare(names::SOLVE_HIDDEN) {
            text.push_str(&format!(" while {}", s.text(names::SOLVE_HIDDEN)));
        }
        text
    })
}

fn clip_fraction_spike(cx: &Ctx) -> Option<String> {
    let clip = cx.compare(names::PG_CLIPFRAC)?;
    let c = cx.config;
    (clip.recent > c.clipfrac_floor
        && clip.recent > c.kl_growth * clip.base.max(c.clipfrac_floor / 100.0))
    .then(|| clip.text(names::PG_CLIPFRAC))
}

/// Whether `values` rise step after step (each at least the one before, last above first).
fn rising(values: &[f64]) -> bool {
    values.windows(2).all(|w| w[1] >= w[0]) && values.last() > values.first()
}

fn growing_mismatch(cx: &Ctx) -> Option<String> {
    let m = cx.compare(names::MISMATCH)?;
    let recent = cx.recent_values(names::MISMATCH)?;
    let floor = cx.config.mismatch_floor;
    if m.recent > floor && m.recent > 3.0 * m.base && rising(recent) {
        return Some(format!(
            "{}, rising over the last {} steps",
            m.text(names::MISMATCH),
            recent.len()
        ));
    }
    // A mismatch that is large from the first steps on (an engine whose numerics or
    // semantics differ, injected noise) never "grows", but biases every ratio all the same.
    (m.base > 2.0 * floor && m.recent > 2.0 * floor).then(|| {
        format!(
            "{}: a large engine/trainer mismatch since the first steps",
            m.text(names::MISMATCH)
        )
    })
}

fn weights_never_synced(cx: &Ctx) -> Option<String> {
    let recent = cx.recent_values(names::STALENESS_MEAN)?;
    let last = *recent.last()?;
    // Staleness that grows by one version per step means the engine never moves.
    (rising(recent) && last >= cx.config.window as f64).then(|| {
        let s = cx.compare(names::STALENESS_MEAN);
        let mut text = match s {
            Some(s) => s.text(names::STALENESS_MEAN),
            None => format!("{} {} and rising", names::STALENESS_MEAN, num(last)),
        };
        text.push_str(", growing by about one version per step");
        text
    })
}

fn zero_variance_groups(cx: &Ctx) -> Option<String> {
    let z = cx.compare(names::ZERO_VARIANCE_GROUPS)?;
    let solve = cx.compare(names::SOLVE_HIDDEN)?;
    // A run whose groups all agree because it learned (each task now always or never solved,
    // the solve rate up) has converged; starved is a run that cannot start learning.
    (z.recent >= cx.config.zero_variance_rate && !cx.outcome_improving()).then(|| {
        format!(
            "{} while {}",
            z.text(names::ZERO_VARIANCE_GROUPS),
            solve.text(names::SOLVE_HIDDEN)
        )
    })
}

fn format_collapse(cx: &Ctx) -> Option<String> {
    let f = cx.compare(names::FORMAT_ERROR_RATE)?;
    // Judged with the outcome: format errors that rise while the hidden solve rate climbs
    // and holds (a preset's default run, 0.03 → 0.24 while solving 0.03 → 0.75) are noise of
    // a policy that is learning, not a policy drifting off its prior; errors that rise as the
    // solve rate falls from its best (grpo_passk, seed 1: 0.30 as solve fell 0.66 → 0.09)
    // are a collapse even in a run that had learned.
    let c = cx.config;
    let fall = cx.outcome_fall_from_best();
    (f.recent - f.base >= c.format_error_rise
        && (!cx.outcome_improving() || fall >= c.outcome_fall))
        .then(|| {
            let mut text = f.text(names::FORMAT_ERROR_RATE);
            if fall >= c.outcome_fall {
                text.push_str(&format!(
                    "\n{} {} below its best 5-step median",
                    names::SOLVE_HIDDEN,
                    num(fall)
                ));
            }
            text
        })
}

fn reward_plateau(cx: &Ctx) -> Option<String> {
    let c = cx.config;
    let t = cx.track(names::REWARD_MEAN)?;
    let n = t.values.len();
    if n < c.baseline_steps + c.plateau_steps {
        return None;
    }
    let r = cx.compare(names::REWARD_MEAN)?;
    // The best rolling median since the baseline: a run that learned and then held is not
    // a plateau.
    let best = (c.baseline_steps + c.window..=n)
        .map(|end| median(&t.values[end - c.window..end]))
        .fold(f64::MIN, f64::max);
    let ceiling = cx
        .compare(names::REWARD_MAX)
        .map_or(1.0, |m| m.recent.max(m.base));
    let at_ceiling = r.recent >= c.solved_rate * ceiling;
    (best - r.base < c.plateau_gain && !at_ceiling).then(|| {
        format!(
            "{}, best 5-step median {} after {} steps",
            r.text(names::REWARD_MEAN),
            num(best),
            n
        )
    })
}

fn never_submits(cx: &Ctx) -> Option<String> {
    let l = cx.compare(names::TURN_LIMIT_RATE)?;
    // A policy that solves the task in its last turn is done, submitted or not.
    (l.recent >= cx.config.turn_limit_rate && !cx.outcome_improving()).then(|| {
        let mut text = l.text(names::TURN_LIMIT_RATE);
        if let Some(s) = cx.compare(names::SUBMIT_RATE) {
            text.push_str(&format!("\n{}", s.text(names::SUBMIT_RATE)));
        }
        text
    })
}

/// The live doctor: one metric line per step in, the signatures that appear out.
#[derive(Debug, Clone, Default)]
pub struct Doctor {
    config: DoctorConfig,
    tracks: BTreeMap<String, Track>,
    /// Consecutive steps each rule has held, ending at the last step observed.
    streaks: BTreeMap<Signature, usize>,
    findings: BTreeMap<Signature, Finding>,
}

impl Doctor {
    pub fn new(config: DoctorConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Takes one step's metrics; returns the signatures that appear at this step (each
    /// signature is returned once; [`Doctor::findings`] keeps its evidence up to date).
    pub fn observe(&mut self, line: &MetricLine) -> Vec<Finding> {
        for (name, &value) in &line.scalars {
            let track = self.tracks.entry(name.clone()).or_default();
            track.steps.push(line.step);
            track.values.push(value);
        }
        let cx = Ctx {
            tracks: &self.tracks,
            config: &self.config,
        };
        // The run's own step sequence (the metric seen most often), for the header.
        let longest = self.tracks.values().max_by_key(|t| t.steps.len());
        let windows = longest.map_or(((0, 0), (0, 0)), |t| {
            let (b, w, n) = (
                self.config.baseline_steps,
                self.config.window,
                t.steps.len(),
            );
            (
                (t.steps[0], t.steps[b.min(n) - 1]),
                (t.steps[n.saturating_sub(w)], t.steps[n - 1]),
            )
        });
        let mut appeared = Vec::new();
        for signature in Signature::ALL {
            let Some(evidence) = rule(signature)(&cx) else {
                self.streaks.insert(signature, 0);
                continue;
            };
            let streak = self.streaks.entry(signature).or_insert(0);
            *streak += 1;
            if *streak < self.config.persistence {
                continue;
            }
            let started = self.tracks.values().find_map(|t| {
                // The step the streak started at: `persistence - 1` steps before this one
                // in the run's own step sequence.
                let i = t.steps.iter().position(|&s| s == line.step)?;
                Some(t.steps[i + 1 - (*streak).min(i + 1)])
            });
            let (baseline_steps, recent_steps) = windows;
            match self.findings.get_mut(&signature) {
                Some(found) => {
                    found.last_step = line.step;
                    found.evidence = evidence;
                    found.recent_steps = recent_steps;
                }
                None => {
                    let finding = Finding {
                        signature,
                        first_step: started.unwrap_or(line.step),
                        last_step: line.step,
                        baseline_steps,
                        recent_steps,
                        evidence,
                        remedies: signature.remedies().iter().map(|r| r.to_string()).collect(),
                    };
                    appeared.push(finding.clone());
                    self.findings.insert(signature, finding);
                }
            }
        }
        appeared
    }

    /// Every signature found so far, in report order.
    pub fn findings(&self) -> Vec<Finding> {
        Signature::ALL
            .iter()
            .filter_map(|s| self.findings.get(s).cloned())
            .collect()
    }

    /// Steps observed.
    pub fn steps(&self) -> usize {
        self.tracks
            .values()
            .map(|t| t.steps.len())
            .max()
            .unwrap_or(0)
    }

    /// The signatures whose rules could judge the run so far (their [`Signature::inputs`]
    /// recorded over the baseline and a recent window; the reward plateau needs
    /// [`DoctorConfig::plateau_steps`] after the baseline), in report order. A report of no
    /// finding says how many these were: silence means "checked", not "not looked at".
    pub fn checked(&self) -> Vec<Signature> {
        Signature::ALL
            .into_iter()
            .filter(|&s| self.unchecked_reason(s).is_none())
            .collect()
    }

    /// The signatures the doctor could not judge, each with the reason (a metric the run does
    /// not record, or too few steps).
    pub fn unchecked(&self) -> Vec<(Signature, String)> {
        Signature::ALL
            .into_iter()
            .filter_map(|s| self.unchecked_reason(s).map(|why| (s, why)))
            .collect()
    }

    fn unchecked_reason(&self, signature: Signature) -> Option<String> {
        let c = &self.config;
        let needed = match signature {
            Signature::RewardPlateau => c.baseline_steps + c.plateau_steps,
            _ => c.baseline_steps + c.window,
        };
        let len = |name: &str| self.tracks.get(name).map_or(0, |t| t.values.len());
        for group in signature.inputs() {
            let best = group.iter().map(|n| len(n)).max().unwrap_or(0);
            if best == 0 {
                return Some(format!("the run records no {}", group.join(" or ")));
            }
            if best < needed {
                return Some(format!(
                    "{} steps of {} recorded, {needed} needed",
                    best,
                    group.join(" or ")
                ));
            }
        }
        None
    }

    /// The fewest steps after which every rule can judge (baseline + window + persistence).
    pub fn min_steps(&self) -> usize {
        self.config.baseline_steps + self.config.window + self.config.persistence - 1
    }
}

/// Every signature in a whole run's metric lines.
pub fn diagnose(lines: &[MetricLine], config: &DoctorConfig) -> Vec<Finding> {
    let mut doctor = Doctor::new(config.clone());
    for line in lines {
        doctor.observe(line);
    }
    doctor.findings()
}
