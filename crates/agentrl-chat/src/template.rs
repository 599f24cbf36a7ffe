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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};

use crate::error::{ChatError, Result};

const TEMPLATE_NAME: &str = "chat_template";

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

/// A compiled chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    special_tokens: BTreeMap<&'static str, String>,
    source_path: PathBuf,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_path", &self.source_path)
            .field("special_tokens", &self.special_tokens)
            .finish()
    }
}

impl ChatTemplate {
    /// Loads the template of an HF model folder: `chat_template.jinja` if present (as current
    /// transformers does), else `tokenizer_config.json`'s `chat_template` (a string, or a list of
    /// `{name, template}` from which `default` is taken). Special-token strings come from
    /// `tokenizer_config.json` when it exists.
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
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
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|err| ChatError::Template {
                stage: "compile",
                message: format!("{} ({err:#})", source_path.display()),
            })?;
        Ok(Self {
            env,
            special_tokens,
            source_path,
        })
    }

    /// Renders a conversation. `messages` are chat messages (`role`, `content`, and optionally
    /// `reasoning_content`, `tool_calls`), `tools` are tool schemas in OpenAI function format.
    /// Object key order is kept, as transformers keeps dict order.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        options: RenderOptions,
    ) -> Result<String> {
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

    /// The file the template text came from.
    pub fn source_path(&self) -> &Path {
        &self.source_path
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

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// taking arguments positionally or by keyword.
fn tojson_filter(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<String, JinjaError> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(JinjaError::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let mut given: BTreeMap<&str, Value> = BTreeMap::new();
    for (name, arg) in names.iter().zip(args.iter()) {
        given.insert(name, arg.clone());
    }
    for name in names {
        if let Some(arg) = kwargs.get::<Option<Value>>(name)? {
            given.insert(name, arg);
        }
    }
    kwargs.assert_all_used()?;
    let ensure_ascii = given.get("ensure_ascii").is_some_and(Value::is_true);
    let sort_keys = given.get("sort_keys").is_some_and(Value::is_true);
    let indent = match given.get("indent") {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(text) => Some(text.to_string()),
            None => {
                let width = i64::try_from(v.clone()).map_err(|_| {
                    JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "tojson indent must be int or str",
                    )
                })?;
                Some(" ".repeat(width.max(0) as usize))
            }
        },
    };
    let (item_separator, key_separator) = match given.get("separators") {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] => match (item.as_str(), key.as_str()) {
                    (Some(item), Some(key)) => (item.to_string(), key.to_string()),
                    _ => {
                        return Err(JinjaError::new(
                            ErrorKind::InvalidOperation,
                            "tojson separators must be two strings",
                        ))
                    }
                },
                _ => {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "tojson separators must be a pair",
                    ))
                }
            }
        }
        // Python's json: "," when indenting (newlines separate items), ", " otherwise.
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let style = PyJsonStyle {
        ensure_ascii,
        sort_keys,
        indent,
        item_separator,
        key_separator,
    };
    let mut out = String::new();
    style.write_value(&mut out, value, 0)?;
    Ok(out)
}

/// The output conventions of Python's `json.dumps`.
struct PyJsonStyle {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
}

