//! Loading a config: `configs/default.toml` (compiled in), a file layered on it, then
//! `--set section.key=value` overrides, each checked as it is applied so an error names the
//! file or the override at fault.

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use super::schema::{
    AlgorithmConfig, Config, DistillConfig, DpoConfig, EvalConfig, ModelConfig, OptimConfig,
    RftConfig, RolloutConfig, SftConfig, TrainConfig,
};

/// `configs/default.toml`: the base every config file is layered on, the whole config of
/// `agentrl train` without `--config`, and the one source of every default.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../../../configs/default.toml");

impl Config {
    /// The built-in default config (`configs/default.toml`).
    pub fn builtin() -> anyhow::Result<Self> {
        load_config(None, &[])
    }
}

impl Default for Config {
    /// [`Config::builtin`]. The built-in file is compiled in and a test loads it, so this
    /// cannot fail at run time.
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Config::builtin().expect("the built-in configs/default.toml is a valid config")
    }
}

fn default_table() -> anyhow::Result<toml::Table> {
    toml::from_str(DEFAULT_CONFIG_TOML).context("parsing the built-in configs/default.toml")
}

/// Loads the config: the built-in default, with the file at `path` layered on top (tables
/// merge key by key; a file that names another algorithm starts from that algorithm's preset,
/// not from the default's knobs), then each `--set key.path=value` override (value parsed as
/// TOML, falling back to a string).
pub fn load_config(path: Option<&Path>, overrides: &[String]) -> anyhow::Result<Config> {
    let layer = match path {
        Some(path) => Some((
            std::fs::read_to_string(path)
                .with_context(|| format!("reading config {}", path.display()))?,
            path.display().to_string(),
        )),
        None => None,
    };
    let layer = layer
        .as_ref()
        .map(|(text, origin)| (text.as_str(), origin.as_str()));
    load_config_text(layer, overrides)
}

/// [`load_config`] with the layer given as text and the name an error calls it by
/// (`(text, origin)`): a preset compiled into a binary layers as its file would.
pub fn load_config_text(
    layer: Option<(&str, &str)>,
    overrides: &[String],
) -> anyhow::Result<Config> {
    let mut raw = default_table()?;
    let sections: Vec<String> = raw.keys().cloned().collect();
    if let Some((text, origin)) = layer {
        let layer: toml::Table =
            toml::from_str(text).with_context(|| format!("parsing config {origin}"))?;
        merge_layer(&mut raw, layer);
        for section in raw.keys() {
            check_section(&raw, section, &sections)
                .with_context(|| format!("invalid config {origin}"))?;
        }
    }
    for item in overrides {
        let section = apply_override(&mut raw, item)?;
        check_section(&raw, &section, &sections).with_context(|| format!("--set {item}"))?;
    }
    from_table(
        raw,
        layer.map_or("configs/default.toml".into(), |(_, origin)| {
            origin.to_string()
        }),
    )
}

/// Parses a complete config file as written to a run directory (no layering: every key must
/// be there, so a truncated file is an error that names it).
pub fn parse_config_file(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let raw: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    from_table(raw, path.display().to_string())
}

fn from_table(raw: toml::Table, origin: String) -> anyhow::Result<Config> {
    let mut config = Config::deserialize(toml::Value::Table(raw))
        .map_err(|err| anyhow::anyhow!("invalid config ({origin}): {err}"))?;
    config.correct_stale_rollouts();
    Ok(config)
}

impl Config {
    /// Asynchronous rollouts (`engine.async_rollouts` with `max_staleness >= 1`) are trained
    /// on up to `max_staleness` versions old. Unless the config chose a correction
    /// (`algorithm.rollout_is` / `rollout_rs`, or `bypass_mode`), this applies decoupled PPO
    /// (ALGORITHMS.md §13): the trainer's own π_old from an old-log-prob pass anchors the
    /// trust region, and token-level truncated IS weights π_old/π_rollout (at
    /// `rollout_is_threshold`, verl's 2.0 by default) correct for the stale behaviour policy.
    /// [`Config::validate`] warns when it did. Idempotent: a run's resolved config keeps it.
    pub fn correct_stale_rollouts(&mut self) {
        if !self.stale_rollouts_uncorrected() {
            return;
        }
        let knobs = &mut self.algorithm.knobs;
        knobs.rollout_is = Some(agentrl_rl::IsLevel::Token);
        knobs.old_logprob_pass = true;
    }

    /// Whether rollouts may be stale and the config names no correction for them.
    fn stale_rollouts_uncorrected(&self) -> bool {
        let knobs = &self.algorithm.knobs;
        self.engine.async_rollouts
            && self.engine.max_staleness >= 1
            && !knobs.corrects_rollouts()
            && !knobs.bypass_mode
    }
}

/// Deserialises one section on its own, so an error can name the section.
fn check_section(raw: &toml::Table, section: &str, known: &[String]) -> anyhow::Result<()> {
    if !known.iter().any(|k| k == section) {
        bail!(
            "unknown section `[{section}]`; the sections are {}",
            known.join(", ")
        );
    }
    let Some(value) = raw.get(section).cloned() else {
        return Ok(());
    };
    let result = match section {
        "model" => ModelConfig::deserialize(value).map(drop),
        "sampling" => agentrl_engine::SamplingParams::deserialize(value).map(drop),
        "algorithm" => AlgorithmConfig::deserialize(value).map(drop),
        "optim" => OptimConfig::deserialize(value).map(drop),
        "rollout" => RolloutConfig::deserialize(value).map(drop),
        "train" => TrainConfig::deserialize(value).map(drop),
        "reward" => agentrl_gym::RewardFn::deserialize(value).map(drop),
        "eval" => EvalConfig::deserialize(value).map(drop),
        "sft" => SftConfig::deserialize(value).map(drop),
        "rft" => RftConfig::deserialize(value).map(drop),
        "dpo" => DpoConfig::deserialize(value).map(drop),
        "distill" => DistillConfig::deserialize(value).map(drop),
        _ => Ok(()),
    };
    result.map_err(|e| anyhow::anyhow!("[{section}]: {e}"))
}

