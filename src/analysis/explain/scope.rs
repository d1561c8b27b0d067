//! What the user asked about: a namespace, a label selector, one object, a
//! time range, or everything. Objects in the scope are those named (by
//! namespace, labels or name) and everything under them (what they own, the
//! Pods' claims and nodes…), so a namespace's Pods bring their node along.

use std::collections::{BTreeMap, HashSet};
use std::time::SystemTime;

use crate::aggregate::rules::LabelSelector;
use crate::model::ObjectRef;

/// An object named by the user: `resource/name` (`deploy/web`,
/// `deployments.apps/web`), in [`Scope::namespace`] unless cluster-scoped.
pub(crate) use crate::resources::ObjectArg as ObjectFilter;

/// The scope of an explanation. `Default` is everything.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Only this namespace (and what its objects use: nodes, volumes).
    pub namespace: Option<String>,
    /// Only objects with these labels and what they own (`-l`): the
    /// selector as typed, and parsed.
    pub selector: Option<(String, LabelSelector)>,
    /// Only this object and what it caused (`--object`).
    pub object: Option<ObjectFilter>,
    /// Changes and Events outside `[from, to]` are left out; the state at
    /// `to` is what counts as "at the end".
    pub from: Option<SystemTime>,
    /// See `from`.
    pub to: Option<SystemTime>,
}

impl Scope {
    /// In words, for the report's header.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(o) = &self.object {
            let res = &o.resource;
            match &self.namespace {
                Some(ns) => parts.push(format!("{res} {ns}/{}", o.name)),
                None => parts.push(format!("{res} {}", o.name)),
            }
        } else if let Some(ns) = &self.namespace {
            parts.push(format!("namespace {ns}"));
        }
        if let Some((text, _)) = &self.selector {
            parts.push(format!("objects labelled {text}"));
        }
        let time = |t: &SystemTime| humantime::format_rfc3339_seconds(*t).to_string();
        match (&self.from, &self.to) {
            (Some(f), Some(t)) => parts.push(format!("from {} to {}", time(f), time(t))),
            (Some(f), None) => parts.push(format!("from {}", time(f))),
            (None, Some(t)) => parts.push(format!("until {}", time(t))),
            (None, None) => {}
        }
        if parts.is_empty() {
            "everything".to_string()
        } else {
            parts.join(", ")
        }
    }

    pub(super) fn admits_time(&self, t: SystemTime) -> bool {
        self.to.is_none_or(|to| t <= to)
    }

    /// Whether records of `o` may matter: objects of other namespaces do
    /// not when a namespace is given (cluster-scoped ones may, as children).
    pub(super) fn may_concern(&self, o: &ObjectRef) -> bool {
        match &self.namespace {
            Some(ns) => o.namespace.is_empty() || o.namespace == *ns,
            None => true,
        }
    }

    pub(super) fn needs_labels(&self) -> bool {
        self.selector.is_some()
    }

    /// Whether the user named this object itself.
    pub(super) fn names(&self, o: &ObjectRef, labels: Option<&BTreeMap<String, String>>) -> bool {
        if let Some(ns) = &self.namespace
            && o.namespace != *ns
        {
            return false;
        }
        if let Some(f) = &self.object
            && !f.names(o, None)
        {
            return false;
        }
        if let Some((_, sel)) = &self.selector {
            return labels.is_some_and(|l| sel.matches(l));
        }
        true
    }

    /// The objects in the scope, given each object's identity, labels and
    /// children: those named, then everything under them.
    pub(super) fn members<'a>(
        &self,
        objects: impl Iterator<Item = (&'a ObjectRef, Option<&'a BTreeMap<String, String>>)>,
        children: impl Fn(usize) -> Vec<usize>,
    ) -> HashSet<usize> {
        let mut out = HashSet::new();
        let mut stack: Vec<usize> = objects
            .enumerate()
            .filter(|(_, (o, l))| self.names(o, *l))
            .map(|(i, _)| i)
            .collect();
        while let Some(i) = stack.pop() {
            if out.insert(i) {
                stack.extend(children(i));
            }
        }
        out
    }

    /// The time a finding must reach to count (its last occurrence).
    pub(super) fn admits_finding(&self, last: SystemTime) -> bool {
        self.from.is_none_or(|f| last >= f)
    }
}

/// Parses a label selector as kubectl takes it: `app=web,tier!=db`,
/// `env in (a,b)`, `env notin (c)`, `key`, `!key`.
pub fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    use kube::core::{Expression, Selector};
    let mut exprs = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        // A requirement ends at the first comma outside parentheses.
        let mut depth = 0;
        let mut end = rest.len();
        for (i, ch) in rest.char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let req = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("").trim();
        let bad = || format!("label selector {text:?}: cannot read {req:?}");
        let set = |s: &str| -> Result<Vec<String>, String> {
            let inner = s
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(bad)?;
            Ok(inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect())
        };
        let expr = if let Some((k, v)) = req.split_once("!=") {
            Expression::NotEqual(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
            Expression::Equal(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = req.split_once(" notin ") {
            Expression::NotIn(k.trim().into(), set(v)?.into_iter().collect())
        } else if let Some((k, v)) = req.split_once(" in ") {
            Expression::In(k.trim().into(), set(v)?.into_iter().collect())
        } else if let Some(k) = req.strip_prefix('!') {
            Expression::DoesNotExist(k.trim().into())
        } else if !req.is_empty() && !req.contains([' ', '(', ')']) {
            Expression::Exists(req.into())
        } else {
            return Err(bad());
        };
        exprs.push(expr);
    }
    if exprs.is_empty() {
        return Err(format!("label selector {text:?} is empty"));
    }
    let selector: Selector = exprs.into_iter().collect();
    Ok(LabelSelector::from_selector(selector))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_read_as_kubectl_reads_them() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db")]);
        for (text, on_web, on_db) in [
            ("app=web", true, false),
            ("app==web,tier=front", true, false),
            ("app!=web", false, true),
            ("app in (web, api)", true, false),
            ("app notin (web)", false, true),
            ("tier", true, false),
            ("!tier", false, true),
        ] {
            let s = parse_selector(text).unwrap();
            assert_eq!(s.matches(&web), on_web, "{text} on web");
            assert_eq!(s.matches(&db), on_db, "{text} on db");
        }
        for bad in ["", "app in web", "a b"] {
            assert!(parse_selector(bad).is_err(), "{bad:?} accepted");
        }
    }
}