impl PyJsonStyle {
    fn write_value(&self, out: &mut String, value: &Value, level: usize) -> Result<(), JinjaError> {
        match value.kind() {
            ValueKind::Undefined => Err(JinjaError::new(
                ErrorKind::UndefinedError,
                "tojson got an undefined value",
            )),
            ValueKind::None => {
                out.push_str("null");
                Ok(())
            }
            ValueKind::Bool => {
                out.push_str(if value.is_true() { "true" } else { "false" });
                Ok(())
            }
            ValueKind::Number => {
                out.push_str(&python_number(value)?);
                Ok(())
            }
            ValueKind::String => {
                let text = value.as_str().unwrap_or_default();
                write_json_string(out, text, self.ensure_ascii);
                Ok(())
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(out, '[', ']', level, items.len(), |out, i, lvl| {
                    self.write_value(out, &items[i], lvl)
                })
            }
            ValueKind::Map => {
                let mut entries: Vec<(String, Value)> = Vec::new();
                for key in value.try_iter()? {
                    let item = value.get_item(&key)?;
                    entries.push((python_key(&key)?, item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.write_container(out, '{', '}', level, entries.len(), |out, i, lvl| {
                    write_json_string(out, &entries[i].0, self.ensure_ascii);
                    out.push_str(&self.key_separator);
                    self.write_value(out, &entries[i].1, lvl)
                })
            }
            other => Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson cannot serialize a value of kind {other:?}"),
            )),
        }
    }

    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        level: usize,
        len: usize,
        mut write_item: impl FnMut(&mut String, usize, usize) -> Result<(), JinjaError>,
    ) -> Result<(), JinjaError> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        let inner_newline = self
            .indent
            .as_ref()
            .map(|unit| format!("\n{}", unit.repeat(level + 1)));
        if let Some(newline) = &inner_newline {
            out.push_str(newline);
        }
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_separator);
                if let Some(newline) = &inner_newline {
                    out.push_str(newline);
                }
            }
            write_item(out, i, level + 1)?;
        }
        if let Some(unit) = &self.indent {
            out.push('\n');
            out.push_str(&unit.repeat(level));
        }
        out.push(close);
        Ok(())
    }
}

/// `json.dumps(value, ensure_ascii=False)` for a serde JSON value: what the Qwen template writes
/// for dict tool-call arguments, so text built here re-renders to the same bytes.
pub fn python_json(value: &serde_json::Value) -> String {
    fn write(out: &mut String, value: &serde_json::Value) {
        match value {
            serde_json::Value::Null => out.push_str("null"),
            serde_json::Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => out.push_str(&i.to_string()),
                (None, Some(u), _) => out.push_str(&u.to_string()),
                (None, None, Some(x)) => out.push_str(&python_float_repr(x)),
                (None, None, None) => out.push_str(&n.to_string()),
            },
            serde_json::Value::String(text) => write_json_string(out, text, false),
            serde_json::Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write(out, item);
                }
                out.push(']');
            }
            serde_json::Value::Object(map) => {
                out.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_json_string(out, key, false);
                    out.push_str(": ");
                    write(out, item);
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    write(&mut out, value);
    out
}

/// Python's `json.dumps` string escaping: `\" \\ \n \r \t \b \f`, other control characters as
/// `\u00XX`; non-ASCII as `\uXXXX` (UTF-16 surrogate pairs) only with `ensure_ascii`.
fn write_json_string(out: &mut String, text: &str, ensure_ascii: bool) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Python's `json.dumps` writes it: integers plainly, floats as `repr(float)`.
fn python_number(value: &Value) -> Result<String, JinjaError> {
    if value.is_integer() {
        return Ok(value.to_string());
    }
    let x = f64::try_from(value.clone())?;
    Ok(python_float_repr(x))
}

/// `repr(x)` of a Python float, which `json.dumps` uses: the shortest round-trip digits,
/// positional for exponents in [-4, 16), else `d.ddde±XX`; `NaN`, `Infinity` for non-finite.
pub(crate) fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "1.5e-5", "-1e16".
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if (point as usize) >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let fraction = if digits.len() > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{}{fraction}e{exp_sign}{:02}",
            &digits[..1],
            exponent.abs()
        )
    }
}

/// Dict keys as Python's `json.dumps` coerces them: strings as is, numbers and booleans to text.
fn python_key(key: &Value) -> Result<String, JinjaError> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => python_number(key),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        other => Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("tojson: keys must be str, int, float, bool or None, not {other:?}"),
        )),
    }
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

