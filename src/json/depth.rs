//! Nesting bounds for JSON from outside, checked by a loop that cannot run
//! out of stack, before any parser that recurses sees the text.
//!
//! sonic-rs parses, skips and drops nested values by recursion, and so do
//! kascade's own walks (redaction, diffs, comparisons): a value nested
//! deeper than a thread's stack allows aborts the process. Go's decoder,
//! and so the apiserver, accepts 10,000 levels, and an annotation value is
//! any string. So every audit body and log line is scanned first, and a
//! container nested deeper than the bound is replaced by a string marker
//! (`"<nested deeper than 64 levels: 20012 bytes>"`): the write keeps its
//! span, and only the part no reader could show is left out.

use std::borrow::Cow;
use std::fmt::Write;

/// The deepest nesting kept in an object: its root is level 1. Kubernetes'
/// own kinds nest at most 14 levels in the captured fixtures (a
/// Deployment); a custom resource's schema adds two levels per nested type,
/// so 64 leaves room for 25 of them. The bound is set by the stack:
/// sonic-rs's validating skip takes ≈ 21 KB a level (measured with gdb), so
/// 64 levels need ≈ 1.35 MB, inside the 2 MiB a thread gets by default
/// (an embedding runtime's), and far inside [`THREAD_STACK_BYTES`].
pub(crate) const MAX_OBJECT_DEPTH: usize = 64;

/// The stack of kascade's runtime threads: four times what
/// [`MAX_OBJECT_DEPTH`] levels take, for the walks after the parse.
pub(crate) const THREAD_STACK_BYTES: usize = 8 << 20;

/// How every marker begins (the bound and the size follow).
pub(crate) const MARKER_PREFIX: &str = "<nested deeper than ";

const OTHER: u8 = 0;
const OPEN: u8 = 1;
const CLOSE: u8 = 2;
const QUOTE: u8 = 3;

static CLASS: [u8; 256] = {
    let mut t = [OTHER; 256];
    t[b'[' as usize] = OPEN;
    t[b'{' as usize] = OPEN;
    t[b']' as usize] = CLOSE;
    t[b'}' as usize] = CLOSE;
    t[b'"' as usize] = QUOTE;
    t
};

/// Text whose nesting was bounded by [`cap`].
#[derive(Debug)]
pub struct Capped<'a> {
    /// The text, with every container deeper than the bound a marker.
    pub text: Cow<'a, str>,
    /// How many containers were replaced.
    pub markers: u32,
}

/// Whether `text` nests deeper than `limit` levels (the outermost container
/// is level 1). Malformed text is scanned as far as it goes.
///
/// ```
/// use kascade::test_support::json::depth::exceeds;
/// assert!(!exceeds(br#"{"a": [1, {"b": "[[[["}]}"#, 3));
/// assert!(exceeds(br#"{"a": [1, {"b": []}]}"#, 3));
/// ```
// Not inlined: one call per text, and a profile shows what the scan costs.
#[inline(never)]
pub fn exceeds(text: &[u8], limit: usize) -> bool {
    // Each level needs an opening byte: short text cannot nest deeper.
    text.len() > limit && first_too_deep(text, 0, 0, limit).is_some()
}

/// `text` with every container nested deeper than `limit` levels below
/// the level `above` replaced by a string marker naming `limit` and the
/// container's size; borrowed as it is when nothing nests that deep. Valid
/// JSON stays valid. `above` is where the values bounded sit in `text`: an
/// audit event's objects are one level below the event, so a log line is
/// capped with `above` 1, and the marker names the objects' own bound.
///
/// ```
/// use kascade::test_support::json::depth::cap;
/// let capped = cap(r#"{"a": {"b": [[1]], "c": 2}}"#, 2, 0);
/// assert_eq!(capped.text, r#"{"a": {"b": "<nested deeper than 2 levels: 5 bytes>", "c": 2}}"#);
/// assert_eq!(capped.markers, 1);
/// ```
// Not inlined: one call per text, and a profile shows what the scan costs.
#[inline(never)]
pub fn cap(text: &str, limit: usize, above: usize) -> Capped<'_> {
    let (named, limit) = (limit, limit + above);
    let bytes = text.as_bytes();
    let Some(mut at) = (text.len() > limit)
        .then(|| first_too_deep(bytes, 0, 0, limit))
        .flatten()
    else {
        return Capped {
            text: Cow::Borrowed(text),
            markers: 0,
        };
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut markers = 0u32;
    loop {
        let end = container_end(bytes, at);
        out.push_str(&text[copied..at]);
        // After a backslash (not JSON), the marker's opening quote would be
        // escaped: a space takes the escape.
        if out.ends_with('\\') {
            out.push(' ');
        }
        let _ = write!(
            out,
            "\"{MARKER_PREFIX}{named} levels: {} bytes>\"",
            end - at
        );
        markers = markers.saturating_add(1);
        copied = end;
        // The container replaced opened at level `limit + 1`: its
        // parent, where the scan goes on, is at `limit`.
        match first_too_deep(bytes, end, limit, limit) {
            Some(next) => at = next,
            None => break,
        }
    }
    out.push_str(&text[copied..]);
    Capped {
        text: Cow::Owned(out),
        markers,
    }
}

