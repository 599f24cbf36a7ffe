//! The run configuration: one TOML file (`configs/*.toml`) plus `--set key.path=value`
//! overrides, layered on `configs/default.toml`.
//!
//! Data flow: `configs/X.toml` → [`load::load_config`] (layering; each override checked as it
//! is applied, so an unknown key is reported by name with the valid keys) → [`Config`], whose
//! `[algorithm]` section is the preset's [`crate::algo::Knobs`] with the user's keys merged on
//! top → [`Config::validate`] (errors and warnings) → the trainer, which writes
//! [`Config::to_toml`] (every knob written out) into the run directory.

pub mod load;
pub mod schema;
pub mod validate;

pub use load::{
    apply_override, apply_resume_overrides, load_config, load_config_text, parse_config_file,
    ConfigChange, DEFAULT_CONFIG_TOML, RESUMABLE_KEYS,
};
pub use schema::{
    AlgorithmConfig, Config, DistillConfig, DpoConfig, EngineConfig, EngineKind, EvalConfig,
    ModelConfig, ModelKind, OptimConfig, Qwen3Settings, RftConfig, RolloutConfig, ScheduleKind,
    SftConfig, TrainConfig, WarmupData,
};
pub use validate::Validation;
