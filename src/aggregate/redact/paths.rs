//! `--redact-paths`, matched while an object is walked. Two ways:
//! - a pattern every match of which ends where the path ends (`…value$`,
//!   the default) is also compiled to a reverse DFA, and each leaf's path is
//!   read backwards from its end: most leaves are ruled out by their last
//!   byte or two, and no inner level feeds a DFA at all;
//! - any other pattern is compiled to a forward DFA, and each path segment
//!   moves it on from its parent's state, so a leaf's test costs its own
//!   segment, not a whole path searched again.
//!
//! Both were measured (docs/benchmarks.md): the forward walk was ≈ 10 % of
//! the collector's instructions, the backward test a fraction of that.
//! A pattern that ends every match with a key's last bytes (the default
//! ends with `value`) also yields a search of an object's JSON text for
//! such a key: where there is none, the walk is skipped altogether.

use regex_automata::Anchored;
use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;

use crate::aggregate::diff::FieldSegment;
#[cfg(doc)]
use crate::aggregate::diff::push_field_segment;

/// Bound on the compiled pattern (and on the work of compiling it).
const DFA_SIZE_LIMIT: usize = 16 << 20;

/// A compiled `--redact-paths` pattern.
pub struct PathPattern {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
    /// Set when every match ends at the end of the path (and the reverse
    /// DFA fits [`DFA_SIZE_LIMIT`]).
    backward: Option<Backward>,
    /// Set when every match ends with a plain key's bytes: see
    /// [`PathPattern::may_match_in`].
    key_prefilter: Option<KeyPrefilter>,
}

/// The pattern reversed, anchored at the end of a path.
struct Backward {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
}

/// Where a backward read of a path stands.
#[derive(Clone, Copy, Debug)]
pub enum Backwards {
    Reading(StateID),
    /// The path read so far ends in a match: the whole path matches.
    Matched,
    /// No path ending in what was read can match.
    Failed,
}

/// Where the pattern stands after a path's segments so far.
#[derive(Clone, Copy, Debug)]
pub struct PathCursor {
    state: StateID,
    /// The path so far already contains a match: so does every longer one.
    matched: bool,
    /// No segment yet (the first field segment takes no dot).
    pub empty: bool,
}

impl PathPattern {
    /// Compiles `pattern` with the regex crate's syntax. Fails for what a
    /// DFA cannot do (Unicode word boundaries: write `(?-u:\b)`) and for a
    /// pattern beyond [`DFA_SIZE_LIMIT`].
    pub fn new(pattern: &str) -> Result<Self, String> {
        let mut compiled = Self::forward_only(pattern)?;
        let hir = regex_automata::util::syntax::parse(pattern).map_err(|e| e.to_string())?;
        let ends_at_end = hir
            .properties()
            .look_set_suffix()
            .contains(regex_syntax::hir::Look::End);
        if ends_at_end {
            compiled.key_prefilter = KeyPrefilter::new(&hir);
            // Only a speed-up: a pattern the forward DFA takes but whose
            // reverse is too large keeps the forward walk.
            let reversed = Self::builder(StartKind::Anchored)
                .thompson(thompson::Config::new().reverse(true))
                .build(pattern)
                .ok()
                .and_then(|dfa| {
                    // Read backwards, a path's end is where the search
                    // starts: no byte is behind it.
                    let start = dfa
                        .start_state(&start::Config::new().anchored(Anchored::Yes))
                        .ok()?;
                    Some(Backward { dfa, start })
                });
            if reversed.is_none() {
                tracing::info!(
                    pattern,
                    "--redact-paths: no reverse DFA within the size limit; paths are matched forwards"
                );
            }
            compiled.backward = reversed;
        }
        Ok(compiled)
    }

