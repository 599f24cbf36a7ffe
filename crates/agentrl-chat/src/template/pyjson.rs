//! Python-`json.dumps`-compatible JSON: the `tojson` filter transformers installs in its chat
//! template environment, and [`python_json`] for serde values.
//!
//! Data flow: a chat template's `{{ tools | tojson }}` and `{{ arguments | tojson }}` →
//! [`tojson_filter`] → prompt text; the tool-call codec formats calls with [`python_json`], so
//! text built in Rust re-renders to the same bytes (and the same token ids) as the template
//! writes. Byte-for-byte rules: `", "` and `": "` separators, no HTML escaping, non-ASCII kept
//! unless `ensure_ascii`, floats as Python's `repr`, keys in dict (insertion) order unless
//! `sort_keys`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, Value};

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// taking arguments positionally or by keyword.
pub(super) fn tojson_filter(
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> Result<String, JinjaError> {
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
// Public for the integration tests (tests/chat/pyjson.rs).
#[doc(hidden)]
pub fn python_float_repr(x: f64) -> String {
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
