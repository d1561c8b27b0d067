//! Secret values never leave the process: they are replaced by a marker before
//! an object is cached, diffed or snapshotted.
//!
//! The marker carries a short keyed hash so a user can still see *that* a value
//! changed. The key is random per process, so the hash of a weak secret cannot
//! be brute-forced offline from exported spans; replicas (and restarts) that
//! must show one value with one marker share a secret key instead
//! ([`Redactor::keyed`], `--redaction-key-file`).
//!
//! What is redacted, in every object (audit request/response objects that
//! become states, list-watch objects):
//! - Secrets: every value of `data` and `stringData`;
//! - every leaf whose path matches `--redact-paths` (by default env values
//!   whose names look like credentials). List items are also matched by
//!   their `name` where diffs label them by index (duplicate env names), so
//!   a duplicated `API_TOKEN` is still found;
//! - annotations holding a copy of the object (`last-applied-configuration`
//!   and the like, or any annotation whose value is a JSON object with
//!   `apiVersion`/`kind`): parsed and redacted by the same rules, Secret
//!   rules included for a copy of a Secret; a known copy annotation that does
//!   not parse is replaced by a marker as a whole.
//!
//! Not covered (documented in docs/redaction.md): credentials in container `args` or
//! `command`, in ConfigMaps, or in env vars whose names do not say what they
//! hold (add a `--redact-paths` pattern for those).

use std::hash::{BuildHasher, Hasher};

use crate::json::{
    JsonContainerTrait as _, JsonValueMutTrait as _, JsonValueTrait as _, Value, ValueRef,
};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

mod hidden;
mod paths;

pub(crate) use hidden::HiddenValues;
use hidden::Sink;

pub use paths::PathPattern;
pub(crate) use paths::{Backwards, PathCursor};

use std::ops::Range;

#[cfg(doc)]
use super::diff::push_field_segment;
use super::diff::{FieldSegment, list_item_key, push_item_label};

pub const MARKER_PREFIX: &str = "<redacted:";

/// Annotation that holds a client-side applied copy of the whole object.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotations in which tools keep a copy of the object as applied. One that
/// cannot be read as a JSON object is replaced whole.
const COPY_ANNOTATIONS: &[&str] = &[
    LAST_APPLIED,
    // kapp keeps the original manifest.
    "kapp.k14s.io/original",
    // Rancher/k3s keep it gzipped and base64-encoded: never readable here.
    "objectset.rio.cattle.io/applied",
];

/// Copies nested in copies (an annotation of a copy) deeper than this are
/// replaced whole rather than parsed again.
const MAX_COPY_DEPTH: u32 = 4;

/// Values this short are not scrubbed from messages ([`Redactor::scrub`]).
pub(crate) const MIN_SCRUBBED_BYTES: usize = 4;

/// Default extra redaction: env var values whose names look like credentials.
pub const DEFAULT_REDACT_PATHS: &str =
    r"(?i)\.env\[[^\]]*(password|passwd|secret|token|apikey|api_key|credential)[^\]]*\]\.value$";

#[derive(Clone)]
pub struct Redactor {
    paths: Option<std::sync::Arc<PathPattern>>,
    seed: u64,
}

/// What reading an annotation as a copy of an object found.
enum Copy {
    /// Not a copy, or a copy with nothing to redact: left as it is.
    Unchanged,
    /// A copy with redacted values, serialised again.
    Redacted(String),
    /// Must not be shown: a known copy annotation that is not a JSON object,
    /// or copies nested too deep.
    Hidden,
}

impl Redactor {
    /// Markers keyed at random: this process's markers match no other's.
    pub fn new(paths: Option<PathPattern>) -> Self {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self {
            paths: paths.map(std::sync::Arc::new),
            seed,
        }
    }

    /// Markers keyed by `key`, a secret shared by the processes whose
    /// markers must agree (the collector's replicas, its restarts): the same
    /// value gets the same marker in each. Whoever holds the key can test
    /// guesses of a value against its marker, so it is kept like a
    /// credential; the caller checks that it is long enough.
    pub fn keyed(paths: Option<PathPattern>, key: &[u8]) -> Self {
        Self {
            paths: paths.map(std::sync::Arc::new),
            seed: xxh3_64(key),
        }
    }

    pub fn marker(&self, v: &Value) -> Value {
        let text = match v.as_str() {
            Some(s) => s.to_string(),
            None => v.to_string(),
        };
        let h = xxh3_64_with_seed(text.as_bytes(), self.seed);
        Value::from(format!("{MARKER_PREFIX}{:08x}>", h >> 32).as_str())
    }

