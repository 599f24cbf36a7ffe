//! The model's own Jinja chat template, rendered with minijinja as transformers renders it.
//!
//! Messages (and tool schemas) become prompt text here; [`crate::qwen::QwenTokenizer`] turns the
//! text into ids. The template always comes from the model folder (`chat_template.jinja`, else
//! `tokenizer_config.json`'s `chat_template`), never from a copy in this crate.
//!
//! To match `transformers`' `apply_chat_template` byte for byte, the environment mirrors the one
//! transformers builds (`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//! extensions=[loopcontrols])`):
//! * `trim_blocks` and `lstrip_blocks` on; loop controls on;
//! * Python string and dict methods (`startswith`, `split`, `rstrip`, `items`, ...) through
//!   minijinja-contrib's `pycompat` callback;
//! * `tojson` replaced by transformers' own: `json.dumps(x, ensure_ascii=False, indent=indent,
//!   separators=separators, sort_keys=sort_keys)`, i.e. `", "` and `": "` separators, no HTML
//!   escaping, non-ASCII kept (minijinja's built-in is compact and HTML-escapes);
//! * `raise_exception(msg)` and `strftime_now(format)` as globals;
//! * `bos_token`, `eos_token`, `pad_token`, `unk_token` from `tokenizer_config.json` in the context.
//!
//! Not supported: transformers' `{% generation %}` block tag (assistant masks), which minijinja
//! cannot parse; templates that use it fail to load with a clear error.
//!
//! A template that never reads `tools` or `tool_calls` (SmolLM2's ChatML) gets the conversation
//! rewritten into plain messages first, tools listed in the system prompt and calls as
//! `<tool_call>` text (`tools_in_prompt.rs`, [`ToolFormat::InPrompt`]).
//!
//! A GGUF file carries its template in the metadata (`tokenizer.chat_template`), and the
//! special-token strings as ids into its vocabulary ([`ChatTemplate::from_gguf`]).
//!
//! Layout: this file holds the template environment and its globals; `pyjson.rs` holds the
//! Python-`json.dumps`-compatible `tojson` filter and [`python_json`]; `tools_in_prompt.rs` the
//! tool-call format for templates without tools.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};

use crate::error::{ChatError, Result};
use crate::gguf::{is_gguf_file, GgufMetadata};
use crate::gguf_tokenizer::special_token_text;

mod pyjson;
pub mod tools_in_prompt;

pub use pyjson::python_json;
// Public for the integration tests (tests/chat/pyjson.rs).
#[doc(hidden)]
pub use pyjson::python_float_repr;
use pyjson::tojson_filter;

// Public for the integration tests (tests/chat/pyjson.rs).
#[doc(hidden)]
pub const TEMPLATE_NAME: &str = "chat_template";

/// Switches of one render, as `apply_chat_template` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// End with the opening of an assistant turn (`<|im_start|>assistant\n` for Qwen).
    pub add_generation_prompt: bool,
    /// Passed to the template as `enable_thinking`. Qwen3 renders an empty
    /// `<think>\n\n</think>\n\n` after the generation prompt when it is false.
    pub enable_thinking: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            add_generation_prompt: false,
            enable_thinking: true,
        }
    }
}

impl RenderOptions {
    /// Options for a prompt that the model continues: generation prompt on, thinking as given.
    pub fn generation(enable_thinking: bool) -> Self {
        Self {
            add_generation_prompt: true,
            enable_thinking,
        }
    }
}

/// How tools and tool calls reach the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// The template reads `tools` and `tool_calls` itself (Qwen3's).
    Template,
    /// The template knows no tools; the conversation is rewritten first
    /// ([`tools_in_prompt::rewrite`]).
    InPrompt,
}

impl ToolFormat {
    /// [`ToolFormat::Template`] when the template's text mentions `tools` or `tool_calls`.
    pub fn of_source(source: &str) -> Self {
        if source.contains("tools") || source.contains("tool_calls") {
            Self::Template
        } else {
            Self::InPrompt
        }
    }
}

/// A compiled chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    special_tokens: BTreeMap<&'static str, String>,
    source_path: PathBuf,
    tool_format: ToolFormat,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_path", &self.source_path)
            .field("special_tokens", &self.special_tokens)
            .field("tool_format", &self.tool_format)
            .finish()
    }
}

