//! The run configuration: one TOML file (`configs/*.toml`) plus `--set key.path=value`
//! overrides, resolved against the algorithm preset's defaults and checked for knob
//! combinations that make no sense.
//!
//! Data flow: `configs/X.toml` → [`load_config`] (overrides applied on the raw TOML, so an
//! unknown key is reported by name) → [`Config::resolve`] (fills every `None` knob of the
//! `[algorithm]` section from the preset of [`crate::algo`]) → [`Config::validate`] (errors and
//! warnings) → the trainer, which writes the resolved file into the run directory.

use std::path::Path;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::algo::Algorithm;
use crate::train::action_space::ActionVocab;
use agentrl_rl::{AggMode, KlEstimator};

/// Everything a run needs, section by section. Every section has defaults, so a file only names
/// what it changes; `Config::default()` is `configs/default.toml` (TinyAgent + GRPO).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub model: ModelConfig,
    pub sampling: SamplingConfig,
    pub algorithm: AlgorithmConfig,
    pub optim: OptimConfig,
    pub rollout: RolloutConfig,
    pub train: TrainConfig,
    pub reward: RewardConfig,
    pub eval: EvalConfig,
}

/// TinyAgent's shape. The vocabulary size comes from the tiny tokenizer, not from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub d_model: usize,
    pub layers: usize,
    pub heads: usize,
    pub mlp_ratio: usize,
    /// Longest episode (prompt + all turns) in tokens; longer episodes are cut and flagged.
    pub max_seq: usize,
    /// Words the policy may emit: the 15 words of the call format, or the whole vocabulary
    /// (see `train::action_space`).
    pub action_vocab: ActionVocab,
    /// Score the candidate arguments `C0…` with a pointer head (the decision state against
    /// each candidate's span in the task observation) instead of the LM head's fixed rows, so
    /// that choosing an edit means reading the candidates, not remembering a position.
    pub pointer_head: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            layers: 2,
            heads: 4,
            mlp_ratio: 4,
            max_seq: 256,
            action_vocab: ActionVocab::Grammar,
            pointer_head: true,
        }
    }
}

/// How the engine samples actions during training rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    pub temperature: f64,
    pub top_p: f64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
        }
    }
}

/// Where the KL penalty to the frozen reference policy goes (ALGORITHMS.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlPlacement {
    /// `r_t -= β·k_t`, detached, flowing through the advantages (PPO-RLHF, RLOO, REINFORCE++).
    InReward,
    /// `+β·k_t` differentiated with the policy loss (GRPO).
    InLoss,
}

/// Level at which the importance ratio is taken (ALGORITHMS.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RatioLevel {
    Token,
    Sequence,
}

/// The algorithm and its knobs. `None` means "the preset's default"; [`Config::resolve`] fills
/// them in, and the run directory records the resolved values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlgorithmConfig {
    pub name: Algorithm,
    /// Symmetric clip ε; `eps_low`/`eps_high` override either side (DAPO clip-higher).
    pub clip_eps: Option<f64>,
    pub eps_low: Option<f64>,
    pub eps_high: Option<f64>,
    /// Dual-clip constant c > 1 (ALGORITHMS.md §3); `None` disables dual clip.
    pub dual_clip_c: Option<f64>,
    pub ratio_level: Option<RatioLevel>,
    pub kl_coef: Option<f64>,
    pub kl_estimator: Option<KlEstimator>,
    pub kl_placement: Option<KlPlacement>,
    /// Target KL of the adaptive controller (ALGORITHMS.md §11); `None` keeps β fixed.
    pub kl_target: Option<f64>,
    pub kl_horizon: Option<f64>,
    pub entropy_coef: Option<f64>,
    pub agg: Option<AggMode>,
    /// Optimizer passes over each rollout batch.
    pub epochs: Option<usize>,
    pub minibatches: Option<usize>,
    /// Recompute π_old with the trainer before the update instead of trusting the engine's
    /// sampling log-probs. Needed for a meaningful trust region when `epochs > 1`.
    pub old_logprob_pass: Option<bool>,
    /// Divide group-centred rewards by the group std (GRPO yes, Dr. GRPO no).
    pub std_normalize: Option<bool>,
    /// DAPO: drop groups whose rewards are all equal (they carry no signal).
    pub dynamic_sampling: Option<bool>,
    /// DAPO soft overlong punishment: the cache length L_cache in action tokens (§6);
    /// `None` disables it. L_max is `rollout.max_episode_action_tokens`.
    pub overlong_cache: Option<usize>,
    /// GAE (PPO only).
    pub gamma: Option<f64>,
    pub lam: Option<f64>,
    /// Value-loss weight and value clip ε_v (PPO only).
    pub value_coef: Option<f64>,
    pub value_clip: Option<f64>,
}