    /// Redacts `obj` in place, an object of `group`/`resource`.
    pub fn redact(&self, group: &str, resource: &str, obj: &mut Value) {
        self.redact_top(
            group,
            resource,
            obj,
            self.paths.as_deref(),
            &mut Sink::none(),
        );
    }

    /// [`Self::redact`], returning the values it replaced (see
    /// [`HiddenValues`]): nothing is kept, nor costs, when it replaced none.
    pub fn redact_noting(&self, group: &str, resource: &str, obj: &mut Value) -> HiddenValues {
        let mut sink = Sink::keeping();
        self.redact_top(group, resource, obj, self.paths.as_deref(), &mut sink);
        HiddenValues::new(sink.into_pairs(), self.seed)
    }

    /// [`Self::redact`] for an object parsed from `text`: the walk for
    /// `--redact-paths` is skipped when the text shows that no leaf can
    /// match ([`PathPattern::may_match_in`]; most objects, with the
    /// default pattern). The same leaves are redacted. Whether anything
    /// was replaced: when not, `obj` is still `text` parsed, and the state
    /// store may keep `text` for it.
    pub fn redact_parsed(&self, group: &str, resource: &str, obj: &mut Value, text: &str) -> bool {
        let paths = self.paths.as_deref().filter(|p| p.may_match_in(text));
        self.redact_top(group, resource, obj, paths, &mut Sink::none())
    }

    /// [`Self::redact_parsed`], returning the values it replaced as well.
    pub fn redact_parsed_noting(
        &self,
        group: &str,
        resource: &str,
        obj: &mut Value,
        text: &str,
    ) -> (bool, HiddenValues) {
        let paths = self.paths.as_deref().filter(|p| p.may_match_in(text));
        let mut sink = Sink::keeping();
        let changed = self.redact_top(group, resource, obj, paths, &mut sink);
        (changed, HiddenValues::new(sink.into_pairs(), self.seed))
    }

    /// The values this redactor replaces in `objects` (JSON texts of
    /// `group`/`resource`), a Secret's base64-decoded values too.
    pub fn hidden_in(&self, group: &str, resource: &str, objects: &[&str]) -> HiddenValues {
        let mut sink = Sink::keeping();
        for text in objects {
            let Ok(mut object) = crate::json::parse(text) else {
                continue;
            };
            self.redact_top(
                group,
                resource,
                &mut object,
                self.paths.as_deref(),
                &mut sink,
            );
        }
        HiddenValues::new(sink.into_pairs(), self.seed)
    }

    /// `message` (a refused write's Status message, which an admission
    /// webhook may have written quoting the object) with every value this
    /// redactor replaces in the write's objects (`objects`, JSON texts of
    /// `group`/`resource`) replaced by that value's marker, a Secret's
    /// base64-decoded values too; `None` when none occurs. Values shorter
    /// than [`MIN_SCRUBBED_BYTES`] are left: they would match ordinary words.
    /// Kubernetes Events' messages are scrubbed by the same
    /// [`HiddenValues::scrub`], with the values redaction replaced in the
    /// object they are about.
    pub fn scrub(
        &self,
        group: &str,
        resource: &str,
        objects: &[&str],
        message: &str,
    ) -> Option<String> {
        self.hidden_in(group, resource, objects).scrub(message)
    }

    fn redact_top(
        &self,
        group: &str,
        resource: &str,
        obj: &mut Value,
        paths: Option<&PathPattern>,
        sink: &mut Sink,
    ) -> bool {
        let secret = (group.is_empty() && resource == "secrets") || is_secret_kind(obj);
        self.redact_object(secret, obj, 0, paths, sink)
    }

    /// Redacts an object (or a copy of one found in an annotation, at
    /// `depth`), matching `paths` unless the caller found that none can
    /// match; whether anything was replaced.
    fn redact_object(
        &self,
        secret: bool,
        obj: &mut Value,
        depth: u32,
        paths: Option<&PathPattern>,
        sink: &mut Sink,
    ) -> bool {
        let mut changed = false;
        if secret {
            changed |= self.redact_secret(obj, sink);
        }
        changed |= self.redact_copies(secret, obj, depth, paths, sink);
        if let Some(pattern) = paths {
            // Found in a walk that reads, replaced after it (see `Edits`).
            let mut edits = Edits::default();
            if pattern.matches_backwards() {
                self.redact_places(pattern, obj, None, &mut String::new(), &mut edits);
            } else {
                let root = pattern.root();
                self.redact_paths(pattern, obj, root, None, &mut String::new(), &mut edits);
            }
            changed |= apply_edits(edits.found, obj, sink);
        }
        changed
    }