impl ChatTemplate {
    /// Loads the template of an HF model folder: `chat_template.jinja` if present (as current
    /// transformers does), else `tokenizer_config.json`'s `chat_template` (a string, or a list of
    /// `{name, template}` from which `default` is taken). Special-token strings come from
    /// `tokenizer_config.json` when it exists.
    /// When `dir` is a GGUF file, its metadata's template ([`Self::from_gguf`]).
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if is_gguf_file(dir) {
            return Self::from_gguf(&GgufMetadata::read(dir)?);
        }
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            Some(read_json(&config_path)?)
        } else {
            None
        };
        let jinja_path = dir.join("chat_template.jinja");
        let (source, source_path) = if jinja_path.is_file() {
            let text = std::fs::read_to_string(&jinja_path).map_err(|source| ChatError::Io {
                path: jinja_path.clone(),
                source,
            })?;
            (text, jinja_path)
        } else if let Some(template) = config.as_ref().and_then(|c| c.get("chat_template")) {
            (
                template_from_config_field(template, &config_path)?,
                config_path.clone(),
            )
        } else {
            return Err(ChatError::MissingTemplate {
                dir: dir.to_path_buf(),
            });
        };
        let special_tokens = match &config {
            Some(config) => special_tokens_from_config(config, &config_path)?,
            None => BTreeMap::new(),
        };
        Self::from_source(source, special_tokens, source_path)
    }

    /// The template of a GGUF file (`tokenizer.chat_template`), with `bos_token`, `eos_token`,
    /// `pad_token` and `unk_token` from the ids the file names.
    pub fn from_gguf(meta: &GgufMetadata) -> Result<Self> {
        let source = meta.require_str("tokenizer.chat_template")?.to_string();
        let mut special_tokens = BTreeMap::new();
        for (name, key) in [
            ("bos_token", "tokenizer.ggml.bos_token_id"),
            ("eos_token", "tokenizer.ggml.eos_token_id"),
            ("pad_token", "tokenizer.ggml.padding_token_id"),
            ("unk_token", "tokenizer.ggml.unknown_token_id"),
        ] {
            if let Some(text) = special_token_text(meta, key)? {
                special_tokens.insert(name, text);
            }
        }
        Self::from_source(source, special_tokens, meta.path().to_path_buf())
    }

    /// Compiles template text. `source_path` only labels errors.
    pub fn from_source(
        source: String,
        special_tokens: BTreeMap<&'static str, String>,
        source_path: PathBuf,
    ) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let tool_format = ToolFormat::of_source(&source);
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|err| ChatError::Template {
                stage: "compile",
                message: format!("{} ({err:#})", source_path.display()),
            })?;
        Ok(Self {
            env,
            special_tokens,
            source_path,
            tool_format,
        })
    }

    /// Renders a conversation. `messages` are chat messages (`role`, `content`, and optionally
    /// `reasoning_content`, `tool_calls`), `tools` are tool schemas in OpenAI function format.
    /// Object key order is kept, as transformers keeps dict order. A template that knows no
    /// tools ([`ToolFormat::InPrompt`]) renders the rewritten conversation.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        options: RenderOptions,
    ) -> Result<String> {
        let rewritten;
        let (messages, tools) = match self.tool_format {
            ToolFormat::Template => (messages, tools),
            ToolFormat::InPrompt => {
                rewritten = tools_in_prompt::rewrite(messages, tools);
                (rewritten.as_slice(), None)
            }
        };
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|err| ChatError::template("lookup", err))?;
        let mut context: BTreeMap<&str, Value> = BTreeMap::new();
        context.insert("messages", Value::from_serialize(messages));
        context.insert(
            "tools",
            match tools {
                Some(tools) => Value::from_serialize(tools),
                None => Value::from(()),
            },
        );
        context.insert(
            "add_generation_prompt",
            Value::from(options.add_generation_prompt),
        );
        context.insert("enable_thinking", Value::from(options.enable_thinking));
        for (name, token) in &self.special_tokens {
            context.insert(name, Value::from(token.as_str()));
        }
        template
            .render(context)
            .map_err(|err| ChatError::template("render", err))
    }

    /// How tools reach this template.
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// The file the template text came from.
    pub fn source_path(&self) -> &Path {
        &self.source_path
    }

    /// The minijinja environment holding the compiled template (named [`TEMPLATE_NAME`]).
    // Public for the integration tests (tests/chat/pyjson.rs).
    #[doc(hidden)]
    pub fn env(&self) -> &Environment<'static> {
        &self.env
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| ChatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ChatError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn template_from_config_field(field: &serde_json::Value, path: &Path) -> Result<String> {
    let bad = |message: &str| ChatError::BadField {
        path: path.to_path_buf(),
        field: "chat_template".into(),
        message: message.into(),
    };
    match field {
        serde_json::Value::String(text) => Ok(text.clone()),
        serde_json::Value::Array(named) => named
            .iter()
            .find(|entry| entry.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|entry| entry.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| bad("a list of named templates without a `default` entry")),
        _ => Err(bad("expected a string or a list of {name, template}")),
    }
}