impl Default for AlgorithmConfig {
    fn default() -> Self {
        Self {
            name: Algorithm::Grpo,
            clip_eps: None,
            eps_low: None,
            eps_high: None,
            dual_clip_c: None,
            ratio_level: None,
            kl_coef: None,
            kl_estimator: None,
            kl_placement: None,
            kl_target: None,
            kl_horizon: None,
            entropy_coef: None,
            agg: None,
            epochs: None,
            minibatches: None,
            old_logprob_pass: None,
            std_normalize: None,
            dynamic_sampling: None,
            overlong_cache: None,
            gamma: None,
            lam: None,
            value_coef: None,
            value_clip: None,
        }
    }
}

/// Learning-rate schedule shape (ALGORITHMS.md does not prescribe one; these are the common three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    Linear,
    Cosine,
}

/// AdamW with decoupled weight decay, global grad-norm clipping and an LR schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip the global gradient L2 norm to this value; 0 disables clipping.
    pub grad_clip: f64,
    pub schedule: ScheduleKind,
    pub warmup_steps: usize,
    /// Floor of the linear/cosine decay as a fraction of `lr`.
    pub min_lr_ratio: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            grad_clip: 1.0,
            schedule: ScheduleKind::Constant,
            warmup_steps: 0,
            min_lr_ratio: 0.1,
        }
    }
}

/// How many episodes one training step collects, and their limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub split: String,
    pub tasks_per_step: usize,
    /// G: episodes per task, for the group baselines.
    pub group_size: usize,
    pub max_turns: usize,
    pub max_action_tokens: usize,
    /// Task folder to use instead of the built-in tasks.
    pub tasks_dir: Option<String>,
    /// Show each training episode the candidates in a fresh random order
    /// (`src/train/shuffle.rs`), so position carries no reward and the policy must read them.
    pub shuffle_candidates: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            split: "train".into(),
            tasks_per_step: 8,
            group_size: 8,
            max_turns: 4,
            max_action_tokens: 6,
            tasks_dir: None,
            shuffle_candidates: true,
        }
    }
}

/// The loop: length, seeds, threads, and how often it evaluates, checkpoints and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub steps: usize,
    pub seed: u64,
    /// Compute threads (rayon, which candle's CPU matmul uses); 0 = available parallelism.
    pub threads: usize,
    /// Evaluate the train split every N steps during training (0 = never).
    pub eval_every: usize,
    /// Write a checkpoint every N steps (0 = only at the end).
    pub checkpoint_every: usize,
    /// Write the sampled episodes of every N-th step to `episodes/` (0 = never).
    pub episodes_every: usize,
    /// Parent directory of run directories.
    pub runs_root: String,
    /// Run directory name; `None` = a timestamp.
    pub run_name: Option<String>,
    /// Stop early once the periodic train-split eval reaches this hidden solve rate (0 = never).
    pub stop_at_solve_rate: f64,
    /// The first N steps are format warm-up instead of RL: one supervised step each on
    /// demonstrations of well-formed calls with a random tool and a random candidate (so they
    /// teach the call syntax, never which edit is right). Counted in `steps`.
    pub format_warmup_steps: usize,
    /// Learning rate of the format warm-up steps (constant; `optim.lr` and its schedule take
    /// over for RL).
    pub format_warmup_lr: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 60,
            seed: 0,
            threads: 0,
            eval_every: 0,
            checkpoint_every: 20,
            episodes_every: 10,
            runs_root: "runs".into(),
            run_name: None,
            stop_at_solve_rate: 0.0,
            format_warmup_steps: 0,
            format_warmup_lr: 1e-2,
        }
    }
}

