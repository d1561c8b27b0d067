//! Protobuf fields as kascade writes them (spans here, requests in the
//! exporter): keys and varints pushed straight into the buffer; varint
//! lengths and fixed-width fields by prost's wire-format primitives.

use prost::encoding::{WireType, encoded_len_varint, fixed32, fixed64};

/// A varint as protobuf writes it. prost's `encode_varint` writes each
/// byte through `BufMut` (a reserve and a copy per byte); lengths and keys
/// are nearly always one byte, and the span writer writes ten of them per
/// attribute (≈ 2 % of the collector's instructions, docs/benchmarks.md).
#[inline]
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// A field's key: its number and wire type.
#[inline]
fn put_key(buf: &mut Vec<u8>, field: u32, wire_type: WireType) {
    put_varint(buf, u64::from(field << 3 | wire_type as u32));
}

/// Length of a length-delimited field of `len` bytes with a one-byte key
/// (field numbers up to 15).
pub(crate) fn framed_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// The key and length of a length-delimited field whose `len` bytes follow.
#[inline]
pub(crate) fn len_prefix(buf: &mut Vec<u8>, field: u32, len: usize) {
    put_key(buf, field, WireType::LengthDelimited);
    put_varint(buf, len as u64);
}

#[inline]
pub(crate) fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    len_prefix(buf, field, data.len());
    buf.extend_from_slice(data);
}

pub(crate) fn varint(buf: &mut Vec<u8>, field: u32, v: u64) {
    put_key(buf, field, WireType::Varint);
    put_varint(buf, v);
}

pub(crate) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    fixed64::encode(field, &v, buf);
}

pub(crate) fn fixed32(buf: &mut Vec<u8>, field: u32, v: u32) {
    fixed32::encode(field, &v, buf);
}

/// The bytes [`kv_str`] writes (a one-byte field key).
pub(crate) fn kv_str_len(k: &str, v: &str) -> usize {
    framed_len(framed_len(k.len()) + framed_len(framed_len(v.len())))
}

/// The bytes [`kv_int`] writes (a one-byte field key).
pub(crate) fn kv_int_len(k: &str, v: i64) -> usize {
    framed_len(framed_len(k.len()) + framed_len(1 + encoded_len_varint(v as u64)))
}

/// A `KeyValue` with a string value as field `field`.
pub(crate) fn kv_str(buf: &mut Vec<u8>, field: u32, k: &str, v: &str) {
    let any = framed_len(v.len());
    let kv = framed_len(k.len()) + framed_len(any);
    // Room for all of it at once (keys of up to 5 bytes), not per piece.
    buf.reserve(5 + encoded_len_varint(kv as u64) + kv);
    len_prefix(buf, field, kv);
    bytes(buf, 1, k.as_bytes());
    len_prefix(buf, 2, any);
    bytes(buf, 1, v.as_bytes());
}

/// A `KeyValue` with an integer value as field `field`.
pub(crate) fn kv_int(buf: &mut Vec<u8>, field: u32, k: &str, v: i64) {
    let any = 1 + encoded_len_varint(v as u64);
    let kv = framed_len(k.len()) + framed_len(any);
    buf.reserve(5 + encoded_len_varint(kv as u64) + kv);
    len_prefix(buf, field, kv);
    bytes(buf, 1, k.as_bytes());
    len_prefix(buf, 2, any);
    varint(buf, 3, v as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use prost::Message as _;

    /// Field `field` holding `kv`, as prost encodes it.
    fn prost_field(field: u32, kv: &KeyValue) -> Vec<u8> {
        let mut buf = Vec::new();
        prost::encoding::message::encode(field, kv, &mut buf);
        buf
    }

    /// `written` (after `prefix` bytes) is field `field` holding `kv`:
    /// byte for byte as prost writes it, except that prost leaves out empty
    /// strings and zeros, which kascade writes (a reader decodes both alike).
    fn assert_written(written: &[u8], field: u32, kv: &KeyValue) {
        let theirs = prost_field(field, kv);
        let defaults = kv.key.is_empty()
            || matches!(
                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                Some(any_value::Value::StringValue(s)) if s.is_empty()
            )
            || matches!(
                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                Some(any_value::Value::IntValue(0))
            );
        if !defaults {
            assert_eq!(written, theirs, "field {field}, {kv:?}");
        }
        // The field's key, its length, then the message.
        let key_len = encoded_len_varint(u64::from(field << 3 | 2));
        let mut rest = &written[key_len..];
        let len = prost::encoding::decode_varint(&mut rest).unwrap() as usize;
        assert_eq!(rest.len(), len, "field {field}, {kv:?}");
        assert_eq!(&KeyValue::decode(rest).unwrap(), kv, "field {field}");
    }

    #[test]
    fn key_values_are_written_as_prost_writes_them() {
        // Lengths around each varint width: 1, 2 and 3 bytes.
        for len in [0, 1, 127, 128, 200, 16_383, 16_384, 70_000] {
            let key = "k".repeat(len % 300);
            let value = "v".repeat(len);
            for field in [3, 9, 15, 16, 2_047] {
                let mut ours = vec![0xAA];
                kv_str(&mut ours, field, &key, &value);
                let kv = KeyValue {
                    key: key.clone(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(value.clone())),
                    }),
                    ..Default::default()
                };
                assert_written(&ours[1..], field, &kv);
                let extra_key_byte = usize::from(field > 15);
                assert_eq!(ours.len() - 1, kv_str_len(&key, &value) + extra_key_byte);
                for int in [0, 1, 127, 128, 1 << 40, -1] {
                    let mut ours = Vec::new();
                    kv_int(&mut ours, field, &key, int);
                    let kv = KeyValue {
                        key: key.clone(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::IntValue(int)),
                        }),
                        ..Default::default()
                    };
                    assert_written(&ours, field, &kv);
                    assert_eq!(ours.len(), kv_int_len(&key, int) + extra_key_byte);
                }
            }
        }
        let mut ours = Vec::new();
        varint(&mut ours, 7, u64::MAX);
        let mut theirs = Vec::new();
        prost::encoding::uint64::encode(7, &u64::MAX, &mut theirs);
        assert_eq!(ours, theirs);
    }
}
