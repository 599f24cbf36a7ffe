//! The one error type of agentrl-chat: loading model files, rendering templates, tokenizing.
//!
//! Tool-call parse failures are not here: they are data (the policy wrote something malformed),
//! typed as [`crate::codec::ToolCallError`] and turned into gym observations.

use std::path::PathBuf;

/// What went wrong while loading a model folder, rendering a template or tokenizing.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot load tokenizer {path}: {message}")]
    TokenizerLoad { path: PathBuf, message: String },
    #[error("tokenizer {call} failed: {message}")]
    Tokenizer { call: &'static str, message: String },
    #[error("the tokenizer has no token {token:?}")]
    MissingToken { token: String },
    #[error(
        "model folder {dir} has no chat template: neither `chat_template` in tokenizer_config.json \
         nor chat_template.jinja"
    )]
    MissingTemplate { dir: PathBuf },
    #[error("{field} in {path} has an unexpected form: {message}")]
    BadField {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// The template failed to compile or raised while rendering (`{:#}` keeps minijinja's
    /// source location and context).
    #[error("chat template {stage} failed: {message}")]
    Template {
        stage: &'static str,
        message: String,
    },
    #[error("invalid tool spec: {0}")]
    ToolSpec(String),
    #[error("invalid message: {0}")]
    Message(String),
    /// A codec option out of range (`option` is the field's name).
    #[error("codec option `{option}`: {message}")]
    InvalidOption {
        option: &'static str,
        message: String,
    },
}

impl ChatError {
    pub(crate) fn template(stage: &'static str, err: minijinja::Error) -> Self {
        ChatError::Template {
            stage,
            message: format!("{err:#}"),
        }
    }
}

pub type Result<T, E = ChatError> = std::result::Result<T, E>;