/// Which verdict becomes the training reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RewardKind {
    /// 1 if every hidden test passes (the verifier; cannot be gamed).
    Hidden,
    /// 1 if the workspace's public tests pass (trusts the workspace: hackable on purpose).
    Public,
    /// Fraction of hidden tests passed.
    Fraction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    pub kind: RewardKind,
    /// Subtracted from the score per malformed action.
    pub format_penalty: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        Self {
            kind: RewardKind::Hidden,
            format_penalty: 0.0,
        }
    }
}

/// Evaluation: samples per task for pass@k, and the decoding temperature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Samples per task (n of pass@k); pass@k is reported for k = this value.
    pub samples: usize,
    pub temperature: f64,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            samples: 4,
            temperature: 1.0,
        }
    }
}

/// `configs/default.toml`, compiled in: the base every config file is layered on, and the
/// whole config of `agentrl train` without `--config`.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../configs/default.toml");

/// Loads the config: `configs/default.toml` (built in), with the file at `path` layered on top
/// (tables merge key by key), then each `--set key.path=value` override (value parsed as TOML,
/// falling back to a string).
pub fn load_config(path: Option<&Path>, overrides: &[String]) -> anyhow::Result<Config> {
    let mut raw: toml::Table =
        toml::from_str(DEFAULT_CONFIG_TOML).context("parsing the built-in configs/default.toml")?;
    if let Some(path) = path {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        let layer: toml::Table =
            toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))?;
        merge_tables(&mut raw, layer);
    }
    for item in overrides {
        apply_override(&mut raw, item)?;
    }
    let config: Config = Config::deserialize(toml::Value::Table(raw)).map_err(|err| {
        let origin = path.map_or("configs/default.toml".into(), |p| p.display().to_string());
        anyhow::anyhow!("invalid config ({origin} with --set overrides): {err}")
    })?;
    Ok(config)
}

/// Parses a complete config file as written to a run directory (no layering).
pub fn parse_config_file(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Overlays `layer` onto `base`: nested tables merge, everything else replaces.
fn merge_tables(base: &mut toml::Table, layer: toml::Table) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(layer_inner)) => {
                merge_tables(inner, layer_inner)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Applies one `key.path=value` override to a raw TOML table.
///
/// Unknown keys are rejected by name here, before deserialisation, by checking the path
/// against the schema of the default config (every key of every section).
pub fn apply_override(raw: &mut toml::Table, item: &str) -> anyhow::Result<()> {
    let (key, value_text) = item
        .split_once('=')
        .with_context(|| format!("--set {item:?}: expected key.path=value"))?;
    let key = key.trim();
    let value_text = value_text.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {item:?}: empty component in key {key:?}");
    }
    check_key_exists(&parts).with_context(|| format!("--set {item:?}"))?;
    let value = parse_override_value(value_text);
    let (last, sections) = parts
        .split_last()
        .expect("split on '.' yields at least one part");
    let mut table = raw;
    for section in sections {
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .with_context(|| format!("--set {item:?}: `{section}` is not a table"))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// A value as TOML (`3`, `0.5`, `true`, `"x"`, `[1, 2]`), else the raw text as a string.
fn parse_override_value(text: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut table) => table
            .remove("v")
            .unwrap_or(toml::Value::String(text.into())),
        Err(_) => toml::Value::String(text.into()),
    }
}

/// Every `section.key` the schema knows, with `Option` knobs included.
fn schema_keys() -> Vec<(String, String)> {
    let mut keys = Vec::new();
    let default = toml::Value::try_from(Config::default()).expect("the default config serialises");
    if let toml::Value::Table(sections) = default {
        for (section, body) in sections {
            if let toml::Value::Table(fields) = body {
                for field in fields.keys() {
                    keys.push((section.clone(), field.clone()));
                }
            }
        }
    }
    // `Option` fields that default to `None` are absent from the serialised default.
    for field in OPTIONAL_KEYS {
        keys.push((field.0.to_string(), field.1.to_string()));
    }
    keys
}

