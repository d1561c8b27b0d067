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

mod edits;
mod hidden;
mod paths;

use edits::{Edits, Hop, apply_edits};
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
mod tests;
