//! Protobuf fields as kascade writes them (spans here, requests in the
//! exporter), on prost's wire-format primitives.

use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, fixed32, fixed64};

/// Length of a length-delimited field of `len` bytes with a one-byte key
/// (field numbers up to 15).
pub fn framed_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// The key and length of a length-delimited field whose `len` bytes follow.
pub fn len_prefix(buf: &mut Vec<u8>, field: u32, len: usize) {
    encode_key(field, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

pub fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    len_prefix(buf, field, data.len());
    buf.extend_from_slice(data);
}

pub fn varint(buf: &mut Vec<u8>, field: u32, v: u64) {
    encode_key(field, WireType::Varint, buf);
    encode_varint(v, buf);
}

pub fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    fixed64::encode(field, &v, buf);
}

pub fn fixed32(buf: &mut Vec<u8>, field: u32, v: u32) {
    fixed32::encode(field, &v, buf);
}

/// The bytes [`kv_str`] writes (a one-byte field key).
pub fn kv_str_len(k: &str, v: &str) -> usize {
    framed_len(framed_len(k.len()) + framed_len(framed_len(v.len())))
}

/// The bytes [`kv_int`] writes (a one-byte field key).
pub fn kv_int_len(k: &str, v: i64) -> usize {
    framed_len(framed_len(k.len()) + framed_len(1 + encoded_len_varint(v as u64)))
}

/// A `KeyValue` with a string value as field `field`.
pub fn kv_str(buf: &mut Vec<u8>, field: u32, k: &str, v: &str) {
    let any = framed_len(v.len());
    len_prefix(buf, field, framed_len(k.len()) + framed_len(any));
    bytes(buf, 1, k.as_bytes());
    len_prefix(buf, 2, any);
    bytes(buf, 1, v.as_bytes());
}

/// A `KeyValue` with an integer value as field `field`.
pub fn kv_int(buf: &mut Vec<u8>, field: u32, k: &str, v: i64) {
    let any = 1 + encoded_len_varint(v as u64);
    len_prefix(buf, field, framed_len(k.len()) + framed_len(any));
    bytes(buf, 1, k.as_bytes());
    len_prefix(buf, 2, any);
    varint(buf, 3, v as u64);
}