    /// The pattern compiled for the segment-by-segment walk only.
    pub(super) fn forward_only(pattern: &str) -> Result<Self, String> {
        let dfa = Self::builder(StartKind::Unanchored)
            .build(pattern)
            .map_err(Self::build_error)?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::No))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            dfa,
            start,
            backward: None,
            key_prefilter: None,
        })
    }

    fn builder(start_kind: StartKind) -> dense::Builder {
        let mut builder = dense::Builder::new();
        builder.configure(
            dense::Config::new()
                .start_kind(start_kind)
                // Segments are short: acceleration would not pay.
                .accelerate(false)
                .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
        );
        builder
    }

    fn build_error(e: dense::BuildError) -> String {
        let e = e.to_string();
        match e.contains("word boundar") {
            true => format!("{e} (for a word boundary write (?-u:\\b))"),
            false => e,
        }
    }

    /// Whether the pattern reads paths backwards: then a walk tests only
    /// its leaves, each reading its path from its end, instead of feeding
    /// segments level by level.
    pub fn matches_backwards(&self) -> bool {
        self.backward.is_some()
    }

    /// Whether an object written as the JSON text `text` may have a leaf
    /// whose path matches: `false` only when the pattern ends every match
    /// with a key's last bytes (`…value$`) and the text has no key ending
    /// so, neither as the object's own (`value"`) nor in a copy held by an
    /// annotation (`value\"`), and no `\u` escape that could hide one.
    /// Then the walk can be skipped: most objects have no such key.
    pub fn may_match_in(&self, text: &str) -> bool {
        self.key_prefilter
            .as_ref()
            .is_none_or(|p| p.may_match_in(text.as_bytes()))
    }

    /// Whether the pattern matches `path` (as `Regex::is_match` would):
    /// the tests' oracle, built from what the walks use.
    #[cfg(test)]
    pub fn matches_path(&self, path: &str) -> bool {
        if self.backward.is_none() {
            return self.is_match(self.feed(self.root(), path));
        }
        match self.feed_backwards(self.read_backwards(), path) {
            Backwards::Matched => true,
            Backwards::Failed => false,
            read => self.ends_backwards(read),
        }
    }

    /// Nothing read yet of a path read backwards, from its end (only for a
    /// pattern that [`Self::matches_backwards`]).
    pub fn read_backwards(&self) -> Backwards {
        Backwards::Reading(self.backward.as_ref().map_or(self.start, |b| b.start))
    }

    /// `read` after `segment`, the segment before what was read, read
    /// from its last byte to its first.
    pub fn feed_backwards(&self, read: Backwards, segment: &str) -> Backwards {
        let (Some(backward), Backwards::Reading(mut state)) = (&self.backward, read) else {
            return read;
        };
        let dfa = &backward.dfa;
        for &b in segment.as_bytes().iter().rev() {
            state = dfa.next_state(state, b);
            if dfa.is_special_state(state) {
                // A match state (one byte late, as forwards): some match
                // ends at the path's end. A dead state: none can.
                return match dfa.is_match_state(state) {
                    true => Backwards::Matched,
                    false => Backwards::Failed,
                };
            }
        }
        Backwards::Reading(state)
    }

    /// Whether `read` fails once the byte `b` is read (backwards) next.
    pub fn fails_on(&self, read: Backwards, b: u8) -> bool {
        match (read, &self.backward) {
            (Backwards::Failed, _) => true,
            (Backwards::Reading(state), Some(backward)) => {
                let next = backward.dfa.next_state(state, b);
                backward.dfa.is_dead_state(next)
            }
            _ => false,
        }
    }

    /// Whether the whole path, read backwards as `read`, matches.
    pub fn ends_backwards(&self, read: Backwards) -> bool {
        match (read, &self.backward) {
            (Backwards::Matched, _) => true,
            (Backwards::Reading(state), Some(backward)) => backward
                .dfa
                .is_match_state(backward.dfa.next_eoi_state(state)),
            _ => false,
        }
    }

    /// The empty path.
    pub fn root(&self) -> PathCursor {
        PathCursor {
            state: self.start,
            matched: false,
            empty: true,
        }
    }

    /// `at` followed by `segment`.
    pub fn feed(&self, mut at: PathCursor, segment: &str) -> PathCursor {
        at.empty &= segment.is_empty();
        if at.matched {
            return at;
        }
        for &b in segment.as_bytes() {
            at.state = self.dfa.next_state(at.state, b);
            if self.dfa.is_special_state(at.state) {
                // Match states come one byte after the match ends; a dead
                // state never leaves. Built without quit bytes, there is no
                // third kind.
                at.matched = self.dfa.is_match_state(at.state);
                return at;
            }
        }
        at
    }

    /// `at` followed by the field `key`, as [`push_field_segment`] writes
    /// it.
    pub fn feed_field(&self, at: PathCursor, key: &str) -> PathCursor {
        match FieldSegment::of(key) {
            FieldSegment::Plain(key) => {
                let at = if at.empty { at } else { self.feed(at, ".") };
                self.feed(at, key)
            }
            FieldSegment::Quoted(key) => {
                let at = self.feed(at, "[\"");
                let at = self.feed(at, key);
                self.feed(at, "\"]")
            }
            FieldSegment::Escaped(key) => self.feed(at, &FieldSegment::escaped(key)),
        }
    }

    /// Whether the pattern matches the path ending here, as
    /// `Regex::is_match` would on the path written out.
    pub fn is_match(&self, at: PathCursor) -> bool {
        at.matched || self.dfa.is_match_state(self.dfa.next_eoi_state(at.state))
    }
}

