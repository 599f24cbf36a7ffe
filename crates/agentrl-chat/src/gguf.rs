//! The metadata of a GGUF model file: the key/value header that carries a llama.cpp model's
//! tokenizer (tokens, merges, token types, pre-tokenizer name, special ids) and chat template.
//!
//! Where it sits: a `.gguf` path given as `--model` → [`GgufMetadata::read`] →
//! [`crate::qwen::QwenTokenizer::from_gguf`] and [`crate::template::ChatTemplate::from_gguf`]. The
//! tensors after the header are the model crate's business (candle's `gguf_file` reads them).
//!
//! Why a reader of our own: candle's `gguf_file` is the only maintained Rust reader we know of,
//! and it lives in the tensor stack, which this crate must build without (DESIGN.md). The header
//! is a flat, documented format (ggml's `docs/gguf.md`): magic, version, tensor count, key
//! count, then typed key/value pairs; this file reads exactly that and stops before the tensor
//! infos. Versions 2 and 3 (64-bit counts) are read; version 1 files predate 2023-08 and are
//! refused with a clear error.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{ChatError, Result};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Longest string or array the reader accepts (a corrupt length must not allocate gigabytes).
const MAX_LEN: u64 = 1 << 28;

/// Whether `path` is a GGUF file (a regular file starting with [`GGUF_MAGIC`]).
pub fn is_gguf_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut file| file.read_exact(&mut magic))
            .is_ok()
        && &magic == GGUF_MAGIC
}

/// The key/value metadata of one GGUF file, values as JSON (integers as numbers, strings as
/// strings, arrays as arrays).
#[derive(Debug, Clone)]
pub struct GgufMetadata {
    path: PathBuf,
    version: u32,
    tensor_count: u64,
    values: BTreeMap<String, Value>,
}

impl GgufMetadata {
    /// Reads the header of `path`. Errors name the file and what was malformed.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|source| ChatError::Io {
            path: path.clone(),
            source,
        })?;
        let mut reader = HeaderReader {
            inner: BufReader::with_capacity(1 << 20, file),
            path: &path,
        };
        let mut magic = [0u8; 4];
        reader.bytes(&mut magic, "magic")?;
        if &magic != GGUF_MAGIC {
            return Err(reader.bad("magic", format!("starts with {magic:?}, not b\"GGUF\"")));
        }
        let version = reader.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(reader.bad(
                "version",
                format!("GGUF version {version} is not supported (2 and 3 are)"),
            ));
        }
        let tensor_count = reader.u64("tensor_count")?;
        let kv_count = reader.u64("metadata_kv_count")?;
        let mut values = BTreeMap::new();
        for _ in 0..kv_count {
            let key = reader.string("a metadata key")?;
            let value_type = reader.u32(&key)?;
            let value = reader.value(value_type, &key)?;
            values.insert(key, value);
        }
        Ok(Self {
            path,
            version,
            tensor_count,
            values,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn tensor_count(&self) -> u64 {
        self.tensor_count
    }

    /// One value by key (`general.architecture`, `tokenizer.ggml.tokens`, …).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// Every key, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// A value that must be present, or an error naming the key and the file.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| self.field_error(key, "missing"))
    }

    /// A string value, or an error naming the key.
    pub fn require_str(&self, key: &str) -> Result<&str> {
        self.require(key)?
            .as_str()
            .ok_or_else(|| self.field_error(key, "not a string"))
    }

    /// An unsigned integer value, if present; an error if present and not one.
    pub fn optional_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.field_error(key, "not an unsigned integer")),
        }
    }

    /// A boolean value, if present; an error if present and not one.
    pub fn optional_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => value
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.field_error(key, "not a boolean")),
        }
    }

    /// An array of strings (the tokens, the merges), or an error naming the key.
    pub fn require_strings(&self, key: &str) -> Result<Vec<&str>> {
        let array = self
            .require(key)?
            .as_array()
            .ok_or_else(|| self.field_error(key, "not an array"))?;
        array
            .iter()
            .enumerate()
            .map(|(index, value)| {
                value.as_str().ok_or_else(|| {
                    self.field_error(key, &format!("element {index} is not a string"))
                })
            })
            .collect()
    }

    /// The error for a key that is missing or malformed.
    pub fn field_error(&self, key: &str, message: &str) -> ChatError {
        ChatError::BadField {
            path: self.path.clone(),
            field: key.to_string(),
            message: message.to_string(),
        }
    }
}

/// Little-endian reads of the header's primitive types, with errors naming the field.
struct HeaderReader<'p, R> {
    inner: R,
    path: &'p Path,
}

impl<R: Read> HeaderReader<'_, R> {
    fn bad(&self, field: &str, message: String) -> ChatError {
        ChatError::BadField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            message,
        }
    }

    fn bytes(&mut self, buf: &mut [u8], field: &str) -> Result<()> {
        self.inner
            .read_exact(buf)
            .map_err(|err| self.bad(field, format!("truncated header ({err})")))
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.bytes(&mut buf, field)?;
        Ok(buf)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn length(&mut self, field: &str) -> Result<usize> {
        let len = self.u64(field)?;
        if len > MAX_LEN {
            return Err(self.bad(
                field,
                format!("length {len} is implausible (corrupt file?)"),
            ));
        }
        usize::try_from(len).map_err(|_| self.bad(field, format!("length {len} too large")))
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let len = self.length(field)?;
        let mut buf = vec![0u8; len];
        self.bytes(&mut buf, field)?;
        String::from_utf8(buf).map_err(|err| self.bad(field, format!("not UTF-8 ({err})")))
    }

    /// One value of GGUF type `value_type` (ggml's `gguf_type` numbering).
    fn value(&mut self, value_type: u32, key: &str) -> Result<Value> {
        Ok(match value_type {
            0 => Value::from(u8::from_le_bytes(self.array(key)?)),
            1 => Value::from(i8::from_le_bytes(self.array(key)?)),
            2 => Value::from(u16::from_le_bytes(self.array(key)?)),
            3 => Value::from(i16::from_le_bytes(self.array(key)?)),
            4 => Value::from(self.u32(key)?),
            5 => Value::from(i32::from_le_bytes(self.array(key)?)),
            6 => Value::from(f64::from(f32::from_le_bytes(self.array(key)?))),
            7 => Value::from(self.array::<1>(key)?[0] != 0),
            8 => Value::from(self.string(key)?),
            9 => {
                let element_type = self.u32(key)?;
                if element_type == 9 {
                    return Err(self.bad(key, "nested arrays are not supported".into()));
                }
                let len = self.length(key)?;
                let mut elements = Vec::with_capacity(len.min(1 << 20));
                for _ in 0..len {
                    elements.push(self.value(element_type, key)?);
                }
                Value::Array(elements)
            }
            10 => Value::from(self.u64(key)?),
            11 => Value::from(i64::from_le_bytes(self.array(key)?)),
            12 => Value::from(f64::from_le_bytes(self.array(key)?)),
            other => return Err(self.bad(key, format!("unknown value type {other}"))),
        })
    }
}