/// Keys whose default is `None` (so they do not appear when the default is serialised).
const OPTIONAL_KEYS: &[(&str, &str)] = &[
    ("algorithm", "clip_eps"),
    ("algorithm", "eps_low"),
    ("algorithm", "eps_high"),
    ("algorithm", "dual_clip_c"),
    ("algorithm", "ratio_level"),
    ("algorithm", "kl_coef"),
    ("algorithm", "kl_estimator"),
    ("algorithm", "kl_placement"),
    ("algorithm", "kl_target"),
    ("algorithm", "kl_horizon"),
    ("algorithm", "entropy_coef"),
    ("algorithm", "agg"),
    ("algorithm", "epochs"),
    ("algorithm", "minibatches"),
    ("algorithm", "old_logprob_pass"),
    ("algorithm", "std_normalize"),
    ("algorithm", "dynamic_sampling"),
    ("algorithm", "overlong_cache"),
    ("algorithm", "gamma"),
    ("algorithm", "lam"),
    ("algorithm", "value_coef"),
    ("algorithm", "value_clip"),
    ("rollout", "tasks_dir"),
    ("train", "run_name"),
];

fn check_key_exists(parts: &[&str]) -> anyhow::Result<()> {
    let keys = schema_keys();
    match parts {
        [section, field] => {
            if keys.iter().any(|(s, f)| s == section && f == field) {
                Ok(())
            } else if keys.iter().any(|(s, _)| s == section) {
                let known: Vec<&str> = keys
                    .iter()
                    .filter(|(s, _)| s == section)
                    .map(|(_, f)| f.as_str())
                    .collect();
                bail!(
                    "unknown key `{section}.{field}`; `[{section}]` has: {}",
                    known.join(", ")
                )
            } else {
                bail!("unknown section `{section}` in key `{section}.{field}`")
            }
        }
        _ => bail!(
            "unknown key `{}`: keys are `section.field`, e.g. `optim.lr`",
            parts.join(".")
        ),
    }
}

/// The fully resolved knobs of the algorithm section: no `None` left where the trainer needs
/// a number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedAlgorithm {
    pub name: Algorithm,
    pub eps_low: f64,
    pub eps_high: f64,
    pub dual_clip_c: Option<f64>,
    pub ratio_level: RatioLevel,
    pub kl_coef: f64,
    pub kl_estimator: KlEstimator,
    pub kl_placement: KlPlacement,
    pub kl_target: Option<f64>,
    pub kl_horizon: f64,
    pub entropy_coef: f64,
    pub agg: AggMode,
    pub epochs: usize,
    pub minibatches: usize,
    pub old_logprob_pass: bool,
    pub std_normalize: bool,
    pub dynamic_sampling: bool,
    pub overlong_cache: Option<usize>,
    pub gamma: f64,
    pub lam: f64,
    pub value_coef: f64,
    pub value_clip: f64,
}

/// A problem found by [`Config::validate`]: errors stop the run, warnings are printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

