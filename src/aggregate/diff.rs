//! Object diffs: what changed between two versions of an object, path by path.
//!
//! Lists of named items (containers, env vars, conditions, volumes…) are matched
//! by their name-like key rather than by index, so inserting a container does
//! not show every later container as changed.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value, ValueRef, same};

/// Keys that identify the items of a list, tried in order.
const LIST_ITEM_KEYS: &[&str] = &["name", "type", "mountPath", "devicePath", "containerPort"];

/// Paths whose changes are bookkeeping, not behaviour.
pub fn is_noise(path: &str) -> bool {
    path.starts_with("metadata.managedFields") || path == "metadata.resourceVersion"
}

/// One changed leaf. `old`/`new` are JSON texts; `None` means absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    // Shared, not copied: the watch's diff waits in the ledger and is handed
    // to the audit span that claims it.
    pub path: Arc<str>,
    pub old: Option<Arc<str>>,
    pub new: Option<Arc<str>>,
}

impl Change {
    pub fn op(&self) -> &'static str {
        match (&self.old, &self.new) {
            (None, Some(_)) => "add",
            (Some(_), None) => "remove",
            _ => "replace",
        }
    }
}

/// Whether `key` is written as `.key` in a path (else `["key"]`).
pub(crate) fn is_plain_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(is_plain_key_byte)
}

