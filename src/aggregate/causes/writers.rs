//! Which of the propagations' `writers:` patterns a writer matches, matched
//! once per writer and remembered: the writers are a few controllers and
//! users, and matching each effect's writer again cost 1.3 % of the
//! collector's CPU (`perf` of `collect`).

use std::sync::{Arc, RwLock};

use regex::Regex;

use super::Propagation;
use crate::model::FastHashMap;

/// Writers whose matches are remembered, at most; past them a writer is
/// matched each time (nothing is lost but the time).
const MAX_WRITERS: usize = 4096;

/// Patterns remembered per writer, at most (bits of a `u64`); a pattern past
/// them is matched each time.
const MAX_PATTERNS: usize = 64;

pub(super) struct WriterPatterns {
    /// The distinct patterns (by address: propagations with the same
    /// pattern share one, see [`Propagation::share_writers`]).
    patterns: Vec<Arc<Regex>>,
    /// By writer: bit `i` set when it matches `patterns[i]`.
    known: RwLock<FastHashMap<Box<str>, u64>>,
}

impl WriterPatterns {
    pub(super) fn new(propagations: &[Propagation]) -> Self {
        let mut patterns: Vec<Arc<Regex>> = Vec::new();
        for re in propagations.iter().filter_map(Propagation::writers) {
            if !patterns.iter().any(|p| Arc::ptr_eq(p, re)) {
                patterns.push(re.clone());
            }
        }
        Self {
            patterns,
            known: RwLock::default(),
        }
    }

    /// Asks of one writer (`None`: not known, which every pattern admits).
    pub(super) fn of<'a>(&'a self, writer: Option<&'a str>) -> WriterMatches<'a> {
        WriterMatches {
            patterns: self,
            writer,
            bits: None,
        }
    }

    fn bits_of(&self, writer: &str) -> u64 {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        if let Some(bits) = known.get(writer) {
            return *bits;
        }
        drop(known);
        let bits = self
            .patterns
            .iter()
            .take(MAX_PATTERNS)
            .enumerate()
            .filter(|(_, re)| re.is_match(writer))
            .fold(0, |bits, (i, _)| bits | 1 << i);
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        if known.len() < MAX_WRITERS {
            known.insert(writer.into(), bits);
        }
        bits
    }
}

/// One writer's answers, looked up once.
pub(super) struct WriterMatches<'a> {
    patterns: &'a WriterPatterns,
    writer: Option<&'a str>,
    bits: Option<u64>,
}

impl WriterMatches<'_> {
    /// Whether the writer matches `re`; true when the writer is not known.
    pub(super) fn matches(&mut self, re: &Regex) -> bool {
        let Some(writer) = self.writer else {
            return true;
        };
        let at = self
            .patterns
            .patterns
            .iter()
            .position(|p| std::ptr::eq(&**p, re));
        match at {
            Some(i) if i < MAX_PATTERNS => {
                let bits = *self
                    .bits
                    .get_or_insert_with(|| self.patterns.bits_of(writer));
                bits & (1 << i) != 0
            }
            _ => re.is_match(writer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::rules::RuleSet;

    fn rules(yaml: &str) -> RuleSet {
        let mut set = RuleSet::default();
        set.add_yaml("p.yaml", yaml).unwrap();
        set
    }

    /// Each pattern answers for itself, asked in any order, the first time
    /// and from memory, and a writer not known matches all.
    #[test]
    fn each_writer_gets_each_patterns_own_answer_remembered_or_not() {
        let set = rules(
            r#"
propagations:
  - {name: a, relation: owner, cause: parent, on: [update], writes: [create], writers: '^system:serviceaccount:kube-system:'}
  - {name: b, relation: owner, cause: parent, on: [update], writes: [create], writers: 'kubelet$'}
  - {name: c, relation: owner, cause: parent, on: [update], writes: [create], writers: '^system:serviceaccount:kube-system:'}
"#,
        );
        let props = set.propagations();
        let patterns = WriterPatterns::new(props);
        assert_eq!(patterns.patterns.len(), 2, "a and c share one");
        let re = |i: usize| props[i].writers().unwrap().as_ref();
        for round in 0..2 {
            let mut m = patterns.of(Some("kwok-kubelet"));
            assert!(m.matches(re(1)), "round {round}");
            assert!(!m.matches(re(0)), "round {round}");
            assert!(!m.matches(re(2)), "round {round}");
            let mut m = patterns.of(Some(
                "system:serviceaccount:kube-system:deployment-controller",
            ));
            assert!(m.matches(re(0)) && m.matches(re(2)), "round {round}");
            assert!(!m.matches(re(1)), "round {round}");
        }
        assert_eq!(patterns.known.read().unwrap().len(), 2);
        let mut unknown = patterns.of(None);
        assert!(unknown.matches(re(0)) && unknown.matches(re(1)));
        // A pattern not among the propagations' is matched there and then.
        let other = Regex::new("^kwok").unwrap();
        assert!(patterns.of(Some("kwok-kubelet")).matches(&other));
    }
}
