//! Ids of assembled traces. The Jaeger UI reloads a trace by id, possibly
//! from another frontend replica, long after the search: so the id carries
//! everything needed to assemble the trace again, and no shared cache is
//! required. It carries the clip end (the search's end, to the second) too:
//! a search after new writes gets a new id, so neither the frontend's cache
//! nor the UI's shows the trace as it was at an earlier search, and a reload
//! shows what the first assembly showed.
//!
//! Layout (16 bytes):
//! `object hash (8) ‖ mode high bit (1 bit) first window, minutes since epoch
//! (31 bits) ‖ all siblings (1 bit) clip end, seconds after the first window
//! (23 bits) ‖ mode low bits (2 bits) scope (2 bits) check (4 bits)`.
//! The all-siblings bit (the search tag `siblings=all`) was the clip end's
//! top bit, which no clip range of [`MAX_WINDOWS`] windows narrower than
//! 9 hours reaches: earlier ids decode as they were.
//! The mode's high bit came with the fifth mode (`cascade`): minutes since
//! the epoch stay below 2^31 until the year 6053, so the ids of the first
//! four modes are what they were.
//! The object hash plus a window start is exactly a raw trace id (see
//! `model::raw_trace_id`), so decoding reads the searched object's raw trace
//! and learns who it is. The check bits, and a clip range of at most
//! [`MAX_WINDOWS`] windows, reject most ids kascade did not make; one that
//! slips through names no raw trace and finds nothing.

use xxhash_rust::xxh3::xxh3_64;

use super::assemble::Scope;
use super::display::Mode;
use super::raw::TraceIdBytes;

/// Windows one assembled trace spans at most.
pub(crate) const MAX_WINDOWS: u64 = 255;
/// The clip end lies at most this many seconds after the first window.
const MAX_END_OFFSET: u64 = (1 << 23) - 1;
/// In the id's byte 12: every object of a wide level is shown.
const ALL_SIBLINGS: u8 = 0x80;
/// The first window's minutes: the bits below the mode's high bit.
const MINUTES_MASK: u32 = (1 << 31) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AssembledId {
    pub object_hash: u64,
    /// Window start of the first window of the clip range, seconds since epoch
    /// (a multiple of 60).
    pub first_window: u64,
    /// The clip end, seconds since epoch: entries after it are not shown.
    pub clip_end: u64,
    pub mode: Mode,
    pub scope: Scope,
    /// Every object of a wide level shown, none summarised (the search tag
    /// `siblings=all`).
    pub all_siblings: bool,
}

fn check_bits(id: &[u8; 16]) -> u8 {
    let mut head = *id;
    head[15] &= 0xf0;
    (xxh3_64(&head) & 0x0f) as u8
}

