//! Ids of assembled traces. The Jaeger UI reloads a trace by id, possibly
//! from another frontend replica, long after the search: so the id carries
//! everything needed to assemble the trace again, and no shared cache is
//! required.
//!
//! Layout (16 bytes):
//! `object hash (8) ‖ first window, minutes since epoch (4) ‖ windows (1) ‖ mode<<4|scope (1) ‖ 'k' (1) ‖ check (1)`.
//! The object hash plus a window start is exactly a raw trace id (see
//! `model::raw_trace_id`), so decoding reads the searched object's raw trace
//! and learns who it is. The check byte rejects ids kascade did not make.

use xxhash_rust::xxh3::xxh3_64;

use super::assemble::Scope;
use super::display::Mode;
use super::raw::TraceIdBytes;

const MAGIC: u8 = b'k';

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AssembledId {
    pub object_hash: u64,
    /// Window start of the first window of the clip range, seconds since epoch
    /// (a multiple of 60).
    pub first_window: u64,
    /// Windows in the clip range, 1..=255.
    pub windows: u8,
    pub mode: Mode,
    pub scope: Scope,
}

impl AssembledId {
    pub fn encode(&self) -> TraceIdBytes {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.object_hash.to_be_bytes());
        let minutes = u32::try_from(self.first_window / 60).unwrap_or(u32::MAX);
        id[8..12].copy_from_slice(&minutes.to_be_bytes());
        id[12] = self.windows.max(1);
        id[13] = (self.mode.code() << 4) | self.scope.code();
        id[14] = MAGIC;
        id[15] = xxh3_64(&id[..15]) as u8;
        id
    }

    pub fn decode(id: &TraceIdBytes) -> Option<Self> {
        if id[14] != MAGIC || id[15] != xxh3_64(&id[..15]) as u8 || id[12] == 0 {
            return None;
        }
        Some(Self {
            object_hash: u64::from_be_bytes(id[..8].try_into().ok()?),
            first_window: u64::from(u32::from_be_bytes(id[8..12].try_into().ok()?)) * 60,
            windows: id[12],
            mode: Mode::from_code(id[13] >> 4)?,
            scope: Scope::from_code(id[13] & 0x0f)?,
        })
    }

    /// Window starts (seconds) of the clip range, for a window width in seconds.
    pub fn window_starts(&self, width: u64) -> Vec<u64> {
        (0..u64::from(self.windows))
            .map(|i| self.first_window.saturating_add(i.saturating_mul(width)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_foreign_ids() {
        for mode in Mode::ALL {
            for scope in Scope::ALL {
                let id = AssembledId {
                    object_hash: 0xdead_beef_0123_4567,
                    first_window: 1_795_000_000 / 1800 * 1800,
                    windows: 3,
                    mode,
                    scope,
                };
                assert_eq!(AssembledId::decode(&id.encode()), Some(id));
            }
        }
        let id = AssembledId {
            object_hash: 1,
            first_window: 1800,
            windows: 1,
            mode: Mode::Tracing,
            scope: Scope::Full,
        }
        .encode();
        let mut tampered = id;
        tampered[3] ^= 1;
        assert_eq!(AssembledId::decode(&tampered), None);
        assert_eq!(AssembledId::decode(&[7u8; 16]), None);
    }
}
