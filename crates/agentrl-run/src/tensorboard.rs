//! TensorBoard event files: the second sink of a run's scalars, next to `metrics.jsonl`, so
//! `tensorboard --logdir runs/` opens any run as it is.
//!
//! Where it sits: [`crate::RunDir::log_metrics`] hands each step's [`MetricLine`] to
//! [`EventFile::append`]; nothing reads these files inside agentrl (the monitor reads
//! `metrics.jsonl`).
//!
//! Format (TensorBoard's `summary/writer/record_writer.py` and `compat/proto/event.proto`,
//! `summary.proto`): a file `events.out.tfevents.<unix seconds>.<host>` of TFRecords, each
//!
//! ```text
//! u64 length (LE) · u32 masked_crc32c(length bytes) · data · u32 masked_crc32c(data)
//! masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xA282EAD8, c = CRC-32C(x)
//! ```
//!
//! holding one `Event` proto: first `Event{wall_time = 1: double, file_version = 3:
//! "brain.Event:2"}`, then per step `Event{wall_time, step = 2: int64, summary = 5:
//! Summary{value = 1: [Value{tag = 1: string, simple_value = 2: float}]}}`.
//!
//! Why the protobuf is encoded by hand rather than with `prost`: the writer needs five fields
//! of three messages, about thirty lines of wire format (varint keys, fixed-width floats,
//! length-delimited strings); `prost` without build-time `protoc` would still mean writing
//! the message structs by hand plus a proc-macro dependency, for no field we do not already
//! write here. The CRC is the `crc32c` crate's (hardware-accelerated, maintained).
//!
//! A resumed run starts a new event file; TensorBoard merges the files of one directory.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::metrics::MetricLine;

/// `brain.Event:2`: the file version TensorBoard's readers expect in the first record.
const FILE_VERSION: &str = "brain.Event:2";

/// One event file of a run, appended to step by step (each step's records are written and
/// flushed in one go).
#[derive(Debug)]
pub struct EventFile {
    path: PathBuf,
    file: File,
}

impl EventFile {
    /// Creates `dir/events.out.tfevents.<unix seconds>.<host>` (a suffix `.N` if that name is
    /// taken) and writes its file-version record.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let now = unix_seconds();
        let stem = format!("events.out.tfevents.{}.{}", now as u64, host_name());
        let mut path = dir.join(&stem);
        let mut n = 1;
        while path.exists() {
            path = dir.join(format!("{stem}.{n}"));
            n += 1;
        }
        let mut options = OpenOptions::new();
        options.create_new(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o644);
        }
        let file = options
            .open(&path)
            .with_context(|| format!("creating the TensorBoard event file {}", path.display()))?;
        let mut events = Self { path, file };
        let mut first = Vec::new();
        put_double(&mut first, 1, now);
        put_bytes(&mut first, 3, FILE_VERSION.as_bytes());
        events.write_records(&[first])?;
        Ok(events)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one scalar event per metric of `line` (in name order), stamped with the
    /// line's step and the current time.
    pub fn append(&mut self, line: &MetricLine) -> anyhow::Result<()> {
        let wall_time = unix_seconds();
        let records: Vec<Vec<u8>> = line
            .scalars
            .iter()
            .map(|(tag, &value)| scalar_event(wall_time, line.step as i64, tag, value as f32))
            .collect();
        self.write_records(&records)
    }

    fn write_records(&mut self, events: &[Vec<u8>]) -> anyhow::Result<()> {
        let mut bytes = Vec::new();
        for event in events {
            frame_record(&mut bytes, event);
        }
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.flush())
            .with_context(|| format!("appending to {}", self.path.display()))
    }
}

/// An `Event` with one scalar `Summary.Value`.
fn scalar_event(wall_time: f64, step: i64, tag: &str, value: f32) -> Vec<u8> {
    let mut summary_value = Vec::new();
    put_bytes(&mut summary_value, 1, tag.as_bytes());
    put_key(&mut summary_value, 2, WIRE_FIXED32);
    summary_value.extend_from_slice(&value.to_le_bytes());
    let mut summary = Vec::new();
    put_bytes(&mut summary, 1, &summary_value);
    let mut event = Vec::new();
    put_double(&mut event, 1, wall_time);
    put_key(&mut event, 2, WIRE_VARINT);
    // int64 is encoded as the two's-complement u64 varint.
    put_varint(&mut event, step as u64);
    put_bytes(&mut event, 5, &summary);
    event
}

/// Appends one TFRecord holding `data`.
pub fn frame_record(out: &mut Vec<u8>, data: &[u8]) {
    let length = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// TFRecord's masked CRC-32C: the CRC rotated right by 15 bits plus a constant, so a CRC
/// computed over data that itself contains CRCs does not cancel out.
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xA282_EAD8)
}

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

// Public for the integration tests (tests/run/tensorboard_encoding.rs).
#[doc(hidden)]
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn put_double(out: &mut Vec<u8>, field: u32, value: f64) {
    put_key(out, field, WIRE_FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The machine's host name as a file-name component (`localhost` where unknown).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    #[cfg(unix)]
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    #[cfg(not(unix))]
    let rc = -1;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    if rc != 0 || name.is_empty() {
        "localhost".to_string()
    } else {
        name
    }
}