    fn redact_secret(&self, obj: &mut Value, sink: &mut Sink) -> bool {
        let mut changed = false;
        for field in ["data", "stringData"] {
            if obj.get(field).is_none_or(|v| v.is_null()) {
                continue;
            }
            let Some(v) = obj.get_mut(field) else {
                continue;
            };
            if let Some(map) = v.as_object_mut() {
                for (_, v) in map.iter_mut() {
                    let marker = self.marker(v);
                    sink.note(v, &marker);
                    *v = marker;
                    changed = true;
                }
            } else {
                // Not a map (the apiserver would refuse it): hidden whole.
                let marker = self.marker(v);
                sink.note(v, &marker);
                *v = marker;
                changed = true;
            }
        }
        changed
    }

    /// Redacts the annotations that hold a copy of the object.
    fn redact_copies(
        &self,
        secret: bool,
        obj: &mut Value,
        depth: u32,
        paths: Option<&PathPattern>,
        sink: &mut Sink,
    ) -> bool {
        let Some(annotations) =
            crate::json::pointer(obj, "/metadata/annotations").and_then(Value::as_object)
        else {
            return false;
        };
        let mut replaced = Vec::new();
        for (key, v) in annotations.iter() {
            let known = COPY_ANNOTATIONS.contains(&key);
            let found = match v.as_ref() {
                ValueRef::String(text) if known || text.trim_start().starts_with('{') => {
                    self.redact_copy(secret, text, known, depth, paths, sink)
                }
                ValueRef::String(_) | ValueRef::Null => Copy::Unchanged,
                // Annotations are strings: anything else is not shown.
                _ => Copy::Hidden,
            };
            match found {
                Copy::Unchanged => {}
                Copy::Redacted(text) => {
                    replaced.push((key.to_string(), Value::from(text.as_str())))
                }
                Copy::Hidden => {
                    let marker = self.marker(v);
                    sink.note(v, &marker);
                    replaced.push((key.to_string(), marker));
                }
            }
        }
        if replaced.is_empty() {
            return false;
        }
        if let Some(annotations) =
            crate::json::pointer_mut(obj, "/metadata/annotations").and_then(Value::as_object_mut)
        {
            for (key, v) in replaced {
                annotations.insert(&key, v);
            }
        }
        true
    }

    /// `text` read as a copy of an object: redacted like the object (by the
    /// Secret rules too when either is a Secret). `known`: the annotation is
    /// one that holds copies, so what cannot be read is hidden.
    fn redact_copy(
        &self,
        secret: bool,
        text: &str,
        known: bool,
        depth: u32,
        paths: Option<&PathPattern>,
        sink: &mut Sink,
    ) -> Copy {
        let parsed = crate::json::parse(text);
        let is_copy = |v: &Value| {
            v.is_object()
                && (known
                    || v.get("kind").is_some_and(|k| k.is_str())
                    || v.get("apiVersion").is_some_and(|v| v.is_str()))
        };
        match parsed {
            Ok(mut copy) if is_copy(&copy) => {
                if depth >= MAX_COPY_DEPTH {
                    return Copy::Hidden;
                }
                let secret = secret || is_secret_kind(&copy);
                if !self.redact_object(secret, &mut copy, depth + 1, paths, sink) {
                    return Copy::Unchanged;
                }
                match sonic_rs::to_string(&copy) {
                    Ok(s) => Copy::Redacted(s),
                    Err(_) => Copy::Hidden,
                }
            }
            _ if known => Copy::Hidden,
            // Some other JSON annotation (e.g. `kascade.io/link`).
            _ => Copy::Unchanged,
        }
    }