/// The text search behind [`PathPattern::may_match_in`], for a pattern
/// whose every match ends where the path ends. Every match ends with one
/// of the pattern's suffix literals; when each of them ends with plain-key
/// bytes (then a matching path ends with a plain field segment, `.key`),
/// the leaf's key ends with those bytes, and the apiserver writes such a
/// key as it is, followed by a quote (escaped in a copy held by an
/// annotation).
struct KeyPrefilter {
    /// The literals' plain-key tails, lowercase.
    tails: Vec<memchr::memmem::Finder<'static>>,
    /// Some tail had an uppercase letter (a case-insensitive pattern has
    /// every case of it): the text is searched lowercased.
    fold_case: bool,
}

impl KeyPrefilter {
    /// `None` when the pattern's suffixes cannot be had, are too many, or
    /// one ends with a byte a plain key has not (`]`, or a letter whose
    /// case folds outside ASCII, as `s` to `ſ`).
    fn new(hir: &regex_syntax::hir::Hir) -> Option<Self> {
        use regex_syntax::hir::literal::{ExtractKind, Extractor};
        let suffixes = Extractor::new().kind(ExtractKind::Suffix).extract(hir);
        let mut tails = std::collections::BTreeSet::new();
        let mut fold_case = false;
        for literal in suffixes.literals()? {
            let bytes = literal.as_bytes();
            let plain = bytes
                .iter()
                .rev()
                .take_while(|&&b| crate::aggregate::diff::is_plain_key_byte(b))
                .count();
            if plain == 0 {
                return None;
            }
            let tail = &bytes[bytes.len() - plain..];
            fold_case |= tail.iter().any(u8::is_ascii_uppercase);
            tails.insert(tail.to_ascii_lowercase());
        }
        if tails.is_empty() {
            return None;
        }
        Some(Self {
            tails: tails
                .into_iter()
                .map(|t| memchr::memmem::Finder::new(&t).into_owned())
                .collect(),
            fold_case,
        })
    }

