//! The TensorBoard writer's encoding primitives: the masked CRC-32C of TFRecord framing and
//! protobuf varints.

use agentrl_run::tensorboard::{masked_crc32c, put_varint};

#[test]
#[allow(clippy::manual_rotate)] // the mask as the format documentation spells it
fn crc32c_matches_the_documented_test_vector() {
    assert_eq!(crc32c::crc32c(b"Hello world!"), 0x7B98_E751);
    let c = 0x7B98_E751u32;
    assert_eq!(
        masked_crc32c(b"Hello world!"),
        ((c >> 15) | (c << 17)).wrapping_add(0xA282_EAD8)
    );
}

#[test]
fn varints_are_little_endian_base_128() {
    let mut out = Vec::new();
    put_varint(&mut out, 300);
    assert_eq!(out, [0xac, 0x02]);
    let mut out = Vec::new();
    put_varint(&mut out, (-1i64) as u64);
    assert_eq!(out.len(), 10);
}