/// `bos_token` etc. may be plain strings, `null`, or AddedToken objects `{"content": ...}`.
fn special_tokens_from_config(
    config: &serde_json::Value,
    path: &Path,
) -> Result<BTreeMap<&'static str, String>> {
    let mut tokens = BTreeMap::new();
    for name in ["bos_token", "eos_token", "pad_token", "unk_token"] {
        let text = match config.get(name) {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(object) => object
                .get("content")
                .and_then(|c| c.as_str())
                .map(str::to_string)
                .ok_or_else(|| ChatError::BadField {
                    path: path.to_path_buf(),
                    field: name.into(),
                    message: "expected a string or an object with a string `content`".into(),
                })?,
        };
        tokens.insert(name, text);
    }
    Ok(tokens)
}

/// `raise_exception(message)`: templates call it to reject a conversation.
fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}
/// `strftime_now(format)`: the current UTC time in a C `strftime` format. Covers the
/// directives chat templates use (`%Y %m %d %H %M %S %y %b %B %a %A %j %p %I %e %%` and the
/// glibc no-padding forms `%-d %-m %-H %-I %-M %-S`).
fn strftime_now(format: String) -> Result<String, JinjaError> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|err| JinjaError::new(ErrorKind::InvalidOperation, err.to_string()))?
        .as_secs() as i64;
    strftime_utc(&format, seconds)
}

// Public for the integration tests (tests/chat/template.rs).
#[doc(hidden)]
pub fn strftime_utc(format: &str, unix_seconds: i64) -> Result<String, JinjaError> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const WEEKDAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    // The calendar comes from the `time` crate; only the directive mapping is ours.
    let when = time::OffsetDateTime::from_unix_timestamp(unix_seconds).map_err(|e| {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: timestamp {unix_seconds} out of range: {e}"),
        )
    })?;
    let (year, month, day) = (
        i64::from(when.year()),
        i64::from(u8::from(when.month())),
        i64::from(when.day()),
    );
    let (hour, minute, second) = (
        i64::from(when.hour()),
        i64::from(when.minute()),
        i64::from(when.second()),
    );
    let weekday = usize::from(when.weekday().number_days_from_monday());
    let day_of_year = i64::from(when.ordinal());
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[(month - 1) as usize];
    let weekday_name = WEEKDAYS[weekday];

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut directive = chars.next().ok_or_else(|| {
            JinjaError::new(ErrorKind::InvalidOperation, "strftime format ends with %")
        })?;
        let unpadded = directive == '-';
        if unpadded {
            directive = chars.next().ok_or_else(|| {
                JinjaError::new(ErrorKind::InvalidOperation, "strftime format ends with %-")
            })?;
        }
        let number = |n: i64| {
            if unpadded {
                n.to_string()
            } else {
                format!("{n:02}")
            }
        };
        match directive {
            'Y' => out.push_str(&year.to_string()),
            'y' => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            'm' => out.push_str(&number(month)),
            'd' => out.push_str(&number(day)),
            'e' => out.push_str(&format!("{day:>2}")),
            'H' => out.push_str(&number(hour)),
            'I' => out.push_str(&number(hour12)),
            'M' => out.push_str(&number(minute)),
            'S' => out.push_str(&number(second)),
            'p' => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            'j' => out.push_str(&if unpadded {
                day_of_year.to_string()
            } else {
                format!("{day_of_year:03}")
            }),
            'B' => out.push_str(month_name),
            'b' | 'h' => out.push_str(&month_name[..3]),
            'A' => out.push_str(weekday_name),
            'a' => out.push_str(&weekday_name[..3]),
            '%' => out.push('%'),
            other => {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: unsupported directive %{other}"),
                ))
            }
        }
    }
    Ok(out)
}
