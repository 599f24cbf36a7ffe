//! The presets of `configs/`, compiled into the binary (as `configs/default.toml` is, in
//! `agentrl_train::config`), so that `--config ppo` works from any directory with the
//! installed binary alone; and the one rule every `--config` follows:
//!
//! 1. a file that exists is read (a path always wins, so a preset can be copied and edited);
//! 2. else a preset's name (`ppo`, `smollm2`) is that preset;
//! 3. else a path to a preset's file that is not here (`configs/ppo.toml` outside the
//!    checkout) is the compiled-in preset of that name, and stderr says so;
//! 4. else an error that lists the presets.
//!
//! Model shapes (`configs/models/*.json`, for `agentrl plan --model-config`) follow the same
//! rule with their own list.
//!
//! Where it sits: before the config is loaded (task → episode → … starts from it).

use std::path::{Path, PathBuf};

use anyhow::bail;

use agentrl_train::config::{load_config, load_config_text, Config};

/// `(name, text)` of each `configs/NAME.toml`.
macro_rules! presets {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../configs/", $name, ".toml")))),*]
    };
}

/// Every preset in `configs/` (a test checks that the list and the folder agree).
pub const PRESETS: &[(&str, &str)] = presets![
    "default",
    "grpo",
    "ppo",
    "dapo",
    "dr_grpo",
    "gspo",
    "sapo",
    "cispo",
    "clip_cov",
    "kl_cov",
    "gpg",
    "geo_mean",
    "grpo_passk",
    "dro",
    "gdpo",
    "opo",
    "remax",
    "rloo",
    "reinforce_pp",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "dppo_kl",
    "dppo_tv",
    "bypass_pg_is",
    "bypass_ppo_clip_k3_rs",
    "qwen3-0.6b-grpo",
    "qwen3-8b-grpo",
    "smollm2",
];

/// Every model shape in `configs/models/` (`agentrl plan --model-config NAME`).
pub const MODEL_PRESETS: &[(&str, &str)] = &[(
    "qwen3-8b",
    include_str!("../../configs/models/qwen3-8b.json"),
)];

/// The help line of every `--config`.
pub const CONFIG_HELP: &str = "A preset's name (e.g. `ppo`, `dapo`, `smollm2`: the \
    files of configs/, compiled in) or a TOML file, layered on the default config; omit for \
    the default run. A path that does not exist but names a preset (`configs/ppo.toml` outside \
    the checkout) uses the compiled-in preset and says so on stderr. An unknown name lists the \
    presets.";

/// What a `--config` value names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file to read.
    File(PathBuf),
    /// A compiled-in preset: its name and text.
    Preset(&'static str, &'static str),
}

/// Resolves a `--config` value against `list` (see the module doc for the rule); `what`
/// names the list in messages (`preset`, `model shape`), `ext` its files' extension.
fn resolve_in(
    value: &Path,
    list: &'static [(&'static str, &'static str)],
    what: &str,
    ext: &str,
) -> anyhow::Result<Source> {
    if value.is_file() {
        return Ok(Source::File(value.to_path_buf()));
    }
    let find = |name: &str| list.iter().find(|(n, _)| *n == name).copied();
    let text = value.to_string_lossy();
    if let Some((name, body)) = find(&text) {
        return Ok(Source::Preset(name, body));
    }
    let names = list.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let stem = value.file_stem().map(|s| s.to_string_lossy().into_owned());
    let has_ext = value.extension().is_some_and(|e| e == ext);
    if let (true, Some((name, body))) = (has_ext, stem.as_deref().and_then(find)) {
        eprintln!(
            "{}: no such file here; using the built-in {what} `{name}` (the same file, \
             compiled in)",
            value.display()
        );
        return Ok(Source::Preset(name, body));
    }
    if value.exists() {
        bail!("{} is not a file", value.display());
    }
    bail!(
        "{}: no such file, and no {what} of that name; the {what}s are {names}",
        value.display()
    )
}

/// What a `--config` value names: a file or a preset of `configs/`.
pub fn resolve(value: &Path) -> anyhow::Result<Source> {
    resolve_in(value, PRESETS, "preset", "toml")
}

/// The config of `--config` (a preset or a file; none: the default) with the `--set`
/// overrides.
pub fn load(config: Option<&Path>, overrides: &[String]) -> anyhow::Result<Config> {
    match config.map(resolve).transpose()? {
        None => load_config(None, overrides),
        Some(Source::File(path)) => load_config(Some(&path), overrides),
        Some(Source::Preset(name, text)) => {
            load_config_text(Some((text, &format!("preset {name}"))), overrides)
        }
    }
}

/// What a `--model-config` value names: a `config.json` file, or a shape of
/// `configs/models/` (`qwen3-8b`).
pub fn resolve_model_config(value: &Path) -> anyhow::Result<Source> {
    resolve_in(value, MODEL_PRESETS, "model shape", "json")
}