    /// Redacts the leaves of `v` whose path matches `re`. `path` is the path
    /// as diffs spell it. `by_name`, once it differs from `path`, is the same
    /// path with list items labelled by their `name` field even where diffs
    /// label them otherwise (duplicate env names fall back to indices): a
    /// leaf is redacted when either matches, so an env var is judged by its
    /// own name whatever its list looks like.
    fn redact_paths<'v>(
        &self,
        pattern: &PathPattern,
        v: &'v Value,
        at: PathCursor,
        by_name: Option<PathCursor>,
        segment: &mut String,
        edits: &mut Edits<'v>,
    ) {
        match v.as_ref() {
            ValueRef::Object(map) => {
                for (k, child) in map.iter() {
                    let next = pattern.feed_field(at, k);
                    let alt = by_name.map(|alt| pattern.feed_field(alt, k));
                    edits.trail.push(Hop::Field(k));
                    self.redact_paths(pattern, child, next, alt, segment, edits);
                    edits.trail.pop();
                }
            }
            ValueRef::Array(items) => {
                let key = list_item_key(items);
                for (i, child) in items.iter().enumerate() {
                    // Items the diff labels by another key or by index are
                    // also matched by their name (duplicate env names).
                    let named =
                        key != Some("name") && child.get("name").is_some_and(|n| n.is_str());
                    segment.clear();
                    push_item_label(segment, child, key, i);
                    let next = pattern.feed(at, segment);
                    let alt = (named || by_name.is_some()).then(|| {
                        let name_key = if named { Some("name") } else { key };
                        segment.clear();
                        push_item_label(segment, child, name_key, i);
                        pattern.feed(by_name.unwrap_or(at), segment)
                    });
                    edits.trail.push(Hop::Item(i));
                    self.redact_paths(pattern, child, next, alt, segment, edits);
                    edits.trail.pop();
                }
            }
            ValueRef::Null => {}
            _ => {
                if pattern.is_match(at) || by_name.is_some_and(|alt| pattern.is_match(alt)) {
                    edits.replace(self.marker(v));
                }
            }
        }
    }
}

/// Where a value sits in the object being walked by
/// [`Redactor::redact_places`]: its own path segment, then its parent's
/// place, up to the object. Leaves read their paths backwards from here.
struct Place<'a> {
    step: Step<'a>,
    up: Option<&'a Place<'a>>,
    /// This place or one above it is a named list item that diffs label
    /// otherwise: its path by name (`by_name` of [`Redactor::redact_paths`])
    /// differs from its path.
    by_name_differs: bool,
}

enum Step<'a> {
    Field(&'a str),
    /// A list item's labels, in the walk's label buffer: as diffs label
    /// it, and by its `name`.
    Item {
        label: Range<usize>,
        by_name: Range<usize>,
    },
}

impl Redactor {
    /// [`Self::redact_paths`] for a pattern whose matches end where the
    /// path ends: the same leaves are redacted, but no inner level feeds a
    /// DFA; each leaf reads its path backwards, from its own segment up,
    /// and most are ruled out by their last byte or two. `labels` holds the
    /// list item labels of the places above.
    fn redact_places<'v>(
        &self,
        pattern: &PathPattern,
        v: &'v Value,
        place: Option<&Place<'_>>,
        labels: &mut String,
        edits: &mut Edits<'v>,
    ) {
        let differs = place.is_some_and(|p| p.by_name_differs);
        match v.as_ref() {
            ValueRef::Object(map) => {
                for (k, child) in map.iter() {
                    let here = Place {
                        step: Step::Field(k),
                        up: place,
                        by_name_differs: differs,
                    };
                    edits.trail.push(Hop::Field(k));
                    self.redact_places(pattern, child, Some(&here), labels, edits);
                    edits.trail.pop();
                }
            }
            ValueRef::Array(items) => {
                let key = list_item_key(items);
                for (i, child) in items.iter().enumerate() {
                    let named =
                        key != Some("name") && child.get("name").is_some_and(|n| n.is_str());
                    let start = labels.len();
                    push_item_label(labels, child, key, i);
                    let label = start..labels.len();
                    let by_name = if named {
                        push_item_label(labels, child, Some("name"), i);
                        label.end..labels.len()
                    } else {
                        label.clone()
                    };
                    let here = Place {
                        step: Step::Item { label, by_name },
                        up: place,
                        by_name_differs: differs || named,
                    };
                    edits.trail.push(Hop::Item(i));
                    self.redact_places(pattern, child, Some(&here), labels, edits);
                    edits.trail.pop();
                    labels.truncate(start);
                }
            }
            ValueRef::Null => {}
            _ => {
                if path_matches(pattern, place, labels, false)
                    || (differs && path_matches(pattern, place, labels, true))
                {
                    edits.replace(self.marker(v));
                }
            }
        }
    }
}

/// A step from a value to one of its children.
#[derive(Clone, Copy)]
enum Hop<'v> {
    Field(&'v str),
    Item(usize),
}

/// Leaves to replace, found by a walk that only reads: a walk through
/// `&mut Value` would make every object it passes an owned map (a parsed
/// object's nodes live in one arena until written through), where a
/// replacement makes owned only the objects above it.
#[derive(Default)]
struct Edits<'v> {
    /// The walk's place: the hops from the object to the value it is at.
    trail: Vec<Hop<'v>>,
    found: Vec<(Vec<OwnedHop>, Value)>,
}