/// How many markers [`cap`] left in `text` (counted where an object's text
/// was cut from a capped event).
pub(crate) fn markers_in(text: &str) -> u32 {
    let finder = memchr::memmem::find_iter(text.as_bytes(), MARKER_PREFIX.as_bytes());
    u32::try_from(finder.count()).unwrap_or(u32::MAX)
}

/// Where the first container that would open at level `limit + 1` starts,
/// scanning from `from` (outside any string) at level `depth`: 64 bytes a
/// step on x86-64 (SSE2 is part of its baseline), a byte at a time
/// elsewhere. The byte loop was 6.8 % of a replay's instructions.
fn first_too_deep(bytes: &[u8], from: usize, depth: usize, limit: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        wide::first_too_deep(bytes, from, depth, limit)
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        first_too_deep_bytewise(bytes, from, depth, limit)
    }
}

/// [`first_too_deep`] a byte at a time (strings skipped by `memchr2`): the
/// reference the wide scan is tested against.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn first_too_deep_bytewise(bytes: &[u8], from: usize, depth: usize, limit: usize) -> Option<usize> {
    too_deep_from(bytes, from, depth, limit, Lexer::default())
}

/// [`first_too_deep`] from `from` in the lexer state `st`.
fn too_deep_from(
    bytes: &[u8],
    from: usize,
    mut depth: usize,
    limit: usize,
    st: Lexer,
) -> Option<usize> {
    st.brackets(bytes, from, |i, open| {
        if open {
            depth += 1;
            (depth > limit).then_some(i)
        } else {
            depth = depth.saturating_sub(1);
            None
        }
    })
}

/// Where a scan is in the text. Every scan reads any text alike, JSON or
/// not, as the wide scan's blocks do (simdjson's rules): a backslash makes
/// the next byte neither a quote nor a backslash, in a string or not
/// (outside one it is not JSON anyway); a quote not so escaped opens or
/// closes a string; a bracket outside a string counts, escaped or not. Read
/// otherwise by one scan than by another, malformed text could be capped by
/// one and still nest too deep for the next.
#[derive(Clone, Copy, Debug, Default)]
struct Lexer {
    in_string: bool,
    escape_next: bool,
}

impl Lexer {
    /// Calls `bracket(at, opens)` for each bracket outside strings from
    /// `i`, until it returns something.
    fn brackets<R>(
        mut self,
        bytes: &[u8],
        mut i: usize,
        mut bracket: impl FnMut(usize, bool) -> Option<R>,
    ) -> Option<R> {
        while i < bytes.len() {
            let b = bytes[i];
            if self.escape_next {
                self.escape_next = false;
            } else if b == b'\\' {
                self.escape_next = true;
                i += 1;
                continue;
            } else if b == b'"' {
                self.in_string = !self.in_string;
                i += 1;
                continue;
            } else if self.in_string {
                // On to the string's next quote or backslash.
                match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    Some(k) => i += k,
                    None => return None,
                }
                continue;
            }
            if !self.in_string {
                let found = match CLASS[b as usize] {
                    OPEN => bracket(i, true),
                    CLOSE => bracket(i, false),
                    _ => None,
                };
                if found.is_some() {
                    return found;
                }
            }
            i += 1;
        }
        None
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod wide {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };

    const BLOCK: usize = 64;
    const EVEN_BITS: u64 = 0x5555_5555_5555_5555;

