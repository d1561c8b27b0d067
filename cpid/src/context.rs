//! What one object says about the change it carries: its CPID and the CPID's
//! nearest ancestors, read from and written to its annotations.

use std::collections::BTreeMap;

use kube_core::ObjectMeta;

use crate::{ANCESTORS_ANNOTATION, CPID_ANNOTATION, Cpid, CpidError, TRACEPARENT_ANNOTATIONS};

/// At most this many ancestor entries are read; more is a forged or broken
/// annotation (a UUID and a comma each: ≈ 1.2 KiB).
const MAX_ANCESTORS_READ: usize = 32;

/// One object's change context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeContext {
    /// The change this object's current state belongs to.
    pub cpid: Cpid,
    /// Nearest first; may be partial (auxiliary information).
    pub ancestors: Vec<Cpid>,
    /// True when the CPID came from a W3C `traceparent` annotation.
    pub from_traceparent: bool,
}

/// An annotation that is present but unusable; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("annotation {annotation}: {error}")]
    Cpid {
        annotation: &'static str,
        error: CpidError,
    },
    #[error("annotation {ANCESTORS_ANNOTATION}: {0}")]
    Ancestors(String),
}

/// The result of reading an object's annotations: the context if there is a
/// usable one, and what was wrong with the rest (to count and log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Read {
    pub context: Option<ChangeContext>,
    pub problems: Vec<ContextError>,
}

impl ChangeContext {
    /// A context with no known ancestors.
    pub fn new(cpid: Cpid) -> Self {
        ChangeContext {
            cpid,
            ancestors: Vec::new(),
            from_traceparent: false,
        }
    }

    /// Reads `kascade.io/cpid` (else a `traceparent` annotation) and the
    /// ancestors. A malformed CPID means no context (the object's change is
    /// unknown); malformed ancestors are dropped, the CPID kept.
    pub fn read(annotations: Option<&BTreeMap<String, String>>) -> Read {
        match annotations {
            Some(a) => Self::read_with(|name| a.get(name).map(String::as_str)),
            None => Read::default(),
        }
    }

    /// [`ChangeContext::read`] through a lookup of annotation values by name
    /// (for annotations held in another map type, e.g. JSON).
    pub fn read_with<'a>(annotation: impl Fn(&str) -> Option<&'a str>) -> Read {
        let mut read = Read::default();
        let (cpid, from_traceparent) = if let Some(v) = annotation(CPID_ANNOTATION) {
            match Cpid::parse(v.trim()) {
                Ok(c) => (c, false),
                Err(error) => {
                    read.problems.push(ContextError::Cpid {
                        annotation: CPID_ANNOTATION,
                        error,
                    });
                    return read;
                }
            }
        } else if let Some((name, v)) = TRACEPARENT_ANNOTATIONS
            .iter()
            .find_map(|n| annotation(n).map(|v| (*n, v)))
        {
            match Cpid::from_traceparent(v) {
                Ok(c) => (c, true),
                Err(error) => {
                    read.problems.push(ContextError::Cpid {
                        annotation: name,
                        error,
                    });
                    return read;
                }
            }
        } else {
            return read;
        };
        let mut context = ChangeContext {
            cpid,
            ancestors: Vec::new(),
            from_traceparent,
        };
        if let Some(list) = annotation(ANCESTORS_ANNOTATION) {
            match parse_ancestors(list, cpid) {
                Ok(a) => context.ancestors = a,
                Err(e) => read.problems.push(ContextError::Ancestors(e)),
            }
        }
        read.context = Some(context);
        read
    }

    /// [`ChangeContext::read`] on an object's metadata.
    pub fn read_meta(meta: &ObjectMeta) -> Read {
        Self::read(meta.annotations.as_ref())
    }

    /// Whether `other` is this CPID or one of its listed ancestors.
    pub fn covers(&self, other: Cpid) -> bool {
        self.cpid == other || self.ancestors.contains(&other)
    }

    /// Writes the CPID and at most `max_ancestors` ancestors onto `meta`
    /// (an empty list removes the ancestors annotation, so a stale one never
    /// claims a lineage this CPID does not have).
    pub fn stamp(&self, meta: &mut ObjectMeta, max_ancestors: usize) {
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(CPID_ANNOTATION.to_string(), self.cpid.to_string());
        let kept = &self.ancestors[..self.ancestors.len().min(max_ancestors)];
        if kept.is_empty() {
            annotations.remove(ANCESTORS_ANNOTATION);
        } else {
            let list: Vec<String> = kept.iter().map(Cpid::to_string).collect();
            annotations.insert(ANCESTORS_ANNOTATION.to_string(), list.join(","));
        }
    }
}