impl Config {
    /// Fills every unset algorithm knob from the preset of `algorithm.name`.
    pub fn resolve(&self) -> ResolvedAlgorithm {
        let a = &self.algorithm;
        let preset = a.name.preset();
        let clip = a.clip_eps.unwrap_or(preset.clip_eps);
        ResolvedAlgorithm {
            name: a.name,
            eps_low: a.eps_low.unwrap_or(if a.clip_eps.is_some() {
                clip
            } else {
                preset.eps_low
            }),
            eps_high: a.eps_high.unwrap_or(if a.clip_eps.is_some() {
                clip
            } else {
                preset.eps_high
            }),
            dual_clip_c: a.dual_clip_c.or(preset.dual_clip_c),
            ratio_level: a.ratio_level.unwrap_or(preset.ratio_level),
            kl_coef: a.kl_coef.unwrap_or(preset.kl_coef),
            kl_estimator: a.kl_estimator.unwrap_or(preset.kl_estimator),
            kl_placement: a.kl_placement.unwrap_or(preset.kl_placement),
            kl_target: a.kl_target,
            kl_horizon: a.kl_horizon.unwrap_or(10_000.0),
            entropy_coef: a.entropy_coef.unwrap_or(preset.entropy_coef),
            agg: a.agg.unwrap_or(preset.agg),
            epochs: a.epochs.unwrap_or(preset.epochs),
            minibatches: a.minibatches.unwrap_or(preset.minibatches),
            old_logprob_pass: a.old_logprob_pass.unwrap_or(preset.old_logprob_pass),
            std_normalize: a.std_normalize.unwrap_or(preset.std_normalize),
            dynamic_sampling: a.dynamic_sampling.unwrap_or(preset.dynamic_sampling),
            overlong_cache: a.overlong_cache.or(preset.overlong_cache),
            gamma: a.gamma.unwrap_or(preset.gamma),
            lam: a.lam.unwrap_or(preset.lam),
            value_coef: a.value_coef.unwrap_or(preset.value_coef),
            value_clip: a.value_clip.unwrap_or(preset.value_clip),
        }
    }

    /// The config with every algorithm knob written out, as stored in the run directory.
    pub fn resolved_config(&self) -> Config {
        let r = self.resolve();
        let mut out = self.clone();
        out.algorithm = AlgorithmConfig {
            name: r.name,
            clip_eps: None,
            eps_low: Some(r.eps_low),
            eps_high: Some(r.eps_high),
            dual_clip_c: r.dual_clip_c,
            ratio_level: Some(r.ratio_level),
            kl_coef: Some(r.kl_coef),
            kl_estimator: Some(r.kl_estimator),
            kl_placement: Some(r.kl_placement),
            kl_target: r.kl_target,
            kl_horizon: Some(r.kl_horizon),
            entropy_coef: Some(r.entropy_coef),
            agg: Some(r.agg),
            epochs: Some(r.epochs),
            minibatches: Some(r.minibatches),
            old_logprob_pass: Some(r.old_logprob_pass),
            std_normalize: Some(r.std_normalize),
            dynamic_sampling: Some(r.dynamic_sampling),
            overlong_cache: r.overlong_cache,
            gamma: Some(r.gamma),
            lam: Some(r.lam),
            value_coef: Some(r.value_coef),
            value_clip: Some(r.value_clip),
        };
        out
    }

