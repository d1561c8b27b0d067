//! The values a redaction replaced, kept as hashes so that a message quoting
//! one (a refused write's Status message, a Kubernetes Event's message about
//! the object) can have it replaced by the same marker, without the value
//! itself staying in memory.
//!
//! A message is searched for each length of value in one pass: a rolling
//! (polynomial) hash of every window of that length, then, where it equals
//! a value's, the window's keyed xxh3 against the value's. So the work is
//! the message's length times the number of distinct lengths (at most
//! [`MAX_VALUES`]), whatever the values' lengths.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::MIN_SCRUBBED_BYTES;
use crate::json::{JsonValueTrait as _, Value, ValueRef};

/// Values kept for one object: the longest (the most telling) when it hid
/// more (a Secret with hundreds of keys).
pub(crate) const MAX_VALUES: usize = 64;

/// Base of the rolling hash (odd, so every power is invertible mod 2^64).
const BASE: u64 = 0x0100_0000_01b3;

/// What a redaction replaced, as `(value, marker)` pairs; the values
/// replaced whole are spelled out (a Secret's base64 values decoded too,
/// every string of a value that was not one).
#[derive(Default)]
pub(super) struct Sink(Option<Vec<(String, String)>>);

impl Sink {
    /// A sink that keeps what it is told.
    pub(super) fn keeping() -> Sink {
        Sink(Some(Vec::new()))
    }

    /// A sink that keeps nothing (nothing is asked of the redaction).
    pub(super) fn none() -> Sink {
        Sink(None)
    }

    /// `original` was replaced by `marker`.
    pub(super) fn note(&mut self, original: &Value, marker: &Value) {
        let (Some(out), Some(marker)) = (self.0.as_mut(), marker.as_str()) else {
            return;
        };
        if let ValueRef::String(value) = original.as_ref() {
            use base64::Engine as _;
            if let Some(decoded) = base64::engine::general_purpose::STANDARD
                .decode(value)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
            {
                out.push((decoded, marker.to_string()));
            }
            out.push((value.to_string(), marker.to_string()));
        } else {
            let mut leaves = Vec::new();
            string_leaves(original, &mut leaves);
            out.extend(leaves.into_iter().map(|l| (l, marker.to_string())));
            out.push((crate::json::to_text(original), marker.to_string()));
        }
    }

    pub(super) fn into_pairs(self) -> Vec<(String, String)> {
        self.0.unwrap_or_default()
    }
}

/// Every string in `v` (objects are at most `MAX_OBJECT_DEPTH` deep).
fn string_leaves(v: &Value, out: &mut Vec<String>) {
    match v.as_ref() {
        ValueRef::String(s) => out.push(s.to_string()),
        ValueRef::Object(m) => m.iter().for_each(|(_, v)| string_leaves(v, out)),
        ValueRef::Array(a) => a.iter().for_each(|v| string_leaves(v, out)),
        _ => {}
    }
}

/// One value hidden: its length, rolling hash and keyed hash, and its marker.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    len: usize,
    rolling: u64,
    keyed: u64,
    marker: Box<str>,
}

/// The values redaction replaced in an object (see the module docs), as
/// hashes keyed by the redactor's key; empty when it replaced none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenValues {
    /// Longest first.
    entries: Vec<Entry>,
    seed: u64,
}

fn rolling(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |h, &b| {
        h.wrapping_mul(BASE).wrapping_add(u64::from(b))
    })
}