fn parse_ancestors(list: &str, own: Cpid) -> Result<Vec<Cpid>, String> {
    let entries: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if entries.len() > MAX_ANCESTORS_READ {
        return Err(format!(
            "{} entries, at most {MAX_ANCESTORS_READ} are read",
            entries.len()
        ));
    }
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let c = Cpid::parse(e).map_err(|e| e.to_string())?;
        // A CPID is never its own ancestor (a cycle would make every merge
        // look covered).
        if c != own && !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const A: &str = "3f2b8c1e-7d4a-4e6f-9a1b-2c3d4e5f6a7b";
    const B: &str = "9b1d2c3e-4f5a-4b6c-8d7e-1f2a3b4c5d6e";

    #[test]
    fn reads_the_cpid_and_its_ancestors() {
        let a = annotations(&[(CPID_ANNOTATION, A), (ANCESTORS_ANNOTATION, B)]);
        let r = ChangeContext::read(Some(&a));
        let c = r.context.unwrap();
        assert_eq!(c.cpid.to_string(), A);
        assert_eq!(c.ancestors, vec![Cpid::parse(B).unwrap()]);
        assert!(r.problems.is_empty());
        assert!(c.covers(Cpid::parse(B).unwrap()));
    }

    #[test]
    fn no_annotation_is_no_context_and_no_problem() {
        assert_eq!(ChangeContext::read(None), Read::default());
        let a = annotations(&[("other", "x")]);
        assert_eq!(ChangeContext::read(Some(&a)), Read::default());
    }

    #[test]
    fn a_forged_cpid_is_a_problem_naming_the_annotation() {
        let a = annotations(&[(CPID_ANNOTATION, &format!("{A},{B}"))]);
        let r = ChangeContext::read(Some(&a));
        assert!(r.context.is_none());
        let msg = r.problems[0].to_string();
        assert!(msg.starts_with("annotation kascade.io/cpid:"), "{msg}");
    }

    #[test]
    fn broken_ancestors_are_dropped_and_the_cpid_kept() {
        let many = vec![B; 40].join(",");
        for bad in ["not-a-uuid", many.as_str()] {
            let a = annotations(&[(CPID_ANNOTATION, A), (ANCESTORS_ANNOTATION, bad)]);
            let r = ChangeContext::read(Some(&a));
            assert_eq!(r.context.unwrap().ancestors, vec![]);
            assert!(matches!(r.problems[..], [ContextError::Ancestors(_)]));
        }
        // Its own CPID listed as an ancestor is ignored, not a cycle.
        let a = annotations(&[(CPID_ANNOTATION, A), (ANCESTORS_ANNOTATION, A)]);
        assert!(
            ChangeContext::read(Some(&a))
                .context
                .unwrap()
                .ancestors
                .is_empty()
        );
    }

    #[test]
    fn traceparent_is_read_when_there_is_no_cpid() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let a = annotations(&[("tracing.k8s.io/traceparent", tp)]);
        let c = ChangeContext::read(Some(&a)).context.unwrap();
        assert!(c.from_traceparent);
        assert_eq!(c.cpid.to_string(), "4bf92f35-77b3-4da6-a3ce-929d0e0e4736");
        // The CPID annotation wins over a traceparent.
        let a = annotations(&[(CPID_ANNOTATION, A), ("traceparent", tp)]);
        assert_eq!(
            ChangeContext::read(Some(&a))
                .context
                .unwrap()
                .cpid
                .to_string(),
            A
        );
    }

    #[test]
    fn stamping_bounds_the_ancestors_and_removes_a_stale_list() {
        let mut meta = ObjectMeta::default();
        let mut c = ChangeContext::new(Cpid::parse(A).unwrap());
        c.ancestors = (0..10).map(|_| Cpid::new_random()).collect();
        c.stamp(&mut meta, 3);
        let a = meta.annotations.clone().unwrap();
        assert_eq!(a[CPID_ANNOTATION], A);
        assert_eq!(a[ANCESTORS_ANNOTATION].split(',').count(), 3);
        ChangeContext::new(Cpid::parse(B).unwrap()).stamp(&mut meta, 3);
        let a = meta.annotations.unwrap();
        assert_eq!(a[CPID_ANNOTATION], B);
        assert!(!a.contains_key(ANCESTORS_ANNOTATION));
    }
}