    pub(super) fn first_too_deep(
        bytes: &[u8],
        from: usize,
        mut depth: usize,
        limit: usize,
    ) -> Option<usize> {
        let mut i = from;
        // All ones while the last block ended inside a string.
        let mut in_string = 0u64;
        // 1 when the last block ended with an odd run of backslashes.
        let mut escape_next = 0u64;
        while i + BLOCK <= bytes.len() {
            let block: &[u8; BLOCK] = bytes[i..i + BLOCK].try_into().expect("a whole block");
            // SAFETY: SSE2 is part of the x86-64 baseline (the module is
            // compiled only where `target_feature = "sse2"` holds).
            let [quotes, backslashes, opens, closes] = unsafe { masks(block) };
            let escaped = escaped_bits(backslashes, &mut escape_next);
            // Bit k: byte k is inside a string (an opening quote is, a
            // closing one is not).
            let inside = prefix_xor(quotes & !escaped) ^ in_string;
            in_string = ((inside as i64) >> 63) as u64;
            let opens = opens & !inside;
            let closes = closes & !inside;
            let n_open = opens.count_ones() as usize;
            if depth + n_open <= limit {
                let n_close = closes.count_ones() as usize;
                if depth >= n_close {
                    depth = depth + n_open - n_close;
                    i += BLOCK;
                    continue;
                }
            }
            let mut brackets = opens | closes;
            while brackets != 0 {
                let k = brackets.trailing_zeros();
                brackets &= brackets - 1;
                if opens & (1 << k) != 0 {
                    depth += 1;
                    if depth > limit {
                        return Some(i + k as usize);
                    }
                } else {
                    depth = depth.saturating_sub(1);
                }
            }
            i += BLOCK;
        }
        tail(bytes, i, depth, limit, in_string != 0, escape_next != 0)
    }

    /// Bit masks of a block's quotes, backslashes, opening and closing
    /// brackets.
    #[target_feature(enable = "sse2")]
    fn masks(block: &[u8; BLOCK]) -> [u64; 4] {
        let mut out = [0u64; 4];
        for (q, quarter) in block.chunks_exact(16).enumerate() {
            // SAFETY: `quarter` is 16 readable bytes; the load takes no
            // alignment.
            let v = unsafe { _mm_loadu_si128(quarter.as_ptr().cast::<__m128i>()) };
            let eq = |c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
            let bits = |m: __m128i| (_mm_movemask_epi8(m) as u16 as u64) << (16 * q);
            out[0] |= bits(eq(b'"'));
            out[1] |= bits(eq(b'\\'));
            out[2] |= bits(_mm_or_si128(eq(b'['), eq(b'{')));
            out[3] |= bits(_mm_or_si128(eq(b']'), eq(b'}')));
        }
        out
    }

    /// The bytes escaped by a backslash (the one after each odd run of
    /// backslashes), carrying an odd run at the end into the next block:
    /// simdjson's `find_escaped`.
    fn escaped_bits(backslashes: u64, escape_next: &mut u64) -> u64 {
        if backslashes == 0 {
            let escaped = *escape_next;
            *escape_next = 0;
            return escaped;
        }
        let backslashes = backslashes & !*escape_next;
        let follows_escape = (backslashes << 1) | *escape_next;
        let odd_starts = backslashes & !EVEN_BITS & !follows_escape;
        let (starting_even, overflow) = odd_starts.overflowing_add(backslashes);
        *escape_next = u64::from(overflow);
        let invert = starting_even << 1;
        (EVEN_BITS ^ invert) & follows_escape
    }

    /// Bit k of the result: the XOR of bits 0..=k of `x`.
    fn prefix_xor(mut x: u64) -> u64 {
        x ^= x << 1;
        x ^= x << 2;
        x ^= x << 4;
        x ^= x << 8;
        x ^= x << 16;
        x ^= x << 32;
        x
    }

    /// The last bytes (fewer than a block), a byte at a time from the
    /// blocks' state.
    fn tail(
        bytes: &[u8],
        i: usize,
        depth: usize,
        limit: usize,
        in_string: bool,
        escape_next: bool,
    ) -> Option<usize> {
        let st = super::Lexer {
            in_string,
            escape_next,
        };
        super::too_deep_from(bytes, i, depth, limit, st)
    }
}

/// Where the container opening at `at` ends (one past its closing byte),
/// or the end of the text when it is not closed.
fn container_end(bytes: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    Lexer::default()
        .brackets(bytes, at, |i, open| {
            if open {
                depth += 1;
                None
            } else {
                depth -= 1;
                (depth == 0).then_some(i + 1)
            }
        })
        .unwrap_or(bytes.len())
}

#[cfg(test)]
mod tests;
