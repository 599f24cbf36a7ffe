//! Reads the TensorBoard event files a run writes with a reader written here from the format
//! documentation alone (TensorBoard's `record_writer.py`, `event.proto`, `summary.proto`, and
//! the protobuf wire-format spec), sharing no code with the writer: its own bitwise CRC-32C
//! from the Castagnoli polynomial, its own varint and field parser, its own framing checks.

use std::collections::BTreeMap;
use std::path::Path;

use agentrl_run::{MetricLine, RunDir};

/// CRC-32C, bit by bit, reflected polynomial 0x82F63B78 (RFC 3720, appendix B.4).
fn crc32c_bitwise(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn masked(bytes: &[u8]) -> u32 {
    let c = crc32c_bitwise(bytes);
    ((c >> 15) | (c << 17)).wrapping_add(0xA282_EAD8)
}

/// A protobuf field value as the wire format carries it.
#[derive(Debug, Clone)]
enum Wire {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return value;
        }
        shift += 7;
        assert!(shift < 64, "varint too long");
    }
}

/// Every field of one message, by field number, in order.
fn parse_message(bytes: &[u8]) -> BTreeMap<u64, Vec<Wire>> {
    let mut fields: BTreeMap<u64, Vec<Wire>> = BTreeMap::new();
    let mut at = 0;
    while at < bytes.len() {
        let key = read_varint(bytes, &mut at);
        let value = match key & 7 {
            0 => Wire::Varint(read_varint(bytes, &mut at)),
            1 => {
                let v = bytes[at..at + 8].try_into().unwrap();
                at += 8;
                Wire::Fixed64(v)
            }
            2 => {
                let len = read_varint(bytes, &mut at) as usize;
                let v = bytes[at..at + len].to_vec();
                at += len;
                Wire::Bytes(v)
            }
            5 => {
                let v = bytes[at..at + 4].try_into().unwrap();
                at += 4;
                Wire::Fixed32(v)
            }
            other => panic!("unexpected wire type {other}"),
        };
        fields.entry(key >> 3).or_default().push(value);
    }
    fields
}

/// What one Event holds, as TensorBoard reads it.
#[derive(Debug, Default)]
struct Event {
    wall_time: f64,
    step: i64,
    file_version: Option<String>,
    /// (tag, simple_value) of the summary's values.
    scalars: Vec<(String, f32)>,
}

fn decode_event(bytes: &[u8]) -> Event {
    let fields = parse_message(bytes);
    let mut event = Event::default();
    for (number, values) in fields {
        for value in values {
            match (number, value) {
                (1, Wire::Fixed64(b)) => event.wall_time = f64::from_le_bytes(b),
                (2, Wire::Varint(v)) => event.step = v as i64,
                (3, Wire::Bytes(b)) => event.file_version = Some(String::from_utf8(b).unwrap()),
                (5, Wire::Bytes(summary)) => {
                    for value in parse_message(&summary).remove(&1).unwrap_or_default() {
                        let Wire::Bytes(value) = value else {
                            panic!("Summary.value is a message")
                        };
                        let v = parse_message(&value);
                        let tag = match &v[&1][0] {
                            Wire::Bytes(b) => String::from_utf8(b.clone()).unwrap(),
                            w => panic!("Value.tag is a string, got {w:?}"),
                        };
                        let simple = match &v[&2][0] {
                            Wire::Fixed32(b) => f32::from_le_bytes(*b),
                            w => panic!("Value.simple_value is a float, got {w:?}"),
                        };
                        event.scalars.push((tag, simple));
                    }
                }
                (n, w) => panic!("unexpected Event field {n}: {w:?}"),
            }
        }
    }
    event
}

/// Every record of an event file, with both CRCs checked.
fn read_events(path: &Path) -> Vec<Event> {
    let bytes = std::fs::read(path).unwrap();
    let mut events = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let header = &bytes[at..at + 8];
        let len = u64::from_le_bytes(header.try_into().unwrap()) as usize;
        let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        assert_eq!(len_crc, masked(header), "length CRC of the record at byte {at}");
        let data = &bytes[at + 12..at + 12 + len];
        let data_crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(data_crc, masked(data), "data CRC of the record at byte {at}");
        events.push(decode_event(data));
        at += 16 + len;
    }
    events
}

#[test]
fn the_independent_crc_matches_the_documented_vector() {
    assert_eq!(crc32c_bitwise(b"Hello world!"), 0x7B98_E751);
}

#[test]
fn a_runs_event_file_reads_back_as_tensorboard_reads_it() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let run = RunDir::create(tmp.path(), Some("tb"))?;
    run.write_config("a = 1")?;
    for step in 1..=3usize {
        let mut line = MetricLine::new(step);
        line.set("critic/rewards/mean", step as f64 / 4.0)
            .set("actor/entropy", 1.5 - step as f64 * 0.25)
            .set("actor/ppo_kl", if step == 3 { f64::NAN } else { 1e-3 });
        run.log_metrics(&line)?;
    }
    let files = run.event_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let parts: Vec<&str> = name.split('.').collect();
    assert_eq!(&parts[..3], ["events", "out", "tfevents"], "{name}");
    assert!(parts[3].parse::<u64>()? > 1_600_000_000, "{name}: unix seconds");
    assert!(!parts[4].is_empty(), "{name}: host");

    let events = read_events(&files[0]);
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    assert!(events[0].scalars.is_empty());
    let mut by_tag: BTreeMap<String, Vec<(i64, f32)>> = BTreeMap::new();
    for e in &events[1..] {
        assert!(e.wall_time >= events[0].wall_time);
        for (tag, v) in &e.scalars {
            by_tag.entry(tag.clone()).or_default().push((e.step, *v));
        }
    }
    assert_eq!(
        by_tag["critic/rewards/mean"],
        [(1, 0.25), (2, 0.5), (3, 0.75)]
    );
    assert_eq!(by_tag["actor/entropy"], [(1, 1.25), (2, 1.0), (3, 0.75)]);
    let kl = &by_tag["actor/ppo_kl"];
    assert_eq!(kl[0], (1, 1e-3));
    assert!(kl[2].1.is_nan(), "a diverged value stays NaN in TensorBoard");

    // The same scalars are in metrics.jsonl.
    let lines = agentrl_run::read_metrics(&run.metrics_path())?;
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1].get("actor/entropy"), Some(1.0));
    Ok(())
}