pub(crate) fn strftime_utc(format: &str, unix_seconds: i64) -> Result<String, JinjaError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn render_str(source: &str, ctx: serde_json::Value) -> String {
        let template = ChatTemplate::from_source(source.into(), BTreeMap::new(), "inline".into())
            .expect("template compiles");
        let tmpl = template.env.get_template(TEMPLATE_NAME).expect("template");
        tmpl.render(Value::from_serialize(&ctx)).expect("renders")
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let ctx = serde_json::json!({"x": {"b": [1, 2.5, true, null], "a": "é\"<>&\n\u{1}"}});
        // Python: json.dumps(x, ensure_ascii=False)
        assert_eq!(
            render_str("{{ x | tojson }}", ctx.clone()),
            r#"{"b": [1, 2.5, true, null], "a": "é\"<>&\n\u0001"}"#
        );
        // Python: json.dumps(x, ensure_ascii=True, sort_keys=True)
        assert_eq!(
            render_str(
                "{{ x | tojson(ensure_ascii=true, sort_keys=true) }}",
                ctx.clone()
            ),
            r#"{"a": "\u00e9\"<>&\n\u0001", "b": [1, 2.5, true, null]}"#
        );
        // Python: json.dumps(x, ensure_ascii=False, indent=2)
        assert_eq!(
            render_str("{{ x | tojson(indent=2) }}", ctx.clone()),
            "{\n  \"b\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"a\": \"é\\\"<>&\\n\\u0001\"\n}"
        );
        assert_eq!(
            render_str("{{ x.b | tojson(separators=[',', ':']) }}", ctx),
            "[1,2.5,true,null]"
        );
        assert_eq!(
            render_str(
                "{{ e | tojson }}{{ m | tojson }}",
                serde_json::json!({"e": [], "m": {}})
            ),
            "[]{}"
        );
        assert_eq!(
            render_str("{{ '😀' | tojson(true) }}", serde_json::json!({})),
            r#""\ud83d\ude00""#
        );
    }

    #[test]
    fn python_float_repr_matches_python() {
        // Values checked against CPython's repr().
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456789012345.6, "123456789012345.6"),
            (1e22, "1e+22"),
            (f64::NAN, "NaN"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(python_float_repr(x), want, "repr of {x}");
        }
    }

    #[test]
    fn raise_exception_and_python_methods() {
        let template = ChatTemplate::from_source(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}{{ messages[0].content.strip().split(',')[1].upper() }}".into(),
            BTreeMap::new(),
            "inline".into(),
        )
        .expect("compiles");
        let ok = template
            .render(
                &[serde_json::json!({"role": "user", "content": "  a,b  "})],
                None,
                RenderOptions::default(),
            )
            .expect("renders");
        assert_eq!(ok, "B");
        let err = template
            .render(
                &[serde_json::json!({"role": "system", "content": "x"})],
                None,
                RenderOptions::default(),
            )
            .expect_err("raises");
        assert!(
            err.to_string().contains("first message must be user"),
            "{err}"
        );
    }

    #[test]
    fn strftime_formats_known_instants() {
        // 2024-02-29 13:05:09 UTC was a Thursday, day 60 of the year.
        let t = 1_709_211_909;
        assert_eq!(
            strftime_utc("%Y-%m-%d %H:%M:%S", t).unwrap(),
            "2024-02-29 13:05:09"
        );
        assert_eq!(
            strftime_utc("%d %b %Y, %A %-I%p %j", t).unwrap(),
            "29 Feb 2024, Thursday 1PM 060"
        );
        assert_eq!(strftime_utc("%a %B %-d", 0).unwrap(), "Thu January 1");
        assert!(strftime_utc("%Q", 0).is_err());
    }

    #[test]
    fn missing_template_is_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").expect("write");
        let err = ChatTemplate::from_model_dir(dir.path()).expect_err("no template");
        assert!(matches!(err, ChatError::MissingTemplate { .. }), "{err}");
    }
}