    fn may_match_in(&self, text: &[u8]) -> bool {
        // An escaped character could spell a key's end.
        static ESCAPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\\u"));
        if ESCAPE.find(text).is_some() {
            return true;
        }
        let ends_a_key = |text: &[u8]| {
            self.tails.iter().any(|tail| {
                tail.find_iter(text)
                    .any(|at| matches!(text.get(at + tail.needle().len()), Some(b'"' | b'\\')))
            })
        };
        match self.fold_case {
            true => ends_a_key(&text.to_ascii_lowercase()),
            false => ends_a_key(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::diff::walk_leaves;
    use crate::aggregate::redact::DEFAULT_REDACT_PATHS;
    use regex::Regex;

    /// Every path of the fixture's objects, as the diff writes them.
    fn fixture_paths() -> Vec<String> {
        let mut paths = Vec::new();
        for o in
            crate::flow::fixture_objects(&["deployment", "statefulset", "bigobject", "service"])
        {
            let o = crate::json::parse(&o.to_string()).unwrap();
            walk_leaves(&o, &mut |p, _| paths.push(p.to_string()));
        }
        paths.extend(
            [
                "spec.containers[app].env[DB_PASSWORD].value",
                "spec.containers[app].env[Db_Pässword].value",
                "spec.containers[app].env[ſecret].value",
                "spec.args[1]",
                "spec.args[1].x",
                "metadata.annotations[\"a.b/c\"]",
                "line\nbreak.value",
                "",
            ]
            .map(String::from),
        );
        paths.sort();
        paths.dedup();
        paths
    }

    #[test]
    fn segments_fed_one_by_one_match_as_the_regex_does_on_the_whole_path() {
        let paths = fixture_paths();
        assert!(paths.len() > 500, "{}", paths.len());
        for pattern in [
            DEFAULT_REDACT_PATHS,
            r"^spec\.args\[1\]$",
            r"(?m)^break\.value$",
            r"(?i)annotations\[.a\.B/",
            r"status\.conditions\[[A-Z]",
            r"image|uid$",
            r"^$",
            r"(?-u:\b)value(?-u:\b)",
        ] {
            let re = Regex::new(pattern).unwrap();
            let dfa = PathPattern::new(pattern).unwrap();
            let mut hits = 0;
            for path in &paths {
                // Cut the path at every byte that may end a segment.
                let mut at = dfa.root();
                let mut from = 0;
                for (i, _) in path.match_indices(['.', '[', ']']) {
                    at = dfa.feed(at, &path[from..i]);
                    from = i;
                }
                at = dfa.feed(at, &path[from..]);
                assert_eq!(dfa.is_match(at), re.is_match(path), "{pattern} on {path:?}");
                hits += usize::from(re.is_match(path));
            }
            assert!(
                hits > 0,
                "{pattern} matched nothing: the case proves little"
            );
        }
    }

    #[test]
    fn whole_paths_match_as_the_regex_does_backwards_or_not() {
        let paths = fixture_paths();
        for (pattern, backwards) in [
            (DEFAULT_REDACT_PATHS, true),
            (r"^spec\.args\[1\]$", true),
            (r"uid$|(?i)IMAGE$", true),
            (r"\]\.value\z", true),
            (r"(?-u:\b)value$", true),
            (r"^$", true),
            (r"^metadata\.(name|namespace)$", true),
            (r"(?m)^break\.value$", false),
            (r"image|uid$", false),
            (r"status\.conditions\[[A-Z]", false),
        ] {
            let re = Regex::new(pattern).unwrap();
            let dfa = PathPattern::new(pattern).unwrap();
            assert_eq!(dfa.matches_backwards(), backwards, "{pattern}");
            let mut hits = 0;
            for path in &paths {
                assert_eq!(
                    dfa.matches_path(path),
                    re.is_match(path),
                    "{pattern} on {path:?}"
                );
                hits += usize::from(re.is_match(path));
            }
            assert!(
                hits > 0,
                "{pattern} matched nothing: the case proves little"
            );
            assert!(hits < paths.len(), "{pattern} matched everything");
        }
    }

    #[test]
    fn a_pattern_too_large_reversed_is_matched_forwards() {
        // Reversed, "an `e` within 20 bytes of the start" must remember
        // every `e` it has read: exponential; forwards it is a counter.
        let pattern = r"(?s)^.{0,20}e.*$";
        let dfa = PathPattern::new(pattern).unwrap();
        assert!(!dfa.matches_backwards());
        let re = Regex::new(pattern).unwrap();
        for path in fixture_paths() {
            assert_eq!(dfa.matches_path(&path), re.is_match(&path), "{path:?}");
        }
    }

    #[test]
    fn what_a_dfa_cannot_do_is_refused_with_the_reason() {
        let err = PathPattern::new(r"\btoken\b").err().unwrap();
        assert!(err.contains("Unicode word boundaries"), "{err}");
        assert!(err.contains(r"(?-u:\b)"), "the way out is named: {err}");
        assert!(PathPattern::new("(").is_err());
    }
}