/// Whether `b` may appear in a key written as `.key`.
#[inline]
pub(crate) fn is_plain_key_byte(b: u8) -> bool {
    // A table over bytes, not chars: every allowed character is ASCII, and
    // no byte of a multi-byte character is (keys are checked a million
    // times a second).
    const PLAIN: [bool; 256] = {
        let mut t = [false; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            t[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'$';
            b += 1;
        }
        t
    };
    PLAIN[usize::from(b)]
}

/// Appends `key` to `path` as a field segment, quoting keys that are not
/// plain identifiers (label and annotation keys contain dots and slashes).
pub(crate) fn push_field(path: &mut String, key: &str) {
    let first = path.is_empty();
    push_field_segment(path, key, first);
}

/// How a field's path segment is spelled (the key is borrowed). The diff
/// writes it out ([`push_field_segment`]); redaction feeds it to a DFA
/// forwards or backwards without writing it: one spelling for all three.
#[derive(Clone, Copy)]
pub(crate) enum FieldSegment<'a> {
    /// `.key`, or `key` when it begins the path.
    Plain(&'a str),
    /// `["key"]`: a key that is not an identifier (label and annotation
    /// keys contain dots and slashes) but that JSON writes as it is.
    Quoted(&'a str),
    /// `["k\"ey"]`: a key JSON escapes (quotes, control characters;
    /// rare), written out by [`FieldSegment::escaped`].
    Escaped(&'a str),
}

impl<'a> FieldSegment<'a> {
    #[inline]
    pub(crate) fn of(key: &'a str) -> Self {
        if is_plain_key(key) {
            Self::Plain(key)
        } else if crate::json::needs_no_escape(key) {
            Self::Quoted(key)
        } else {
            Self::Escaped(key)
        }
    }

    /// The segment of an escaped key, written out.
    pub(crate) fn escaped(key: &str) -> String {
        format!("[{}]", serde_json::Value::String(key.to_string()))
    }
}

/// Appends `key` as a field segment to `path`; `first`: it begins the path
/// (no dot before it).
pub(crate) fn push_field_segment(path: &mut String, key: &str, first: bool) {
    match FieldSegment::of(key) {
        FieldSegment::Plain(key) => {
            if !first {
                path.push('.');
            }
            path.push_str(key);
        }
        FieldSegment::Quoted(key) => {
            path.push_str("[\"");
            path.push_str(key);
            path.push_str("\"]");
        }
        FieldSegment::Escaped(key) => path.push_str(&FieldSegment::escaped(key)),
    }
}

/// The key that names the items of `items`, if every item is an object
/// carrying it with a distinct scalar value.
pub(crate) fn list_item_key(items: &[Value]) -> Option<&'static str> {
    // Lists of scalars (args, finalizers) have no key: said before any
    // label is gathered.
    if !items.first().is_some_and(|i| i.is_object()) {
        return None;
    }
    'keys: for key in LIST_ITEM_KEYS {
        if !items[0]
            .get(key)
            .is_some_and(|v| v.is_str() || v.is_number())
        {
            continue;
        }
        let mut labels: Vec<Cow<'_, str>> = Vec::with_capacity(items.len());
        for item in items {
            labels.push(match item.get(key).map(Value::as_ref) {
                Some(ValueRef::String(s)) => Cow::Borrowed(s),
                Some(ValueRef::Number(n)) => Cow::Owned(n.to_string()),
                _ => continue 'keys,
            });
        }
        // Most lists are short: comparing pairs beats hashing them.
        let distinct = if labels.len() <= 16 {
            labels
                .iter()
                .enumerate()
                .all(|(i, l)| !labels[..i].contains(l))
        } else {
            labels
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
                == labels.len()
        };
        if distinct {
            return Some(key);
        }
    }
    None
}

/// Appends `[label]` of a list item to `path`: its value of `key` for lists
/// of named items, else its index.
pub(crate) fn push_item_label(path: &mut String, item: &Value, key: Option<&str>, index: usize) {
    path.push('[');
    match key.and_then(|k| item.get(k)) {
        Some(v) if v.is_str() => path.push_str(v.as_str().unwrap_or_default()),
        Some(v) => {
            let _ = write!(path, "{v}");
        }
        None if key.is_some() => {}
        None => {
            let _ = write!(path, "{index}");
        }
    }
    path.push(']');
}

fn item_label(item: &Value, key: &str) -> String {
    match item.get(key) {
        Some(v) => match v.as_str() {
            Some(s) => s.to_string(),
            None => v.to_string(),
        },
        None => String::new(),
    }
}

/// Calls `f(path, leaf)` for every leaf of `v` (scalars, and empty objects or
/// arrays), with paths in kascade's notation: `spec.containers[nginx].image`.
#[cfg(feature = "test-support")]
pub fn walk_leaves(v: &Value, f: &mut impl FnMut(&str, &Value)) {
    let mut path = String::new();
    walk(v, &mut path, f);
}

fn walk(v: &Value, path: &mut String, f: &mut impl FnMut(&str, &Value)) {
    match v.as_ref() {
        ValueRef::Object(map) if !map.is_empty() => {
            for (k, child) in map.iter() {
                let len = path.len();
                push_field(path, k);
                walk(child, path, f);
                path.truncate(len);
            }
        }
        ValueRef::Array(items) if !items.is_empty() => {
            let key = list_item_key(items);
            for (i, child) in items.iter().enumerate() {
                let len = path.len();
                push_item_label(path, child, key, i);
                walk(child, path, f);
                path.truncate(len);
            }
        }
        _ => f(path, v),
    }
}

/// Leaf changes from `old` to `new`, in path order. Walks both trees together
/// and only spells out the paths of subtrees that differ.
pub fn diff(old: &Value, new: &Value) -> Vec<Change> {
    diff_unless(old, new, |_| false)
}

/// [`diff`], where the top-level fields `known_same` names are known to be
/// equal in `old` and `new` (written alike when they were logged): they
/// are not compared.
pub(crate) fn diff_unless(
    old: &Value,
    new: &Value,
    known_same: impl Fn(&str) -> bool,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut path = String::new();
    match (old.as_ref(), new.as_ref()) {
        (ValueRef::Object(a), ValueRef::Object(b)) if !a.is_empty() && !b.is_empty() => {
            diff_fields(a, b, &known_same, &mut path, &mut changes);
        }
        _ if !same(old, new) => diff_at(old, new, &mut path, &mut changes),
        _ => {}
    }
    changes.retain(|c| !is_noise(&c.path));
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

/// The changes from `old` to `new` when `new` is `old` with only the value
/// at `field` (object keys) written (a binding's `spec.nodeName`, a
/// Scale's `spec.replicas`): what [`diff`] gives, without comparing the
/// rest node by node (a Pod's whole spec and status, ≈ 70,000
/// instructions per binding). `None` when a step above the field is not an
/// object in both: compare them whole.
pub(crate) fn diff_of_field(old: &Value, new: &Value, field: &[&str]) -> Option<Vec<Change>> {
    let (last, parents) = field.split_last()?;
    let (mut a, mut b) = (old, new);
    let mut path = String::new();
    for key in parents {
        a = a.get(key).filter(|v| v.is_object())?;
        b = b.get(key).filter(|v| v.is_object())?;
        push_field(&mut path, key);
    }
    if !old.is_object() || !new.is_object() {
        return None;
    }
    push_field(&mut path, last);
    let mut changes = Vec::new();
    match (a.get(last), b.get(last)) {
        (Some(av), Some(bv)) if !same(av, bv) => diff_at(av, bv, &mut path, &mut changes),
        (None, Some(bv)) => leaves_as(bv, &mut path, false, &mut changes),
        (Some(av), None) => leaves_as(av, &mut path, true, &mut changes),
        _ => {}
    }
    changes.retain(|c| !is_noise(&c.path));
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Some(changes)
}

fn leaves_as(v: &Value, path: &mut String, removed: bool, out: &mut Vec<Change>) {
    walk(v, path, &mut |p, leaf| {
        let text = Some(json_text(leaf));
        out.push(Change {
            path: p.into(),
            old: if removed { text.clone() } else { None },
            new: if removed { None } else { text },
        });
    });
}

/// The changes between two non-empty objects, fields `known_same` names
/// left out (see [`diff_unless`]).
fn diff_fields(
    a: &crate::json::Object,
    b: &crate::json::Object,
    known_same: &impl Fn(&str) -> bool,
    path: &mut String,
    out: &mut Vec<Change>,
) {
    // Two versions of an object mostly list the same keys in the
    // same order: those are paired walking both; the keys after the
    // first that differs are looked up (unique keys: none of them is
    // among the paired).
    let mut paired = 0;
    for ((k, av), (k2, bv)) in a.iter().zip(b.iter()) {
        if k != k2 {
            break;
        }
        paired += 1;
        if !known_same(k) && !same(av, bv) {
            let len = path.len();
            push_field(path, k);
            diff_at(av, bv, path, out);
            path.truncate(len);
        }
    }
    for (k, av) in a.iter().skip(paired) {
        let bv = b.get(&k);
        if bv.is_some_and(|bv| known_same(k) || same(av, bv)) {
            continue;
        }
        let len = path.len();
        push_field(path, k);
        match bv {
            Some(bv) => diff_at(av, bv, path, out),
            None => leaves_as(av, path, true, out),
        }
        path.truncate(len);
    }
    for (k, bv) in b.iter().skip(paired) {
        if !a.contains_key(&k) {
            let len = path.len();
            push_field(path, k);
            leaves_as(bv, path, false, out);
            path.truncate(len);
        }
    }
}

/// The changes from `old` to `new`, which differ. Children are compared
/// before their paths are written and walked: each equal subtree is compared
/// once and costs no path (a write changes few of an object's fields).
fn diff_at(old: &Value, new: &Value, path: &mut String, out: &mut Vec<Change>) {
    match (old.as_ref(), new.as_ref()) {
        (ValueRef::Object(a), ValueRef::Object(b)) if !a.is_empty() && !b.is_empty() => {
            diff_fields(a, b, &|_| false, path, out);
        }
        (ValueRef::Array(a), ValueRef::Array(b)) if !a.is_empty() && !b.is_empty() => {
            let ka = list_item_key(a);
            let kb = list_item_key(b);
            match (ka, kb) {
                (Some(k), Some(k2)) if k == k2 => {
                    let old_items: std::collections::HashMap<String, &Value> =
                        a.iter().map(|i| (item_label(i, k), i)).collect();
                    let mut seen = std::collections::HashSet::new();
                    for bi in b.iter() {
                        let label = item_label(bi, k);
                        let ai = old_items.get(&label).copied();
                        if !ai.is_some_and(|ai| same(ai, bi)) {
                            let len = path.len();
                            let _ = write!(path, "[{label}]");
                            match ai {
                                Some(ai) => diff_at(ai, bi, path, out),
                                None => leaves_as(bi, path, false, out),
                            }
                            path.truncate(len);
                        }
                        seen.insert(label);
                    }
                    for ai in a.iter() {
                        let label = item_label(ai, k);
                        if !seen.contains(&label) {
                            let len = path.len();
                            let _ = write!(path, "[{label}]");
                            leaves_as(ai, path, true, out);
                            path.truncate(len);
                        }
                    }
                }
                (None, None) => {
                    for i in 0..a.len().max(b.len()) {
                        if let (Some(x), Some(y)) = (a.get(i), b.get(i))
                            && same(x, y)
                        {
                            continue;
                        }
                        let len = path.len();
                        let _ = write!(path, "[{i}]");
                        match (a.get(i), b.get(i)) {
                            (Some(x), Some(y)) => diff_at(x, y, path, out),
                            (Some(x), None) => leaves_as(x, path, true, out),
                            (None, Some(y)) => leaves_as(y, path, false, out),
                            (None, None) => {}
                        }
                        path.truncate(len);
                    }
                }
                // The list changed how its items are identified: show it whole.
                _ => {
                    leaves_as(old, path, true, out);
                    leaves_as(new, path, false, out);
                }
            }
        }
        _ if is_leaf(old) && is_leaf(new) => out.push(Change {
            path: path.as_str().into(),
            old: Some(json_text(old)),
            new: Some(json_text(new)),
        }),
        _ => {
            let (a, b) = (old, new);
            // An empty container that fills up (or empties) is just the adds (removes).
            let same_kind = a.is_object() == b.is_object() && a.is_array() == b.is_array();
            if !(same_kind && is_leaf(a)) {
                leaves_as(a, path, true, out);
            }
            if !(same_kind && is_leaf(b)) {
                leaves_as(b, path, false, out);
            }
        }
    }
}

/// A leaf as JSON text, written straight into a buffer (`to_string` goes
/// through a `fmt::Formatter`, several times the cost for short values).
fn json_text(v: &Value) -> Arc<str> {
    match v.as_ref() {
        // Most leaves: a string JSON writes as it is.
        ValueRef::String(s) if crate::json::needs_no_escape(s) => {
            let mut text = String::with_capacity(s.len() + 2);
            text.push('"');
            text.push_str(s);
            text.push('"');
            text.into()
        }
        _ => crate::json::to_text(v).into(),
    }
}

/// Scalars and empty containers: what `walk_leaves` reports as leaves.
fn is_leaf(v: &Value) -> bool {
    match v.as_ref() {
        ValueRef::Object(m) => m.is_empty(),
        ValueRef::Array(a) => a.is_empty(),
        _ => true,
    }
}

/// Parses an object as [`strip_noise`] leaves it. The audit decode has cut
/// `metadata.managedFields` already (`flow::object_json`): only text
/// from elsewhere pays for removing them.
#[cfg(feature = "test-support")]
pub fn parse_object(json: &str) -> sonic_rs::Result<Value> {
    let mut v = crate::json::parse(json)?;
    strip_noise(&mut v);
    Ok(v)
}

/// Removes fields that are never shown: `metadata.managedFields`. Looks
/// first: a mutable lookup makes the objects on its way owned maps.
pub(crate) fn strip_noise(v: &mut Value) {
    if crate::json::pointer(v, "/metadata/managedFields").is_none() {
        return;
    }
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove(&"managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::json;

    #[test]
    fn parse_object_drops_managed_fields_like_strip_noise() {
        let mut had_managed_fields = 0;
        for line in std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        {
            // serde_json as the reference: the same object, its
            // managedFields removed.
            let mut ev: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(obj) = ev.get_mut("responseObject") else {
                continue;
            };
            let text = obj.to_string();
            if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                had_managed_fields += usize::from(meta.remove("managedFields").is_some());
            }
            let parsed = parse_object(&text).unwrap();
            let parsed: serde_json::Value =
                serde_json::from_str(&crate::json::to_text(&parsed)).unwrap();
            assert_eq!(&parsed, obj);
        }
        assert!(had_managed_fields > 100, "{had_managed_fields}");
        assert!(parse_object("null").unwrap().is_null());
        assert_eq!(
            parse_object(r#"{"metadata": null, "a": 1}"#).unwrap(),
            json!({"metadata": null, "a": 1})
        );
        assert!(parse_object("{").is_err());
    }

    #[test]
    fn named_lists_match_by_name_not_index() {
        let old = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
        let new = json!({"spec": {"containers": [
            {"name": "z", "image": "z:1"}, {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]}});
        let changes = diff(&old, &new);
        let paths: Vec<_> = changes.iter().map(|c| (&*c.path, c.op())).collect();
        assert_eq!(
            paths,
            vec![
                ("spec.containers[b].image", "replace"),
                ("spec.containers[z].image", "add"),
                ("spec.containers[z].name", "add"),
            ]
        );
        assert_eq!(changes[0].old.as_deref(), Some("\"b:1\""));
        assert_eq!(changes[0].new.as_deref(), Some("\"b:2\""));
    }

    #[test]
    fn unkeyed_lists_fall_back_to_index_and_keys_are_quoted() {
        let v =
            json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}, "args": ["-v", "-q"]});
        let added: Vec<String> = diff(&json!({}), &v)
            .into_iter()
            .map(|c| c.path.to_string())
            .collect();
        assert_eq!(
            added,
            vec![
                "args[0]",
                "args[1]",
                "metadata.labels[\"app.kubernetes.io/name\"]"
            ]
        );
    }

    #[test]
    fn noise_is_not_a_change() {
        let old =
            json!({"metadata": {"resourceVersion": "1", "managedFields": [{"manager": "a"}]}});
        let new =
            json!({"metadata": {"resourceVersion": "2", "managedFields": [{"manager": "b"}]}});
        assert!(diff(&old, &new).is_empty());
    }
}