    /// Checks sizes and knob combinations. Errors are combinations that cannot be what the
    /// user means; warnings are ones that some users do mean.
    pub fn validate(&self) -> Validation {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let a = &self.algorithm;
        let r = self.resolve();
        let name = a.name.as_str();

        if r.ratio_level == RatioLevel::Token && a.name == Algorithm::Gspo {
            errors.push(
                "algorithm.name = \"gspo\" with algorithm.ratio_level = \"token\": GSPO's ratio is \
                 the length-normalised sequence ratio (ALGORITHMS.md §9); use ratio_level = \
                 \"sequence\" or another algorithm"
                    .into(),
            );
        }
        if r.ratio_level == RatioLevel::Sequence && a.name != Algorithm::Gspo {
            errors.push(format!(
                "algorithm.ratio_level = \"sequence\" is only implemented by gspo, not {name}"
            ));
        }
        if r.epochs > 1 && !r.old_logprob_pass {
            errors.push(format!(
                "algorithm.epochs = {} without algorithm.old_logprob_pass = true: later epochs \
                 would take their ratio against the engine's sampling log-probs, not the policy \
                 before the update; set old_logprob_pass = true",
                r.epochs
            ));
        }
        if r.dynamic_sampling && self.rollout.group_size < 2 {
            errors.push(format!(
                "algorithm.dynamic_sampling with rollout.group_size = {}: every group of one \
                 has all-equal rewards, so every group would be dropped",
                self.rollout.group_size
            ));
        }
        if a.value_coef.is_some_and(|c| c != 0.0) && a.name != Algorithm::Ppo {
            errors.push(format!(
                "algorithm.value_coef is set but {name} has no critic; only ppo trains the value \
                 head"
            ));
        }
        if (a.gamma.is_some() || a.lam.is_some() || a.value_clip.is_some())
            && a.name != Algorithm::Ppo
        {
            warnings.push(format!(
                "algorithm.gamma / lam / value_clip are GAE knobs; {name} ignores them"
            ));
        }
        if r.eps_high < r.eps_low && a.name != Algorithm::Cispo {
            errors.push(format!(
                "algorithm.eps_high ({}) < algorithm.eps_low ({}): clip-higher raises the upper \
                 bound; did you swap them?",
                r.eps_high, r.eps_low
            ));
        }
        if !(0.0..=1.0).contains(&r.eps_low) || r.eps_high < 0.0 {
            errors.push(format!(
                "algorithm.eps_low = {} must lie in [0, 1] and eps_high must be >= 0",
                r.eps_low
            ));
        }
        if let Some(c) = r.dual_clip_c {
            if c <= 1.0 {
                errors.push(format!("algorithm.dual_clip_c = {c} must be > 1 (§3)"));
            }
        }
        if a.name == Algorithm::Gspo && r.dual_clip_c.is_some() {
            warnings.push("algorithm.dual_clip_c is ignored by gspo".into());
        }
        if r.kl_coef < 0.0 {
            errors.push(format!("algorithm.kl_coef = {} must be >= 0", r.kl_coef));
        }
        if r.kl_target.is_some() && r.kl_coef == 0.0 {
            warnings.push(
                "algorithm.kl_target set with kl_coef = 0: the adaptive controller scales β \
                 multiplicatively and cannot move it away from 0"
                    .into(),
            );
        }
        if r.kl_placement == KlPlacement::InLoss
            && r.kl_estimator == KlEstimator::K1
            && r.kl_coef > 0.0
        {
            warnings.push(
                "KL k1 in the loss has a zero-mean gradient on-policy and does not regularise \
                 (ALGORITHMS.md §11); k3 or k2 is what you probably want"
                    .into(),
            );
        }
        if r.minibatches == 0 || r.epochs == 0 {
            errors.push("algorithm.epochs and algorithm.minibatches must be >= 1".into());
        }
        let episodes = self.rollout.tasks_per_step * self.rollout.group_size;
        if r.minibatches > episodes.max(1) {
            errors.push(format!(
                "algorithm.minibatches = {} exceeds the {episodes} episodes of a step",
                r.minibatches
            ));
        }
        if r.epochs == 1 && r.minibatches == 1 && r.old_logprob_pass && a.name != Algorithm::Ppo {
            warnings.push(
                "algorithm.old_logprob_pass with one epoch and one minibatch: the ratio is 1 \
                 anyway; the pass only measures engine/trainer mismatch"
                    .into(),
            );
        }
        if a.name == Algorithm::Ppo && r.value_coef == 0.0 {
            warnings.push("ppo with value_coef = 0: the critic never learns".into());
        }
        if self.rollout.group_size == 0 || self.rollout.tasks_per_step == 0 {
            errors.push("rollout.group_size and rollout.tasks_per_step must be >= 1".into());
        }
        if self.rollout.group_size == 1 && a.name.uses_group_baseline() {
            warnings.push(format!(
                "rollout.group_size = 1 with {name}: a group baseline of one episode gives \
                 zero advantage"
            ));
        }
        if a.name == Algorithm::Rloo && self.rollout.group_size < 2 {
            errors.push("rloo needs rollout.group_size >= 2 (leave-one-out)".into());
        }
        if self.rollout.max_turns == 0 || self.rollout.max_action_tokens == 0 {
            errors.push("rollout.max_turns and rollout.max_action_tokens must be >= 1".into());
        }
        if self.sampling.temperature.is_nan() || self.sampling.temperature <= 0.0 {
            errors.push("sampling.temperature must be > 0".into());
        }
        if !(self.sampling.top_p > 0.0 && self.sampling.top_p <= 1.0) {
            errors.push("sampling.top_p must lie in (0, 1]".into());
        }
        if !self.optim.lr.is_finite() || self.optim.lr <= 0.0 {
            errors.push(format!(
                "optim.lr = {} must be a positive number",
                self.optim.lr
            ));
        }
        if !(0.0..1.0).contains(&self.optim.beta1) || !(0.0..1.0).contains(&self.optim.beta2) {
            errors.push("optim.beta1 and optim.beta2 must lie in [0, 1)".into());
        }
        if self.optim.grad_clip < 0.0 {
            errors.push("optim.grad_clip must be >= 0 (0 disables clipping)".into());
        }
        if self.model.heads == 0 || !super::every(self.model.d_model, self.model.heads) {
            errors.push(format!(
                "model.d_model = {} must be a multiple of model.heads = {}",
                self.model.d_model, self.model.heads
            ));
        }
        if self.eval.samples == 0 {
            errors.push("eval.samples must be >= 1".into());
        }
        if self.train.steps == 0 {
            errors.push("train.steps must be >= 1".into());
        }
        if self.train.format_warmup_steps > 0 && self.train.format_warmup_steps >= self.train.steps
        {
            errors.push(format!(
                "train.format_warmup_steps = {} leaves no RL steps of train.steps = {}",
                self.train.format_warmup_steps, self.train.steps
            ));
        }
        if !(self.train.format_warmup_lr > 0.0 && self.train.format_warmup_lr.is_finite()) {
            errors.push(format!(
                "train.format_warmup_lr must be > 0, got {}",
                self.train.format_warmup_lr
            ));
        }
        Validation { errors, warnings }
    }