impl AssembledId {
    pub fn encode(&self) -> TraceIdBytes {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.object_hash.to_be_bytes());
        let minutes = u32::try_from(self.first_window / 60)
            .unwrap_or(u32::MAX)
            .min(MINUTES_MASK);
        let mode = self.mode.code();
        let high = u32::from(mode >> 2) << 31;
        id[8..12].copy_from_slice(&(high | minutes).to_be_bytes());
        let offset = self
            .clip_end
            .saturating_sub(self.first_window)
            .min(MAX_END_OFFSET);
        id[12..15].copy_from_slice(&offset.to_be_bytes()[5..]);
        if self.all_siblings {
            id[12] |= ALL_SIBLINGS;
        }
        id[15] = ((mode & 0x03) << 6) | (self.scope.code() << 4);
        id[15] |= check_bits(&id);
        id
    }

    /// The id's fields, or `None` for an id kascade did not make. `width`
    /// is the window width in seconds.
    pub fn decode(id: &TraceIdBytes, width: u64) -> Option<Self> {
        if id[15] & 0x0f != check_bits(id) {
            return None;
        }
        let field = u32::from_be_bytes(id[8..12].try_into().ok()?);
        let first_window = u64::from(field & MINUTES_MASK) * 60;
        let mode = ((field >> 31) as u8) << 2 | (id[15] >> 6);
        let mut offset = [0u8; 8];
        offset[5..].copy_from_slice(&id[12..15]);
        offset[5] &= !ALL_SIBLINGS;
        let decoded = Self {
            object_hash: u64::from_be_bytes(id[..8].try_into().ok()?),
            first_window,
            clip_end: first_window + u64::from_be_bytes(offset),
            mode: Mode::from_code(mode)?,
            scope: Scope::from_code((id[15] >> 4) & 0x03)?,
            all_siblings: id[12] & ALL_SIBLINGS != 0,
        };
        (decoded.window_starts(width).len() as u64 <= MAX_WINDOWS).then_some(decoded)
    }

    /// Window starts (seconds) from the first window to the one holding the
    /// clip end, for a window width in seconds (at most [`MAX_WINDOWS`] + 1,
    /// which `decode` refuses).
    pub fn window_starts(&self, width: u64) -> Vec<u64> {
        let width = width.max(1);
        let last = self.clip_end.max(self.first_window);
        (0..=MAX_WINDOWS)
            .map(|i| self.first_window.saturating_add(i.saturating_mul(width)))
            .take_while(|w| *w <= last)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_foreign_ids() {
        let first = 1_795_000_000 / 1800 * 1800;
        for mode in Mode::ALL {
            for scope in Scope::ALL {
                for all_siblings in [false, true] {
                    let id = AssembledId {
                        object_hash: 0xdead_beef_0123_4567,
                        first_window: first,
                        clip_end: first + 2 * 1800 + 17,
                        mode,
                        scope,
                        all_siblings,
                    };
                    let decoded = AssembledId::decode(&id.encode(), 1800);
                    assert_eq!(decoded, Some(id));
                    assert_eq!(
                        id.window_starts(1800),
                        vec![first, first + 1800, first + 3600]
                    );
                }
            }
        }
        // Four check bits: a changed id is refused 15 times in 16. Every
        // single-bit change of the fields, with the check bits kept.
        let id = AssembledId {
            object_hash: 1,
            first_window: 1800,
            clip_end: 1801,
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
        }
        .encode();
        let mut refused = 0;
        let flips = 15 * 8 + 4;
        for bit in 0..flips {
            let mut tampered = id;
            tampered[bit / 8] ^= 0x80 >> (bit % 8);
            if AssembledId::decode(&tampered, 1800).is_none() {
                refused += 1;
            }
        }
        assert!(refused * 10 >= flips * 8, "{refused} of {flips} refused");
    }

    #[test]
    fn ids_of_the_first_four_modes_are_as_before_the_fifth() {
        // Encoded by the layout with a two-bit mode (before `cascade`).
        let id = AssembledId {
            object_hash: 0xdead_beef_0123_4567,
            first_window: 1_795_000_000 / 1800 * 1800,
            clip_end: 1_795_000_000 / 1800 * 1800 + 17,
            mode: Mode::Grouped,
            scope: Scope::Full,
            all_siblings: false,
        };
        let mut old = [0u8; 16];
        old[..8].copy_from_slice(&id.object_hash.to_be_bytes());
        old[8..12].copy_from_slice(&((id.first_window / 60) as u32).to_be_bytes());
        old[12..15].copy_from_slice(&17u64.to_be_bytes()[5..]);
        old[15] = (3 << 6) | (Scope::Full.code() << 4);
        old[15] |= check_bits(&old);
        assert_eq!(id.encode(), old);
        let cascade = AssembledId {
            mode: Mode::Cascade,
            ..id
        };
        assert_ne!(cascade.encode(), old);
        assert_eq!(AssembledId::decode(&cascade.encode(), 1800), Some(cascade));
    }

    #[test]
    fn a_later_clip_end_is_another_id() {
        let a = AssembledId {
            object_hash: 7,
            first_window: 3600,
            clip_end: 3700,
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
        };
        let b = AssembledId {
            clip_end: 3701,
            ..a
        };
        assert_ne!(a.encode(), b.encode());
        let all = AssembledId {
            all_siblings: true,
            ..a
        };
        assert_ne!(a.encode(), all.encode());
        assert_eq!(AssembledId::decode(&all.encode(), 60), Some(all));
    }

    #[test]
    fn a_clip_range_over_the_window_limit_is_refused() {
        let id = AssembledId {
            object_hash: 7,
            first_window: 0,
            clip_end: 300 * 60,
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
        };
        assert!(AssembledId::decode(&id.encode(), 3600).is_some());
        assert_eq!(AssembledId::decode(&id.encode(), 60), None);
    }
}
