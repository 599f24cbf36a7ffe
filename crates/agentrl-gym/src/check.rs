//! Trusted-side checks of hidden cases: the plain-data values a case reports, the expectation
//! kinds of `hidden.json`, and the comparison of one with the other.
//!
//! Why here and not in the sandbox: anything the sandbox computes can be forged by the code under
//! test (a shadowed builtin, an object whose `__eq__` always says yes, a frame that reads the
//! expected constant). So the sandbox only *reports* what a case returned, encoded as plain data
//! by exact type ([`Value`]; objects of other types arrive as their type name and `repr`), and
//! every comparison happens in this module, in Rust, against expectations that never enter the
//! sandbox.
//!
//! Expectation kinds ([`Expect`]): `value` (a Python literal, the `repr` of the expected value,
//! compared structurally and typed: `1` is not `1.0`, a list is not a tuple), `raises` (the
//! exception's type name), `approx` (numbers within `rel`/`abs` tolerance, also inside lists,
//! tuples and dicts), `unordered` (a list compared as a multiset), `set` (a collection compared
//! as a set) and `data` (JSON, compared structurally: arrays match lists or tuples, numbers
//! match by value). A `value` whose text is not a literal (`Point(x=1)`) is compared with the
//! reported `repr` in full.

use serde::{Deserialize, Serialize};

/// A value a case returned, as plain data. Floats keep Python's exact `repr` semantics (an f64);
/// ints are decimal strings, so big ints compare exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(String),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    FrozenSet(Vec<Value>),
    /// Any other type: its qualified name and (untrusted) `repr`, if `repr` did not fail.
    Other {
        type_name: String,
        repr: Option<String>,
    },
}

/// Nesting deeper than this is refused (by the harness too), so decoding cannot overflow.
const MAX_DEPTH: usize = 100;

impl Value {
    /// Decodes the harness's encoding (see `verdict_tree.py, `plain`).
    pub fn from_wire(wire: &serde_json::Value) -> Result<Value, String> {
        Self::from_wire_at(wire, 0)
    }

    fn from_wire_at(wire: &serde_json::Value, depth: usize) -> Result<Value, String> {
        use serde_json::Value as J;
        if depth > MAX_DEPTH {
            return Err("value nested too deeply".into());
        }
        let items = |v: &J| -> Result<Vec<Value>, String> {
            v.as_array()
                .ok_or("expected an array")?
                .iter()
                .map(|x| Self::from_wire_at(x, depth + 1))
                .collect()
        };
        Ok(match wire {
            J::Null => Value::None,
            J::Bool(b) => Value::Bool(*b),
            J::String(s) => Value::Str(s.clone()),
            J::Object(map) if map.len() <= 2 => {
                let (tag, body) = map.iter().next().ok_or("empty object")?;
                match tag.as_str() {
                    "int" => Value::Int(normalise_int(body.as_str().ok_or("bad int")?)?),
                    "float" => Value::Float(parse_float(body.as_str().ok_or("bad float")?)?),
                    "bytes" => Value::Bytes(hex_decode(body.as_str().ok_or("bad bytes")?)?),
                    "list" => Value::List(items(body)?),
                    "tuple" => Value::Tuple(items(body)?),
                    "set" => Value::Set(items(body)?),
                    "frozenset" => Value::FrozenSet(items(body)?),
                    "dict" => {
                        let mut pairs = Vec::new();
                        for pair in body.as_array().ok_or("bad dict")? {
                            match pair.as_array().map(Vec::as_slice) {
                                Some([k, v]) => pairs.push((
                                    Self::from_wire_at(k, depth + 1)?,
                                    Self::from_wire_at(v, depth + 1)?,
                                )),
                                _ => return Err("bad dict entry".into()),
                            }
                        }
                        Value::Dict(pairs)
                    }
                    "other" => Value::Other {
                        type_name: body.as_str().ok_or("bad type name")?.to_string(),
                        repr: map.get("repr").and_then(|r| r.as_str()).map(str::to_string),
                    },
                    other => return Err(format!("unknown tag `{other}`")),
                }
            }
            _ => return Err("not a plain-data encoding".into()),
        })
    }