enum OwnedHop {
    Field(Box<str>),
    Item(usize),
}

impl Edits<'_> {
    /// Replaces the value the walk is at with `by`.
    fn replace(&mut self, by: Value) {
        let path = self
            .trail
            .iter()
            .map(|hop| match *hop {
                Hop::Field(k) => OwnedHop::Field(k.into()),
                Hop::Item(i) => OwnedHop::Item(i),
            })
            .collect();
        self.found.push((path, by));
    }
}

/// Makes the replacements [`Edits`] found in `obj` (the object walked);
/// whether there were any.
fn apply_edits(found: Vec<(Vec<OwnedHop>, Value)>, obj: &mut Value, sink: &mut Sink) -> bool {
    let changed = !found.is_empty();
    for (path, by) in found {
        let slot = path.iter().try_fold(&mut *obj, |cur, hop| match hop {
            OwnedHop::Field(k) => cur.as_object_mut()?.get_mut(k),
            OwnedHop::Item(i) => cur.as_array_mut()?.get_mut(*i),
        });
        if let Some(slot) = slot {
            sink.note(slot, &by);
            *slot = by;
        }
    }
    changed
}

/// Whether `pattern` (read backwards) matches the path of `place`, spelled
/// as diffs spell it ([`push_field_segment`], [`push_item_label`]), or
/// with named list items labelled by name.
fn path_matches(
    pattern: &PathPattern,
    place: Option<&Place<'_>>,
    labels: &str,
    by_name: bool,
) -> bool {
    let mut read = pattern.read_backwards();
    let mut at = place;
    while let Some(p) = at {
        read = match &p.step {
            // A field's segment ends with its key's last byte when the key
            // is plain, with `]` when not: when the pattern fails on both,
            // the key need not be looked at further (most leaves).
            Step::Field(key)
                if key.as_bytes().last().is_some_and(|&last| {
                    pattern.fails_on(read, last) && pattern.fails_on(read, b']')
                }) =>
            {
                Backwards::Failed
            }
            Step::Field(key) => match FieldSegment::of(key) {
                FieldSegment::Plain(key) => {
                    let read = pattern.feed_backwards(read, key);
                    match p.up {
                        Some(_) => pattern.feed_backwards(read, "."),
                        None => read,
                    }
                }
                FieldSegment::Quoted(key) => {
                    let read = pattern.feed_backwards(read, "\"]");
                    let read = pattern.feed_backwards(read, key);
                    pattern.feed_backwards(read, "[\"")
                }
                FieldSegment::Escaped(key) => {
                    pattern.feed_backwards(read, &FieldSegment::escaped(key))
                }
            },
            Step::Item {
                label,
                by_name: name,
            } => {
                let label = if by_name { name } else { label };
                pattern.feed_backwards(read, &labels[label.clone()])
            }
        };
        match read {
            Backwards::Reading(_) => at = p.up,
            Backwards::Matched => return true,
            Backwards::Failed => return false,
        }
    }
    pattern.ends_backwards(read)
}