impl HiddenValues {
    /// From what a redaction replaced; values shorter than
    /// [`MIN_SCRUBBED_BYTES`] are left out (they would match ordinary
    /// words), and past [`MAX_VALUES`] the shortest.
    pub(super) fn new(pairs: Vec<(String, String)>, seed: u64) -> HiddenValues {
        let mut entries: Vec<Entry> = pairs
            .into_iter()
            .filter(|(value, _)| value.len() >= MIN_SCRUBBED_BYTES)
            .map(|(value, marker)| Entry {
                len: value.len(),
                rolling: rolling(value.as_bytes()),
                keyed: xxh3_64_with_seed(value.as_bytes(), seed),
                marker: marker.into(),
            })
            .collect();
        entries.sort_by(|a, b| b.len.cmp(&a.len).then(a.keyed.cmp(&b.keyed)));
        entries.dedup_by(|a, b| a.len == b.len && a.keyed == b.keyed);
        entries.truncate(MAX_VALUES);
        HiddenValues { entries, seed }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes kept (for a cache's weight).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .entries
                .iter()
                .map(|e| std::mem::size_of::<Entry>() + e.marker.len())
                .sum::<usize>()
    }

    /// `self` with `older`'s values it lacks (an earlier version's), within
    /// [`MAX_VALUES`].
    pub fn merged(&self, older: &HiddenValues) -> HiddenValues {
        let mut entries = self.entries.clone();
        for e in &older.entries {
            if entries.len() >= MAX_VALUES {
                break;
            }
            if !entries.iter().any(|k| k.len == e.len && k.keyed == e.keyed) {
                entries.push(e.clone());
            }
        }
        entries.sort_by(|a, b| b.len.cmp(&a.len).then(a.keyed.cmp(&b.keyed)));
        HiddenValues {
            entries,
            seed: self.seed,
        }
    }

    /// `message` with every value kept replaced by its marker (at each
    /// place the longest value found there); `None` when none occurs.
    pub fn scrub(&self, message: &str) -> Option<String> {
        let bytes = message.as_bytes();
        // (start, end, marker) of every occurrence.
        let mut found: Vec<(usize, usize, &str)> = Vec::new();
        let mut at = 0;
        while at < self.entries.len() {
            let len = self.entries[at].len;
            let same = self.entries[at..]
                .iter()
                .take_while(|e| e.len == len)
                .count();
            let group = &self.entries[at..at + same];
            at += same;
            if len > bytes.len() {
                continue;
            }
            // BASE^(len-1), to take the leaving byte out of the window.
            let top = (1..len).fold(1u64, |p, _| p.wrapping_mul(BASE));
            let mut h = rolling(&bytes[..len]);
            for start in 0..=bytes.len() - len {
                if start > 0 {
                    let out = u64::from(bytes[start - 1]).wrapping_mul(top);
                    h = h
                        .wrapping_sub(out)
                        .wrapping_mul(BASE)
                        .wrapping_add(u64::from(bytes[start + len - 1]));
                }
                let Some(e) = group.iter().find(|e| e.rolling == h) else {
                    continue;
                };
                let end = start + len;
                if message.is_char_boundary(start)
                    && message.is_char_boundary(end)
                    && xxh3_64_with_seed(&bytes[start..end], self.seed) == e.keyed
                {
                    found.push((start, end, &e.marker));
                }
            }
        }
        if found.is_empty() {
            return None;
        }
        // Leftmost first, the longest there; overlapping ones left.
        found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = String::with_capacity(message.len());
        let mut copied = 0;
        for (start, end, marker) in found {
            if start < copied {
                continue;
            }
            out.push_str(&message[copied..start]);
            out.push_str(marker);
            copied = end;
        }
        out.push_str(&message[copied..]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hidden(values: &[&str]) -> HiddenValues {
        HiddenValues::new(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| (v.to_string(), format!("<redacted:{i:08x}>")))
                .collect(),
            7,
        )
    }

    #[test]
    fn every_occurrence_is_replaced_the_longest_first() {
        let h = hidden(&["hunter2pass", "hunter2passphrase", "xyz"]);
        assert_eq!(
            h.scrub("a hunter2passphrase, then hunter2pass; hunter2pass")
                .as_deref(),
            Some("a <redacted:00000001>, then <redacted:00000000>; <redacted:00000000>")
        );
        // Shorter than MIN_SCRUBBED_BYTES: left.
        assert_eq!(h.scrub("xyz"), None);
        assert_eq!(h.scrub(""), None);
        assert_eq!(h.scrub("hunter2pas"), None);
        assert_eq!(
            h.scrub("hunter2pass").as_deref(),
            Some("<redacted:00000000>")
        );
    }

    #[test]
    fn multibyte_text_around_values_is_kept_and_nothing_panics() {
        let h = hidden(&["s3cr3t-ü", "ü-ü-ü"]);
        assert_eq!(
            h.scrub("é s3cr3t-ü é ü-ü-ü").as_deref(),
            Some("é <redacted:00000000> é <redacted:00000001>")
        );
        for s in ["ü", "üüüüüüüüüü", "s3cr3t-", "\u{10ffff}\u{10ffff}"] {
            assert_eq!(h.scrub(s), None, "{s}");
        }
    }

    #[test]
    fn values_are_bounded_and_merged_without_duplicates() {
        let many: Vec<String> = (0..200).map(|i| format!("value-{i:04}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let h = hidden(&refs);
        assert_eq!(h.len(), MAX_VALUES);
        let a = hidden(&["first-value"]);
        let b = hidden(&["first-value", "second-value"]);
        assert_eq!(a.merged(&b).len(), 2);
        assert!(a.merged(&b).scrub("second-value").is_some());
    }
}
