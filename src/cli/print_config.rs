//! `--print-config`: the resolved config as TOML with every knob written out, the optional
//! ones that are unset too (`# kl_target = (unset)`, a comment in its own table), so that the
//! page lists what can be set and still loads back as the same config.
//!
//! Where it sits: beside `agentrl train`, before anything runs. TOML has no null, and the
//! config skips an unset `Option` when it is serialised, so the names of a section's fields
//! come from its type: [`field_names`] asks a type's `Deserialize` which fields it expects.

use serde::de::{self, Deserialize, Visitor};

use agentrl_train::algo::Knobs;
use agentrl_train::config::{
    Config, DistillConfig, DpoConfig, EngineConfig, EvalConfig, ModelConfig, OptimConfig,
    Qwen3Settings, RftConfig, RolloutConfig, SftConfig, TrainConfig,
};

/// The error that carries the field names out of `deserialize_struct`.
#[derive(Debug)]
struct Fields(&'static [&'static str]);

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for Fields {}

impl de::Error for Fields {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Fields(&[])
    }
}

/// A deserializer that answers a struct's request with its list of fields, and nothing else.
struct Recorder;

impl<'de> de::Deserializer<'de> for Recorder {
    type Error = Fields;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
        Err(Fields(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Fields> {
        Err(Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The fields a struct's `Deserialize` expects (empty for anything else).
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(Recorder) {
        Err(Fields(fields)) => fields,
        Ok(_) => &[],
    }
}

/// The keys of a config section (`[algorithm]`: `name` and the knobs).
fn section_keys(section: &str) -> Option<Vec<&'static str>> {
    let keys = match section {
        "model" => field_names::<ModelConfig>(),
        "qwen3" => field_names::<Qwen3Settings>(),
        "engine" => field_names::<EngineConfig>(),
        "sampling" => field_names::<agentrl_engine::SamplingParams>(),
        "algorithm" => {
            let mut keys = vec!["name"];
            keys.extend(field_names::<Knobs>());
            return Some(keys);
        }
        "optim" => field_names::<OptimConfig>(),
        "rollout" => field_names::<RolloutConfig>(),
        "train" => field_names::<TrainConfig>(),
        "reward" => field_names::<agentrl_gym::RewardFn>(),
        "gym" => field_names::<agentrl_gym::service::FleetConfig>(),
        "eval" => field_names::<EvalConfig>(),
        "sft" => field_names::<SftConfig>(),
        "rft" => field_names::<RftConfig>(),
        "dpo" => field_names::<DpoConfig>(),
        "distill" => field_names::<DistillConfig>(),
        _ => return None,
    };
    Some(keys.to_vec())
}

/// The config's sections, from its type.
pub fn sections() -> &'static [&'static str] {
    field_names::<Config>()
}

/// Every section has its list of keys (a new section must be added to [`section_keys`]).
#[cfg(test)]
pub fn sections_without_keys() -> Vec<&'static str> {
    sections()
        .iter()
        .copied()
        .filter(|s| section_keys(s).is_none_or(|k| k.is_empty()))
        .collect()
}

/// The resolved config as TOML with each unset optional knob as a comment in its table.
pub fn with_unset_knobs(config: &Config) -> anyhow::Result<String> {
    let text = config.to_toml()?;
    // The keys written, per section (the JSON form skips what the TOML skips).
    let written = serde_json::to_value(config)?;
    let unset = |section: &str| -> Vec<String> {
        let present = written.get(section).and_then(|v| v.as_object());
        section_keys(section)
            .unwrap_or_default()
            .into_iter()
            .filter(|k| present.is_none_or(|t| !t.contains_key(*k)))
            .map(|k| format!("# {k} = (unset)"))
            .collect()
    };
    let mut out = String::new();
    let mut pending: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    let flush = |out: &mut String, pending: &mut Vec<String>| {
        if pending.is_empty() {
            return;
        }
        // Inside the table that ends here, before the blank line that separates tables.
        let blank = out.ends_with("\n\n");
        if blank {
            out.pop();
        }
        for c in pending.drain(..) {
            out.push_str(&c);
            out.push('\n');
        }
        if blank {
            out.push('\n');
        }
    };
    for line in text.lines() {
        let header = line
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .filter(|h| !h.starts_with('['));
        if let Some(h) = header {
            flush(&mut out, &mut pending);
            seen.push(h.to_string());
            pending = unset(h);
        }
        out.push_str(line);
        out.push('\n');
    }
    flush(&mut out, &mut pending);
    // A section with every key unset has no table in the TOML: give it one.
    for section in sections() {
        if !seen.iter().any(|s| s == section) {
            let comments = unset(section);
            if !comments.is_empty() {
                out.push_str(&format!("\n[{section}]\n{}\n", comments.join("\n")));
            }
        }
    }
    Ok(out)
}
