//! Tool schemas in OpenAI function format, and checking call arguments against them.
//!
//! The schemas go two ways: into the chat template's `tools` (the model reads them in its
//! system prompt), and into the [`crate::codec::ToolCallCodec`], which rejects calls to unknown
//! tools and calls whose arguments miss a required field or have the wrong JSON type.
//! [`bugfix_tool_specs`] describes the BugFix gym's tools (`read`, `test`, `edit`, `submit`,
//! `exploit`); the gym itself still checks argument meaning (paths, line ranges).

use agentrl_gym::Tool;
use serde_json::{json, Value};

use crate::error::{ChatError, Result};

/// The BugFix gym's tools as Qwen's template expects them in `tools`:
/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
///
/// The schemas are the gym's ([`Tool::input_schema`]). The fixture script `scripts/make_qwen3_fixtures.py` holds the same list; a test checks that
/// the two agree key for key, in order.
pub fn bugfix_tool_specs() -> Vec<Value> {
    Tool::ALL
        .into_iter()
        .map(|tool| {
            json!({"type": "function", "function": {
                "name": tool.name(), "description": tool.description(),
                "parameters": tool.input_schema()}})
        })
        .collect()
}

/// The JSON types a JSON-schema `type` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
    Null,
}

impl JsonType {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            "object" => Self::Object,
            "array" => Self::Array,
            "null" => Self::Null,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Object => "object",
            Self::Array => "array",
            Self::Null => "null",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            Self::String => value.is_string(),
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
            Self::Null => value.is_null(),
        }
    }
}

/// What a tool schema says about its arguments, enough to reject a bad call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// Declared properties with their allowed types (empty: any type).
    pub properties: Vec<(String, Vec<JsonType>)>,
    pub required: Vec<String>,
    /// `anyOf`/`oneOf` alternatives: at least one of these `required` sets must be present.
    pub alternatives: Vec<Vec<String>>,
    /// `additionalProperties: false`: arguments outside `properties` are rejected.
    pub closed: bool,
}

/// Why a call's arguments do not fit its tool's schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgumentError {
    #[error("tool `{tool}`: arguments must be a JSON object")]
    NotAnObject { tool: String },
    #[error("tool `{tool}`: missing required argument `{argument}`")]
    Missing { tool: String, argument: String },
    #[error("tool `{tool}`: arguments fit none of its forms: {}", forms_text(.forms))]
    NoForm {
        tool: String,
        forms: Vec<Vec<String>>,
    },
    #[error("tool `{tool}`: argument `{argument}` must be {expected}")]
    WrongType {
        tool: String,
        argument: String,
        expected: String,
    },
    #[error("tool `{tool}`: unexpected argument `{argument}`")]
    Unexpected { tool: String, argument: String },
}

fn forms_text(forms: &[Vec<String>]) -> String {
    forms
        .iter()
        .map(|form| format!("{{{}}}", form.join(", ")))
        .collect::<Vec<_>>()
        .join(" | ")
}

impl ToolSpec {
    /// Reads `{"type": "function", "function": {...}}` or the bare `{"name", "parameters"}`.
    pub fn from_openai(spec: &Value) -> Result<Self> {
        let function = spec.get("function").unwrap_or(spec);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ChatError::ToolSpec(format!("no string `name` in {spec}")))?
            .to_string();
        let bad = |what: &str| ChatError::ToolSpec(format!("tool `{name}`: {what}"));
        let empty = json!({});
        let parameters = function.get("parameters").unwrap_or(&empty);
        let properties = match parameters.get("properties") {
            None => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(key, schema)| Ok((key.clone(), schema_types(schema).map_err(|m| bad(&m))?)))
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(bad("`parameters.properties` must be an object")),
        };
        let required = string_list(parameters.get("required"))
            .ok_or_else(|| bad("`parameters.required` must be a list of strings"))?;
        let mut alternatives = Vec::new();
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = parameters.get(key) {
                let list = list
                    .as_array()
                    .ok_or_else(|| bad(&format!("`parameters.{key}` must be a list")))?;
                for alternative in list {
                    alternatives.push(string_list(alternative.get("required")).ok_or_else(
                        || bad(&format!("`parameters.{key}[].required` must list strings")),
                    )?);
                }
            }
        }
        let closed = parameters.get("additionalProperties") == Some(&Value::Bool(false));
        Ok(Self {
            name,
            properties,
            required,
            alternatives,
            closed,
        })
    }

    /// Checks call arguments: an object, required keys present, one alternative satisfied,
    /// declared types respected, no extra keys if the schema is closed.
    pub fn check_arguments(&self, arguments: &Value) -> Result<(), ArgumentError> {
        let Some(map) = arguments.as_object() else {
            return Err(ArgumentError::NotAnObject {
                tool: self.name.clone(),
            });
        };
        if let Some(missing) = self.required.iter().find(|key| !map.contains_key(*key)) {
            return Err(ArgumentError::Missing {
                tool: self.name.clone(),
                argument: missing.clone(),
            });
        }
        if !self.alternatives.is_empty()
            && !self
                .alternatives
                .iter()
                .any(|form| form.iter().all(|key| map.contains_key(key)))
        {
            return Err(ArgumentError::NoForm {
                tool: self.name.clone(),
                forms: self.alternatives.clone(),
            });
        }
        for (key, value) in map {
            match self.properties.iter().find(|(name, _)| name == key) {
                Some((_, types))
                    if !types.is_empty() && !types.iter().any(|t| t.matches(value)) =>
                {
                    return Err(ArgumentError::WrongType {
                        tool: self.name.clone(),
                        argument: key.clone(),
                        expected: types
                            .iter()
                            .map(|t| t.name())
                            .collect::<Vec<_>>()
                            .join(" or "),
                    });
                }
                Some(_) => {}
                None if self.closed => {
                    return Err(ArgumentError::Unexpected {
                        tool: self.name.clone(),
                        argument: key.clone(),
                    })
                }
                None => {}
            }
        }
        Ok(())
    }
}

fn schema_types(schema: &Value) -> std::result::Result<Vec<JsonType>, String> {
    let names: Vec<&str> = match schema.get("type") {
        None => return Ok(Vec::new()),
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        Some(other) => return Err(format!("property type {other} is not a string or list")),
    };
    names
        .into_iter()
        .map(|name| JsonType::parse(name).ok_or_else(|| format!("unknown JSON type `{name}`")))
        .collect()
}

fn string_list(value: Option<&Value>) -> Option<Vec<String>> {
    match value {
        None => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect(),
        Some(_) => None,
    }
}