    /// [`Config::validate`], failing on the first error list and returning the warnings.
    pub fn validated(&self) -> anyhow::Result<Vec<String>> {
        let v = self.validate();
        if !v.errors.is_empty() {
            bail!("invalid config:\n  - {}", v.errors.join("\n  - "));
        }
        Ok(v.warnings)
    }

    /// Thread count after resolving `0` to the machine's available parallelism.
    pub fn threads(&self) -> usize {
        if self.train.threads > 0 {
            self.train.threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    pub fn to_toml(&self) -> anyhow::Result<String> {
        toml::to_string_pretty(self).context("serialising the config as TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(sets: &[&str]) -> anyhow::Result<Config> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_config(None, &sets)
    }

    fn errors_of(sets: &[&str]) -> Vec<String> {
        with(sets).expect("config loads").validate().errors
    }

    #[test]
    fn every_shipped_config_loads_and_validates() -> anyhow::Result<()> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut seen = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let config = load_config(Some(&path), &[])?;
            let v = config.validate();
            assert!(v.errors.is_empty(), "{}: {:?}", path.display(), v.errors);
            // The resolved config round-trips through TOML unchanged.
            let resolved = config.resolved_config();
            let back: Config = toml::from_str(&resolved.to_toml()?)?;
            assert_eq!(back, resolved, "{}", path.display());
            assert_eq!(back.resolve(), config.resolve());
            seen.push(config.algorithm.name);
        }
        for algorithm in crate::algo::ALL {
            assert!(seen.contains(&algorithm), "no config file for {algorithm}");
        }
        Ok(())
    }

    #[test]
    fn overrides_parse_values_as_toml_or_strings() -> anyhow::Result<()> {
        let c = with(&[
            "optim.lr=0.01",
            "rollout.group_size=3",
            "algorithm.name=ppo",
            "algorithm.agg=\"token-mean\"",
            "train.run_name=my-run",
            "optim.schedule=cosine",
        ])?;
        assert_eq!(c.optim.lr, 0.01);
        assert_eq!(c.rollout.group_size, 3);
        assert_eq!(c.algorithm.name, Algorithm::Ppo);
        assert_eq!(c.algorithm.agg, Some(AggMode::TokenMean));
        assert_eq!(c.train.run_name.as_deref(), Some("my-run"));
        assert_eq!(c.optim.schedule, ScheduleKind::Cosine);
        Ok(())
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = with(&["optim.lrr=1"]).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("optim.lrr") && msg.contains("lr"), "{msg}");
        let err = with(&["optimizer.lr=1"]).unwrap_err();
        assert!(format!("{err:#}").contains("optimizer"), "{err:#}");
        let err = with(&["lr=1"]).unwrap_err();
        assert!(format!("{err:#}").contains("`lr`"), "{err:#}");
        let err = with(&["optim.lr"]).unwrap_err();
        assert!(format!("{err:#}").contains("key.path=value"), "{err:#}");
        let err = with(&["algorithm.name=sarsa"]).unwrap_err();
        assert!(format!("{err:#}").contains("sarsa"), "{err:#}");
        let err = with(&["rollout.group_size=many"]).unwrap_err();
        assert!(format!("{err:#}").contains("group_size"), "{err:#}");
    }

