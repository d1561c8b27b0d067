//! `--redact-paths`, matched while an object is walked: the pattern is
//! compiled to a DFA, and each path segment moves the DFA on from its
//! parent's state. A leaf's test then costs its own segment, not a whole
//! path built as a string and searched again (≈ 10 % of the collector's
//! instructions before, README, Benchmarks).

use regex_automata::Anchored;
use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;

use crate::aggregate::diff::{is_plain_key, push_field_segment};
use crate::json::needs_no_escape;

/// Bound on the compiled pattern (and on the work of compiling it).
const DFA_SIZE_LIMIT: usize = 16 << 20;

/// A compiled `--redact-paths` pattern.
pub struct PathPattern {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
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
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Unanchored)
                    // Segments are short: acceleration would not pay.
                    .accelerate(false)
                    .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                    .determinize_size_limit(Some(DFA_SIZE_LIMIT)),
            )
            .build(pattern)
            .map_err(|e| {
                let e = e.to_string();
                match e.contains("word boundar") {
                    true => format!("{e} (for a word boundary write (?-u:\\b))"),
                    false => e,
                }
            })?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::No))
            .map_err(|e| e.to_string())?;
        Ok(Self { dfa, start })
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

    /// `at` followed by the field `key`, written as
    /// [`push_field_segment`] writes it; `scratch` holds a quoted key.
    pub fn feed_field(&self, at: PathCursor, key: &str, scratch: &mut String) -> PathCursor {
        if is_plain_key(key) {
            let at = if at.empty { at } else { self.feed(at, ".") };
            self.feed(at, key)
        } else if needs_no_escape(key) {
            let at = self.feed(at, "[\"");
            let at = self.feed(at, key);
            self.feed(at, "\"]")
        } else {
            scratch.clear();
            push_field_segment(scratch, key, at.empty);
            self.feed(at, scratch)
        }
    }

    /// Whether the pattern matches the path ending here, as
    /// `Regex::is_match` would on the path written out.
    pub fn is_match(&self, at: PathCursor) -> bool {
        at.matched || self.dfa.is_match_state(self.dfa.next_eoi_state(at.state))
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
            crate::pipeline::fixture_objects(&["deployment", "statefulset", "bigobject", "service"])
        {
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
    fn what_a_dfa_cannot_do_is_refused_with_the_reason() {
        let err = PathPattern::new(r"\btoken\b").err().unwrap();
        assert!(err.contains("Unicode word boundaries"), "{err}");
        assert!(err.contains(r"(?-u:\b)"), "the way out is named: {err}");
        assert!(PathPattern::new("(").is_err());
    }
}