    /// Plain data all the way down: no [`Value::Other`] anywhere (so the trusted checker can
    /// rebuild it with exact builtin types).
    pub fn is_plain(&self) -> bool {
        match self {
            Value::Other { .. } => false,
            Value::List(items)
            | Value::Tuple(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => items.iter().all(Value::is_plain),
            Value::Dict(pairs) => pairs.iter().all(|(k, v)| k.is_plain() && v.is_plain()),
            _ => true,
        }
    }

    /// The expected side of `data`, `approx`, `unordered` and `set`: JSON as plain data.
    pub fn from_json(json: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        match json {
            J::Null => Value::None,
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) if n.is_i64() || n.is_u64() => Value::Int(n.to_string()),
            J::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            J::String(s) => Value::Str(s.clone()),
            J::Array(items) => Value::List(items.iter().map(Value::from_json).collect()),
            J::Object(map) => Value::Dict(
                map.iter()
                    .map(|(k, v)| (Value::Str(k.clone()), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// A short Python-like rendering, for diagnostics (never compared).
    pub fn display(&self) -> String {
        let join = |items: &[Value]| {
            items
                .iter()
                .map(Value::display)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = match self {
            Value::None => "None".into(),
            Value::Bool(b) => if *b { "True" } else { "False" }.into(),
            Value::Int(i) => i.clone(),
            Value::Float(f) => format!("{f:?}"),
            Value::Str(s) => format!("{s:?}"),
            Value::Bytes(b) => format!("b{:?}", String::from_utf8_lossy(b)),
            Value::List(items) => format!("[{}]", join(items)),
            Value::Tuple(items) if items.len() == 1 => format!("({},)", join(items)),
            Value::Tuple(items) => format!("({})", join(items)),
            Value::Set(items) => format!("{{{}}}", join(items)),
            Value::FrozenSet(items) => format!("frozenset({{{}}})", join(items)),
            Value::Dict(pairs) => format!(
                "{{{}}}",
                pairs
                    .iter()
                    .map(|(k, v)| format!("{}: {}", k.display(), v.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Value::Other { type_name, repr } => match repr {
                Some(r) => format!("{r} (a {type_name}, not plain data)"),
                None => format!("<{type_name}: repr failed>"),
            },
        };
        if text.chars().count() > 200 {
            format!("{}…", text.chars().take(200).collect::<String>())
        } else {
            text
        }
    }

    fn as_number(&self) -> Option<f64> {
        match self {
            Value::Int(i) => i.parse::<f64>().ok(),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }
}

fn normalise_int(text: &str) -> Result<String, String> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not an integer"));
    }
    let digits = digits.trim_start_matches('0');
    Ok(match (negative, digits.is_empty()) {
        (_, true) => "0".into(),
        (true, false) => format!("-{digits}"),
        (false, false) => digits.to_string(),
    })
}

fn parse_float(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .map_err(|_| format!("`{text}` is not a float"))
}

fn hex_decode(text: &str) -> Result<Vec<u8>, String> {
    if text.len() & 1 != 0 {
        return Err("odd hex length".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// What a case did, as reported by the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub enum Actual {
    Returned(Value),
    /// The exception's type name; `lookalike` when a builtin of that name exists but the
    /// exception is another class (one the code under test defined to pass for it).
    Raised {
        name: String,
        lookalike: bool,
    },
}

/// The expected outcome of one hidden case. In `hidden.json` an object with exactly one kind
/// key (`approx` may add `rel` and `abs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ExpectWire", into = "ExpectWire")]
pub enum Expect {
    /// The `repr` of the expected value (a Python literal, compared structurally and typed).
    Value(String),
    /// The exception type name, e.g. `ZeroDivisionError`.
    Raises(String),
    /// Numbers within tolerance, also inside lists, tuples and dicts: `|a - e| <= max(rel·|e|,
    /// abs)`, as `pytest.approx`.
    Approx {
        expected: serde_json::Value,
        rel: f64,
        abs: f64,
    },
    /// A list or tuple with the same elements, in any order, duplicates counted.
    Unordered(serde_json::Value),
    /// A set, frozenset, list or tuple with the same distinct elements.
    Set(serde_json::Value),
    /// JSON compared structurally.
    Data(serde_json::Value),
}

/// `approx` defaults, as `pytest.approx`.
pub const DEFAULT_REL: f64 = 1e-6;
pub const DEFAULT_ABS: f64 = 1e-12;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raises: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approx: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rel: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unordered: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    set: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<serde_json::Value>,
}

impl TryFrom<ExpectWire> for Expect {
    type Error = String;
    fn try_from(w: ExpectWire) -> Result<Self, String> {
        let kinds = [
            w.value.is_some(),
            w.raises.is_some(),
            w.approx.is_some(),
            w.unordered.is_some(),
            w.set.is_some(),
            w.data.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(
                "`expect` needs exactly one of value, raises, approx, unordered, set, data".into(),
            );
        }
        if (w.rel.is_some() || w.abs.is_some()) && w.approx.is_none() {
            return Err("`rel` and `abs` belong to `approx`".into());
        }
        let collection = |v: serde_json::Value, kind: &str| {
            if v.is_array() {
                Ok(v)
            } else {
                Err(format!("`{kind}` must be a JSON array"))
            }
        };
        Ok(if let Some(v) = w.value {
            Expect::Value(v)
        } else if let Some(r) = w.raises {
            Expect::Raises(r)
        } else if let Some(expected) = w.approx {
            let rel = w.rel.unwrap_or(DEFAULT_REL);
            let abs = w.abs.unwrap_or(DEFAULT_ABS);
            if !(rel >= 0.0 && abs >= 0.0) {
                return Err("`rel` and `abs` must be non-negative numbers".into());
            }
            Expect::Approx { expected, rel, abs }
        } else if let Some(v) = w.unordered {
            Expect::Unordered(collection(v, "unordered")?)
        } else if let Some(v) = w.set {
            Expect::Set(collection(v, "set")?)
        } else {
            Expect::Data(w.data.unwrap_or_default())
        })
    }
}

impl From<Expect> for ExpectWire {
    fn from(e: Expect) -> Self {
        let mut w = ExpectWire::default();
        match e {
            Expect::Value(v) => w.value = Some(v),
            Expect::Raises(r) => w.raises = Some(r),
            Expect::Approx { expected, rel, abs } => {
                w.approx = Some(expected);
                w.rel = Some(rel);
                w.abs = Some(abs);
            }
            Expect::Unordered(v) => w.unordered = Some(v),
            Expect::Set(v) => w.set = Some(v),
            Expect::Data(v) => w.data = Some(v),
        }
        w
    }
}

/// How two values are compared.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// `value`: types must match exactly. Otherwise (JSON kinds) lists match tuples and ints
    /// match floats of equal value.
    typed: bool,
    /// Tolerance for numbers (`approx`).
    tolerance: Option<(f64, f64)>,
}

const TYPED: Mode = Mode {
    typed: true,
    tolerance: None,
};
const LOOSE: Mode = Mode {
    typed: false,
    tolerance: None,
};

impl Expect {
    /// `Ok` when `actual` meets the expectation, else why not (for validation reports; never
    /// shown to the agent).
    pub fn check(&self, actual: &Actual) -> Result<(), String> {
        let value = match (self, actual) {
            (Expect::Raises(want), Actual::Raised { name, lookalike }) => {
                return if name == want && !lookalike {
                    Ok(())
                } else {
                    Err(format!("expected {want} to be raised, got {name}"))
                };
            }
            (Expect::Raises(want), Actual::Returned(v)) => {
                return Err(format!("expected {want} to be raised, got {}", v.display()))
            }
            (_, Actual::Raised { name, .. }) => return Err(format!("raised {name}")),
            (_, Actual::Returned(v)) => v,
        };
        let ok = match self {
            Expect::Raises(_) => false,
            Expect::Value(text) => match parse_literal(text) {
                Some(expected) => equal(&expected, value, TYPED),
                // Not a literal: the full repr must match (objects of the task's own classes).
                None => matches!(value, Value::Other { repr: Some(r), .. } if r == text),
            },
            Expect::Approx { expected, rel, abs } => equal(
                &Value::from_json(expected),
                value,
                Mode {
                    typed: false,
                    tolerance: Some((*rel, *abs)),
                },
            ),
            Expect::Data(expected) => equal(&Value::from_json(expected), value, LOOSE),
            Expect::Unordered(expected) => match (Value::from_json(expected), value) {
                (Value::List(want), Value::List(got) | Value::Tuple(got)) => {
                    multiset_equal(&want, got)
                }
                _ => false,
            },
            Expect::Set(expected) => match (Value::from_json(expected), value) {
                (
                    Value::List(want),
                    Value::Set(got) | Value::FrozenSet(got) | Value::List(got) | Value::Tuple(got),
                ) => set_equal(&want, got, LOOSE),
                _ => false,
            },
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {}, got {}",
                self.display(),
                value.display()
            ))
        }
    }

    fn display(&self) -> String {
        match self {
            Expect::Value(v) => v.clone(),
            Expect::Raises(r) => format!("raises {r}"),
            Expect::Approx { expected, rel, abs } => {
                format!("approx {expected} (rel {rel}, abs {abs})")
            }
            Expect::Unordered(v) => format!("unordered {v}"),
            Expect::Set(v) => format!("set {v}"),
            Expect::Data(v) => format!("data {v}"),
        }
    }

    /// A `value` of `True`/`False`: the verdict was computed in the sandbox, where the code
    /// under test can forge it (see `validate`).
    pub fn is_bool_value(&self) -> bool {
        matches!(self, Expect::Value(v) if v.trim() == "True" || v.trim() == "False")
    }
}

fn numbers_close(want: f64, got: f64, mode: Mode) -> bool {
    match mode.tolerance {
        Some((rel, abs)) => {
            if want.is_infinite() || got.is_infinite() {
                return want == got;
            }
            (want - got).abs() <= (rel * want.abs()).max(abs)
        }
        None => want == got,
    }
}

/// Whether `got` equals `want` under `mode`.
fn equal(want: &Value, got: &Value, mode: Mode) -> bool {
    use Value as V;
    match (want, got) {
        (V::None, V::None) => true,
        (V::Bool(a), V::Bool(b)) => a == b,
        (V::Str(a), V::Str(b)) => a == b,
        (V::Bytes(a), V::Bytes(b)) => a == b,
        (V::Int(a), V::Int(b)) if mode.tolerance.is_none() => a == b,
        (V::Float(a), V::Float(b)) if mode.typed => {
            // Typed means repr semantics: nan equals nan, 0.0 is not -0.0.
            (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
        }
        (V::Int(_) | V::Float(_), V::Int(_) | V::Float(_))
            if !mode.typed || mode.tolerance.is_some() =>
        {
            match (want.as_number(), got.as_number()) {
                (Some(a), Some(b)) => numbers_close(a, b, mode),
                _ => false,
            }
        }
        (V::List(a), V::List(b)) | (V::Tuple(a), V::Tuple(b)) => seq_equal(a, b, mode),
        (V::List(a), V::Tuple(b)) | (V::Tuple(a), V::List(b)) if !mode.typed => {
            seq_equal(a, b, mode)
        }
        (V::Set(a), V::Set(b)) | (V::FrozenSet(a), V::FrozenSet(b)) => set_equal(a, b, exact(mode)),
        (V::Dict(a), V::Dict(b)) => {
            a.len() == b.len()
                && a.iter().all(|(k, v)| {
                    b.iter()
                        .find(|(k2, _)| equal(k, k2, exact(mode)))
                        .is_some_and(|(_, v2)| equal(v, v2, mode))
                })
        }
        _ => false,
    }
}

/// `mode` without tolerance: keys and set elements are identities, never approximately equal.
fn exact(mode: Mode) -> Mode {
    Mode {
        tolerance: None,
        ..mode
    }
}

fn seq_equal(a: &[Value], b: &[Value], mode: Mode) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal(x, y, mode))
}

/// Multiset equality by greedy matching (equality is an equivalence here, so greedy is exact).
fn multiset_equal(want: &[Value], got: &[Value]) -> bool {
    if want.len() != got.len() {
        return false;
    }
    let mut used = vec![false; got.len()];
    want.iter().all(|w| {
        let slot = (0..got.len()).find(|&i| !used[i] && equal(w, &got[i], LOOSE));
        slot.map(|i| used[i] = true).is_some()
    })
}

fn set_equal(want: &[Value], got: &[Value], mode: Mode) -> bool {
    let contains = |items: &[Value], x: &Value| items.iter().any(|y| equal(x, y, mode));
    want.iter().all(|w| contains(got, w)) && got.iter().all(|g| contains(want, g))
}

// ---- Python literals -------------------------------------------------------------------------

/// Parses the `repr` of a plain value (what `ast.literal_eval` accepts, plus `inf`, `nan`,
/// `set()` and `frozenset(...)`), or `None` when `text` is not such a literal.
pub fn parse_literal(text: &str) -> Option<Value> {
    let mut parser = Literal {
        s: text.as_bytes(),
        text,
        i: 0,
        depth: 0,
    };
    let value = parser.value()?;
    parser.skip_ws();
    (parser.i == parser.s.len()).then_some(value)
}

struct Literal<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    depth: usize,
}

impl Literal<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.text[self.i..].starts_with(token) {
            let end = self.i + token.len();
            let alnum = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
            // A word token must not run on into an identifier (`Nonesuch`).
            if token.bytes().all(|b| b.is_ascii_alphabetic()) && self.s.get(end).is_some_and(alnum)
            {
                return false;
            }
            self.i = end;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let v = self.value_inner();
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self) -> Option<Value> {
        self.skip_ws();
        let c = *self.s.get(self.i)?;
        if self.eat("None") {
            return Some(Value::None);
        }
        if self.eat("True") {
            return Some(Value::Bool(true));
        }
        if self.eat("False") {
            return Some(Value::Bool(false));
        }
        if self.eat("inf") {
            return Some(Value::Float(f64::INFINITY));
        }
        if self.eat("nan") {
            return Some(Value::Float(f64::NAN));
        }
        if self.eat("set()") {
            return Some(Value::Set(Vec::new()));
        }
        if self.eat("frozenset(") {
            if self.eat(")") {
                return Some(Value::FrozenSet(Vec::new()));
            }
            let inner = self.value()?;
            if !self.eat(")") {
                return None;
            }
            return match inner {
                Value::Set(items) => Some(Value::FrozenSet(items)),
                _ => None,
            };
        }
        match c {
            b'[' => {
                self.i += 1;
                Some(Value::List(self.items(b']')?.0))
            }
            b'(' => {
                self.i += 1;
                let (items, trailing_comma) = self.items(b')')?;
                if items.len() == 1 && !trailing_comma {
                    return items.into_iter().next(); // parenthesised expression
                }
                Some(Value::Tuple(items))
            }
            b'{' => {
                self.i += 1;
                self.braces()
            }
            b'\'' | b'"' => self.string().map(Value::Str),
            b'b' if matches!(self.s.get(self.i + 1), Some(b'\'' | b'"')) => {
                self.i += 1;
                let s = self.string()?;
                // repr(bytes) escapes every non-ASCII byte, so each char is one byte.
                s.chars()
                    .map(|ch| u8::try_from(u32::from(ch)).ok())
                    .collect::<Option<Vec<u8>>>()
                    .map(Value::Bytes)
            }
            b'-' | b'+' | b'0'..=b'9' | b'.' => self.number(),
            _ => None,
        }
    }

    /// Comma-separated values up to `close`; whether a trailing comma was seen.
    fn items(&mut self, close: u8) -> Option<(Vec<Value>, bool)> {
        let mut items = Vec::new();
        let mut trailing = false;
        loop {
            self.skip_ws();
            if self.s.get(self.i) == Some(&close) {
                self.i += 1;
                return Some((items, trailing));
            }
            items.push(self.value()?);
            self.skip_ws();
            trailing = false;
            match self.s.get(self.i)? {
                b',' => {
                    self.i += 1;
                    trailing = true;
                }
                b if *b == close => {}
                _ => return None,
            }
        }
    }

    fn braces(&mut self) -> Option<Value> {
        self.skip_ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Some(Value::Dict(Vec::new()));
        }
        let first = self.value()?;
        self.skip_ws();
        if self.s.get(self.i) == Some(&b':') {
            self.i += 1;
            let mut pairs = vec![(first, self.value()?)];
            loop {
                self.skip_ws();
                match self.s.get(self.i)? {
                    b'}' => {
                        self.i += 1;
                        return Some(Value::Dict(pairs));
                    }
                    b',' => {
                        self.i += 1;
                        self.skip_ws();
                        if self.s.get(self.i) == Some(&b'}') {
                            continue;
                        }
                        let k = self.value()?;
                        if !self.eat(":") {
                            return None;
                        }
                        pairs.push((k, self.value()?));
                    }
                    _ => return None,
                }
            }
        }
        let mut items = vec![first];
        loop {
            self.skip_ws();
            match self.s.get(self.i)? {
                b'}' => {
                    self.i += 1;
                    return Some(Value::Set(items));
                }
                b',' => {
                    self.i += 1;
                    self.skip_ws();
                    if self.s.get(self.i) != Some(&b'}') {
                        items.push(self.value()?);
                    }
                }
                _ => return None,
            }
        }
    }

    fn number(&mut self) -> Option<Value> {
        let mut negative = false;
        if matches!(self.s.get(self.i), Some(b'-' | b'+')) {
            negative = self.s[self.i] == b'-';
            self.i += 1;
            self.skip_ws();
            if self.eat("inf") {
                return Some(Value::Float(if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }));
            }
        }
        let body_start = self.i;
        let mut is_float = false;
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'0'..=b'9' => {}
                b'.' | b'e' | b'E' => is_float = true,
                b'-' | b'+' if matches!(self.s[self.i - 1], b'e' | b'E') => {}
                _ => break,
            }
            self.i += 1;
        }
        let body = &self.text[body_start..self.i];
        if body.is_empty() || self.s.get(self.i).is_some_and(|b| b.is_ascii_alphabetic()) {
            return None; // complex numbers, hex and the like are not plain values here
        }
        let sign = if negative { "-" } else { "" };
        if is_float {
            format!("{sign}{body}")
                .parse::<f64>()
                .ok()
                .map(Value::Float)
        } else {
            normalise_int(&format!("{sign}{body}")).ok().map(Value::Int)
        }
    }

    fn string(&mut self) -> Option<String> {
        let quote = *self.s.get(self.i)?;
        self.i += 1;
        let mut out = String::new();
        let rest = &self.text[self.i..];
        let mut chars = rest.char_indices();
        while let Some((offset, ch)) = chars.next() {
            if ch as u32 == u32::from(quote) {
                self.i += offset + 1;
                return Some(out);
            }
            if ch != '\\' {
                out.push(ch);
                continue;
            }
            let (_, esc) = chars.next()?;
            let mut hex = |n: usize| -> Option<char> {
                let digits: String = (0..n).filter_map(|_| chars.next().map(|c| c.1)).collect();
                if digits.len() != n {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&digits, 16).ok()?)
            };
            out.push(match esc {
                '\\' => '\\',
                '\'' => '\'',
                '"' => '"',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'a' => '\x07',
                'b' => '\x08',
                'f' => '\x0c',
                'v' => '\x0b',
                '0' => '\0',
                'x' => hex(2)?,
                'u' => hex(4)?,
                'U' => hex(8)?,
                _ => return None,
            });
        }
        None
    }
}