    #[test]
    fn a_config_file_with_an_unknown_key_is_rejected() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[optim]\nlearning_rate = 1.0\n")?;
        let err = load_config(Some(&path), &[]).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("learning_rate") && msg.contains("bad.toml"),
            "{msg}"
        );
        Ok(())
    }

    #[test]
    fn nonsense_knob_combinations_are_errors() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["algorithm.name=gspo", "algorithm.ratio_level=token"],
                "GSPO's ratio",
            ),
            (
                &["algorithm.name=ppo", "algorithm.old_logprob_pass=false"],
                "old_logprob_pass",
            ),
            (&["algorithm.epochs=3"], "old_logprob_pass"),
            (
                &["algorithm.name=dapo", "rollout.group_size=1"],
                "dynamic_sampling",
            ),
            (&["algorithm.value_coef=0.5"], "no critic"),
            (
                &["algorithm.eps_low=0.3", "algorithm.eps_high=0.2"],
                "eps_high",
            ),
            (&["algorithm.dual_clip_c=0.5"], "dual_clip_c"),
            (
                &["algorithm.ratio_level=sequence"],
                "only implemented by gspo",
            ),
            (&["algorithm.name=rloo", "rollout.group_size=1"], "rloo"),
            (&["model.d_model=30", "model.heads=4"], "multiple"),
            (&["train.format_warmup_steps=60"], "no RL steps"),
            (&["sampling.top_p=0"], "top_p"),
        ];
        for (sets, needle) in cases {
            let errors = errors_of(sets);
            assert!(
                errors.iter().any(|e| e.contains(needle)),
                "{sets:?}: expected an error containing {needle:?}, got {errors:?}"
            );
        }
        assert!(with(&["algorithm.epochs=3"]).unwrap().validated().is_err());
    }

    #[test]
    fn questionable_combinations_are_warnings() {
        let c = with(&["algorithm.kl_coef=0.1", "algorithm.kl_estimator=k1"]).unwrap();
        let v = c.validate();
        assert!(v.errors.is_empty(), "{:?}", v.errors);
        assert!(
            v.warnings.iter().any(|w| w.contains("k1")),
            "{:?}",
            v.warnings
        );
        let v = with(&["algorithm.lam=0.9"]).unwrap().validate();
        assert!(
            v.warnings.iter().any(|w| w.contains("GAE")),
            "{:?}",
            v.warnings
        );
    }

    #[test]
    fn resolution_fills_preset_values_and_respects_overrides() {
        let dapo = with(&["algorithm.name=dapo"]).unwrap().resolve();
        assert_eq!((dapo.eps_low, dapo.eps_high), (0.2, 0.28));
        assert!(dapo.dynamic_sampling);
        assert_eq!(dapo.agg, AggMode::TokenMean);
        // A symmetric clip_eps overrides both sides of the preset.
        let r = with(&["algorithm.name=dapo", "algorithm.clip_eps=0.1"])
            .unwrap()
            .resolve();
        assert_eq!((r.eps_low, r.eps_high), (0.1, 0.1));
        let ppo = with(&["algorithm.name=ppo"]).unwrap().resolve();
        assert!(ppo.old_logprob_pass && ppo.value_coef > 0.0 && ppo.epochs > 1);
    }
}