/// Overlays `layer` onto `base`: nested tables merge, everything else replaces. An
/// `[algorithm]` layer that names an algorithm replaces the whole section, so the knobs of
/// one preset never leak into another.
fn merge_layer(base: &mut toml::Table, layer: toml::Table) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(_)), toml::Value::Table(layer_inner))
                if key == "algorithm" && layer_inner.contains_key("name") =>
            {
                base.insert(key, toml::Value::Table(layer_inner));
            }
            (Some(toml::Value::Table(inner)), toml::Value::Table(layer_inner)) => {
                merge_layer(inner, layer_inner)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Applies one `section.key=value` override to a raw TOML table; returns the section.
pub fn apply_override(raw: &mut toml::Table, item: &str) -> anyhow::Result<String> {
    let (key, value_text) = item
        .split_once('=')
        .with_context(|| format!("--set {item:?}: expected key.path=value"))?;
    let key = key.trim();
    let value_text = value_text.trim();
    let parts: Vec<&str> = key.split('.').collect();
    let [section, field] = parts.as_slice() else {
        bail!("--set {item:?}: unknown key `{key}`: keys are `section.field`, e.g. `optim.lr`");
    };
    if section.is_empty() || field.is_empty() {
        bail!("--set {item:?}: empty component in key {key:?}");
    }
    let value = parse_override_value(value_text);
    let table = raw
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .with_context(|| format!("--set {item:?}: `{section}` is not a table"))?;
    if *section == "algorithm" && *field == "name" {
        // A new algorithm starts from its own preset: earlier knob overrides of another
        // preset are dropped, as when a config file names the algorithm.
        table.clear();
    }
    table.insert(field.to_string(), value);
    Ok(section.to_string())
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

/// The keys `--resume` may change: how long the run goes on, how it evaluates, logs and
/// checkpoints, where its episodes run (gym servers move between a crash and a resume,
/// and a run over servers samples what it samples in process), and whether the local engine
/// multiplies on the CPU's AMX unit (`engine.cpu_matmul`: a run may resume on a machine
/// without one, and the switch moves the engine's log-probs by ~1e-4, well inside what the
/// preflight and `update.engine_logprob_gap` already watch), and whether it records that gap
/// (`engine.measure_mismatch`: a measurement, not a change to the update). Everything else shapes what
/// the run has trained on so far, so changing it mid-run would make the run a mix of two
/// configs.
pub const RESUMABLE_KEYS: &[&str] = &[
    "engine.cpu_matmul",
    "engine.measure_mismatch",
    "gym.endpoints",
    "gym.max_in_flight",
    "gym.timeout_s",
    "gym.retries",
    "gym.backoff_s",
    "train.steps",
    "train.eval_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.episodes_every",
    "train.stop_at_solve_rate",
    "train.doctor",
    "train.dashboard_every",
    "eval.samples",
    "eval.temperature",
];

/// One `--set` applied on `--resume`: a line of the run's `config_changes.jsonl`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConfigChange {
    /// The step the run was resumed at.
    pub at_step: usize,
    pub key: String,
    /// The values as TOML.
    pub from: String,
    pub to: String,
}

/// Applies `--set` overrides to a run's stored config (read from `origin`) for `--resume`:
/// only [`RESUMABLE_KEYS`]; any other key is refused with the reason. Returns the new config
/// and the changes (`at_step` left 0 for the caller to fill); a `--set` that repeats the
/// stored value is no change.
pub fn apply_resume_overrides(
    config: &Config,
    origin: &Path,
    overrides: &[String],
) -> anyhow::Result<(Config, Vec<ConfigChange>)> {
    if overrides.is_empty() {
        return Ok((config.clone(), Vec::new()));
    }
    let mut raw: toml::Table = toml::from_str(&config.to_toml()?)
        .with_context(|| format!("re-reading the config of {}", origin.display()))?;
    let before = raw.clone();
    let mut keys = Vec::new();
    for item in overrides {
        let key = item
            .split_once('=')
            .map_or(item.as_str(), |(k, _)| k)
            .trim();
        if !RESUMABLE_KEYS.contains(&key) {
            bail!(
                "--set {item}: `{key}` cannot change on --resume: it shapes what the run has \
                 trained on so far ({}). A resume may change {}; start a new run for \
                 anything else",
                origin.display(),
                RESUMABLE_KEYS.join(", ")
            );
        }
        let section = apply_override(&mut raw, item)?;
        check_section(&raw, &section, std::slice::from_ref(&section))
            .with_context(|| format!("--set {item}"))?;
        if !keys.contains(&key.to_string()) {
            keys.push(key.to_string());
        }
    }
    let value_of = |table: &toml::Table, key: &str| -> String {
        let (section, field) = key.split_once('.').unwrap_or((key, ""));
        table
            .get(section)
            .and_then(|s| s.get(field))
            .map_or("(unset)".to_string(), |v| v.to_string())
    };
    let changes = keys
        .iter()
        .map(|key| ConfigChange {
            at_step: 0,
            key: key.clone(),
            from: value_of(&before, key),
            to: value_of(&raw, key),
        })
        .filter(|c| c.from != c.to)
        .collect();
    let config = from_table(raw, format!("{} with --set", origin.display()))?;
    Ok((config, changes))
}