/// A core/v1 Secret by its own `apiVersion`/`kind`.
fn is_secret_kind(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::diff::walk_leaves;
    use sonic_rs::json;

    /// The request object of the `config` scenario's first create of
    /// `resource` (its Secret, its ConfigMap).
    fn config_objects(resource: &str) -> String {
        let log = include_str!("../../../e2e/fixtures/config/audit.log");
        log.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == resource)
            .map(|e| e["requestObject"].to_string())
            .unwrap()
    }

    #[test]
    fn a_denial_quoting_a_redacted_value_is_scrubbed_and_others_are_left() {
        let r = Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap()));
        let secret = config_objects("secrets");
        let encoded = "a2FzY2FkZS1maXh0dXJlLXMzY3IzdC12YWx1ZQ==";
        assert!(secret.contains(encoded));
        // What an admission webhook's denial may say, quoting the value
        // decoded and as sent.
        let denial = format!(
            "admission webhook \"policy.example.com\" denied the request: \
             password \"kascade-fixture-s3cr3t-value\" ({encoded}) is on the breach list"
        );
        let scrubbed = r.scrub("", "secrets", &[&secret], &denial).unwrap();
        assert!(!scrubbed.contains("s3cr3t"), "{scrubbed}");
        assert!(!scrubbed.contains(encoded), "{scrubbed}");
        assert_eq!(scrubbed.matches(MARKER_PREFIX).count(), 2, "{scrubbed}");
        assert!(scrubbed.starts_with("admission webhook \"policy.example.com\" denied"));
        // A message quoting nothing redacted is left as it is.
        let plain = "secrets \"app-secret\" already exists";
        assert_eq!(r.scrub("", "secrets", &[&secret], plain), None);
        // Nothing of a ConfigMap is redacted: nothing is scrubbed.
        let cm = config_objects("configmaps");
        assert_eq!(r.scrub("", "configmaps", &[&cm], &denial), None);
    }

    #[test]
    fn secret_data_and_last_applied_are_redacted() {
        let r = Redactor::new(None);
        let mut s = json!({
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{\"data\":{\"k\":\"c2VjcmV0\"}}"}},
            "data": {"k": "c2VjcmV0"},
            "stringData": {"p": "hunter2"}
        });
        r.redact("", "secrets", &mut s);
        let text = s.to_string();
        assert!(!text.contains("c2VjcmV0"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(s["data"]["k"].as_str().unwrap().starts_with(MARKER_PREFIX));
    }

    #[test]
    fn same_value_same_marker_different_value_different_marker() {
        let r = Redactor::new(None);
        assert_eq!(r.marker(&json!("a")), r.marker(&json!("a")));
        assert_ne!(r.marker(&json!("a")), r.marker(&json!("b")));
    }

    #[test]
    fn processes_sharing_a_key_give_a_value_one_marker_others_do_not() {
        let key = b"0123456789abcdef0123456789abcdef";
        let (a, b) = (Redactor::keyed(None, key), Redactor::keyed(None, key));
        assert_eq!(a.marker(&json!("hunter2")), b.marker(&json!("hunter2")));
        assert_ne!(a.marker(&json!("hunter2")), a.marker(&json!("hunter3")));
        let other = Redactor::keyed(None, b"0123456789abcdef0123456789abcdeF");
        assert_ne!(a.marker(&json!("hunter2")), other.marker(&json!("hunter2")));
        // Unkeyed, each process has its own key (a collision of the
        // markers' 32 bits is one chance in 2^32).
        assert_ne!(
            Redactor::new(None).marker(&json!("hunter2")),
            Redactor::new(None).marker(&json!("hunter2"))
        );
    }

    #[test]
    fn path_pattern_redacts_credential_env_values_only() {
        let r = Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap()));
        let mut pod = json!({"spec": {"containers": [{"name": "app", "env": [
            {"name": "DB_PASSWORD", "value": "pw"}, {"name": "MODE", "value": "fast"}]}]}});
        r.redact("", "pods", &mut pod);
        let env = &pod["spec"]["containers"][0]["env"];
        assert!(env[0]["value"].as_str().unwrap().starts_with(MARKER_PREFIX));
        assert_eq!(env[1]["value"], "fast");
        // ConfigMaps are not Secrets: data stays.
        let mut cm = json!({"data": {"k": "v"}});
        r.redact("", "configmaps", &mut cm);
        assert_eq!(cm["data"]["k"], "v");
    }

    fn default_redactor() -> Redactor {
        Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap()))
    }

    fn is_marker(v: &Value) -> bool {
        v.as_str().is_some_and(|s| s.starts_with(MARKER_PREFIX))
    }

    #[test]
    fn duplicate_env_names_are_redacted_by_name_although_diffs_use_indices() {
        let r = default_redactor();
        let mut pod = json!({"spec": {"containers": [{"name": "app", "env": [
            {"name": "API_TOKEN", "value": "t1"},
            {"name": "MODE", "value": "fast"},
            {"name": "API_TOKEN", "value": "t2"}]}]}});
        // Precondition: the diff labels these items by index.
        let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(list_item_key(env), None);
        r.redact("", "pods", &mut pod);
        let env = &pod["spec"]["containers"][0]["env"];
        assert!(is_marker(&env[0]["value"]), "{env}");
        assert!(is_marker(&env[2]["value"]), "{env}");
        assert_eq!(env[1]["value"], "fast");
        assert_eq!(env[0]["name"], "API_TOKEN", "names stay readable");
    }

    #[test]
    fn leaves_matched_backwards_are_the_leaves_the_segment_walk_redacts() {
        let mut objects: Vec<Value> =
            crate::pipeline::fixture_objects(&["config", "deployment", "statefulset"])
                .iter()
                .map(|o| crate::json::parse(&o.to_string()).unwrap())
                .collect();
        // Duplicate env names: the diff labels them by index, redaction by name.
        objects.push(json!({"spec": {"containers": [{"name": "app", "env": [
            {"name": "API_TOKEN", "value": "t1"}, {"name": "MODE", "value": "fast"},
            {"name": "API_TOKEN", "value": "t2"}]}]}}));
        // Keys written escaped in paths.
        objects.push(json!({"metadata": {"annotations": {"we\"ird": "x", "line\nbreak": "y"}}}));
        for pattern in [
            r#"\\"ird"\]$|\\nbreak"\]$"#,
            DEFAULT_REDACT_PATHS,
            r"image$",
            r"(?i)\.NAME$",
            r"\]\.value$",
            r"env\[[01]\]\.value$",
            r"^(spec\.template\.)?metadata\.labels\.[a-z-]+$",
            r#"\["[^"]*kubernetes\.io/[^"]*"\]$"#,
            r"containers\[[^\]]+\]\.ports\[[0-9]+\]\.containerPort$",
        ] {
            let backwards = Redactor::new(Some(PathPattern::new(pattern).unwrap()));
            let forwards = Redactor {
                paths: Some(std::sync::Arc::new(
                    PathPattern::forward_only(pattern).unwrap(),
                )),
                seed: backwards.seed,
            };
            assert!(
                backwards.paths.as_ref().unwrap().matches_backwards(),
                "{pattern}"
            );
            assert!(!forwards.paths.as_ref().unwrap().matches_backwards());
            let mut redacted = 0;
            for object in &objects {
                let (mut a, mut b) = (object.clone(), object.clone());
                let changed = backwards.redact_object(
                    false,
                    &mut a,
                    0,
                    backwards.paths.as_deref(),
                    &mut Sink::none(),
                );
                assert_eq!(
                    changed,
                    forwards.redact_object(
                        false,
                        &mut b,
                        0,
                        forwards.paths.as_deref(),
                        &mut Sink::none()
                    ),
                    "{pattern}"
                );
                assert_eq!(a, b, "{pattern} on {object}");
                walk_leaves(&a, &mut |_, leaf| redacted += usize::from(is_marker(leaf)));
            }
            assert!(
                redacted > 0,
                "{pattern} redacted nothing: the case proves little"
            );
        }
    }

    #[test]
    fn objects_whose_text_rules_out_a_match_are_redacted_the_same_without_the_walk() {
        let mut texts: Vec<String> = crate::pipeline::fixture_objects(&[
            "config",
            "deployment",
            "statefulset",
            "service",
            "bigobject",
        ])
        .iter()
        .map(serde_json::Value::to_string)
        .collect();
        let fixture_texts = texts.len();
        let env = json!({"name": "app", "image": "nginx", "env": [
            {"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "fast"}]});
        texts.push(json!({"kind": "Pod", "spec": {"containers": [env]}}).to_string());
        // The value only in a copy held by an annotation (escaped quotes).
        let copy = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [env]}});
        texts.push(
            json!({"kind": "Pod", "metadata": {"annotations": {LAST_APPLIED: copy.to_string()}}})
                .to_string(),
        );
        // A key written with escapes, as the apiserver would not but could.
        texts.push(
            r#"{"spec":{"containers":[{"name":"a","env":[{"name":"API_TOKEN","\u0076alue":"s"}]}]}}"#
                .to_string(),
        );
        for (pattern, prefiltered) in [
            (DEFAULT_REDACT_PATHS, true),
            (r"image$", true),
            (r"(?i)\.NAME$", true),
            (r"env\[[01]\]\.value$", true),
            // Ends with `]` (a quoted key or a list label), or with a
            // letter whose case folds outside ASCII (ſ): no search.
            (r#"\["[^"]*kubernetes\.io/[^"]*"\]$"#, false),
            (r"(?i)\.pass$", false),
            // Ends with one of too many literals (a class of 27 bytes).
            (r"^(spec\.template\.)?metadata\.labels\.[a-z-]+$", false),
            // Not anchored at the path's end: no search.
            (r"token", false),
        ] {
            let r = Redactor::new(Some(PathPattern::new(pattern).unwrap()));
            let paths = r.paths.as_deref().unwrap();
            let mut ruled_out = 0;
            let mut planted_redacted = 0;
            for (i, text) in texts.iter().enumerate() {
                let object: Value = crate::json::parse(text).unwrap();
                let (mut walked, mut skipping) = (object.clone(), object.clone());
                r.redact("", "pods", &mut walked);
                let changed = r.redact_parsed("", "pods", &mut skipping, text);
                assert_eq!(skipping, walked, "{pattern} on {text}");
                // What lets the state store keep `text` for the object.
                assert_eq!(changed, skipping != object, "{pattern} on {text}");
                ruled_out += usize::from(!paths.may_match_in(text));
                planted_redacted += usize::from(i >= fixture_texts && walked != object);
            }
            assert_eq!(
                ruled_out > 0,
                prefiltered,
                "{pattern}: {ruled_out} ruled out"
            );
            if pattern == DEFAULT_REDACT_PATHS {
                // Most objects carry no `value` key; the three planted do,
                // and are redacted.
                assert!(
                    ruled_out * 10 > fixture_texts * 9,
                    "{ruled_out} of {fixture_texts}"
                );
                assert_eq!(planted_redacted, 3, "{pattern}");
                for planted in &texts[fixture_texts..] {
                    assert!(paths.may_match_in(planted), "{planted}");
                }
            }
        }
    }

    #[test]
    fn patterns_written_against_diff_paths_still_match() {
        // A user pattern naming an index label (items without names).
        let r = Redactor::new(Some(PathPattern::new(r"^spec\.args\[1\]$").unwrap()));
        let mut obj = json!({"spec": {"args": ["--user=a", "--password=b"]}});
        r.redact("example.com", "things", &mut obj);
        assert_eq!(obj["spec"]["args"][0], "--user=a");
        assert!(is_marker(&obj["spec"]["args"][1]));
    }

    #[test]
    fn last_applied_of_any_object_is_redacted_like_the_object() {
        let r = default_redactor();
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx",
                "env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}]}}}});
        let mut deploy = json!({"metadata": {"name": "web", "annotations": {
            LAST_APPLIED: format!("{applied}\n"),
            "kascade.io/link": "{\"resource\":\"services\",\"name\":\"web\"}"}}});
        r.redact("apps", "deployments", &mut deploy);
        let text = deploy.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        let annotations = &deploy["metadata"]["annotations"];
        let copy: Value = crate::json::parse(annotations[LAST_APPLIED].as_str().unwrap()).unwrap();
        let env = &copy["spec"]["template"]["spec"]["containers"][0]["env"][0];
        assert!(is_marker(&env["value"]), "{copy}");
        assert_eq!(
            copy["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx"
        );
        // Other JSON annotations that are not object copies are left as written.
        assert_eq!(
            annotations["kascade.io/link"],
            "{\"resource\":\"services\",\"name\":\"web\"}"
        );
    }

    #[test]
    fn copies_without_credentials_are_kept_byte_for_byte() {
        let r = default_redactor();
        let text = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\", \"data\":{\"k\":\"v\"}}\n";
        let mut cm = json!({"metadata": {"annotations": {LAST_APPLIED: text}}});
        r.redact("", "configmaps", &mut cm);
        assert_eq!(cm["metadata"]["annotations"][LAST_APPLIED], text);
    }

    #[test]
    fn unreadable_or_too_deep_copies_are_hidden_whole() {
        let r = default_redactor();
        let mut pod = json!({"metadata": {"annotations": {
            LAST_APPLIED: "{\"spec\":{\"containers\":[{\"env\":[{\"name\":\"TOKEN\",\"value\":\"cut",
            "objectset.rio.cattle.io/applied": "H4sIAAAAAAAA/6pWKkktLlGyUlAqS8wpTVWqBQQAAP//",
        }}});
        r.redact("", "pods", &mut pod);
        let annotations = &pod["metadata"]["annotations"];
        assert!(is_marker(&annotations[LAST_APPLIED]));
        assert!(is_marker(&annotations["objectset.rio.cattle.io/applied"]));

        // A copy inside a copy inside a copy…: hidden below MAX_COPY_DEPTH.
        let mut nested = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "deep"}});
        for _ in 0..=MAX_COPY_DEPTH {
            nested = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"annotations": {LAST_APPLIED: nested.to_string()}}});
        }
        r.redact("", "configmaps", &mut nested);
        assert!(!nested.to_string().contains("deep"), "{nested}");
    }

    #[test]
    fn a_copy_of_a_secret_is_redacted_by_the_secret_rules_wherever_it_sits() {
        let r = Redactor::new(None);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"p": "hunter2"}});
        let mut cm = json!({"metadata": {"annotations": {
            "tool.example.com/original": secret.to_string()}}});
        r.redact("", "configmaps", &mut cm);
        let text = cm.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("stringData"),
            "the copy is kept, redacted: {text}"
        );
        // Secret data that is not a map is hidden whole.
        let mut odd = json!({"data": "aHVudGVyMg=="});
        r.redact("", "secrets", &mut odd);
        assert!(is_marker(&odd["data"]));
    }
}
