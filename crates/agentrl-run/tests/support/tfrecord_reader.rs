//! An independent reader of TensorBoard event files, written from the format documentation
//! alone (TensorBoard's `record_writer.py`, `event.proto`, `summary.proto`, and the protobuf
//! wire-format spec), sharing no code with agentrl's writer: its own bitwise CRC-32C from the
//! Castagnoli polynomial, its own varint and field parser, its own framing checks. Shared by
//! the tests of `agentrl-run` and of the binary (`#[path]`-included; not a test target).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

/// CRC-32C, bit by bit, reflected polynomial 0x82F63B78 (RFC 3720, appendix B.4).
pub fn crc32c_bitwise(bytes: &[u8]) -> u32 {
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

// Spelled as TensorBoard's record_writer.py writes the mask, not as a rotate.
#[allow(clippy::manual_rotate)]
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
pub struct Event {
    pub wall_time: f64,
    pub step: i64,
    pub file_version: Option<String>,
    /// (tag, simple_value) of the summary's values.
    pub scalars: Vec<(String, f32)>,
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
pub fn read_events(path: &Path) -> Vec<Event> {
    let bytes = std::fs::read(path).unwrap();
    let mut events = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let header = &bytes[at..at + 8];
        let len = u64::from_le_bytes(header.try_into().unwrap()) as usize;
        let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        assert_eq!(
            len_crc,
            masked(header),
            "length CRC of the record at byte {at}"
        );
        let data = &bytes[at + 12..at + 12 + len];
        let data_crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(
            data_crc,
            masked(data),
            "data CRC of the record at byte {at}"
        );
        events.push(decode_event(data));
        at += 16 + len;
    }
    events
}
