//! The object model of processing, lookups in it, and what JSON escapes.
//!
//! Objects are [`sonic_rs::Value`]s: one parse makes one arena for the whole
//! object (a `serde_json::Value` is a `String` and a map node per key), which
//! was most of the collector's CPU (docs/benchmarks.md). A node is made an
//! owned, key-sorted map (`sort_keys`) only when mutated through it, so the
//! hot path reads, and mutates only what it must (`get_mut` on an object
//! converts it: look first, immutably).
//!
//! The pointers here walk the segments as they are, without unescaping
//! (`~0`/`~1`): the paths kascade looks up have none.

pub(crate) mod depth;

pub use sonic_rs::JsonValueTrait;
pub use sonic_rs::Value;
pub(crate) use sonic_rs::{JsonContainerTrait, JsonValueMutTrait, Object, ValueRef};

/// The value at a JSON pointer whose segments need no unescaping (no `~`):
/// object fields, and list indices. In either object model ([`Tree`]).
///
/// `/metadata/labels/app` of `{"metadata": {"labels": {"app": "web"}}}` is
/// `"web"`, `/items/1` of `{"items": [1, 2]}` is `2` (the unit tests say so).
pub(crate) fn pointer<'a, T: Tree>(v: &'a T, path: &str) -> Option<&'a T> {
    segments(path)?.try_fold(v, |cur, key| cur.child(key))
}

/// A JSON tree [`pointer`] walks: processing's [`Value`], and
/// `serde_json::Value`, which the analysis of audit logs reads.
pub(crate) trait Tree {
    /// The field `key` of an object, or the item at index `key` of a list.
    fn child(&self, key: &str) -> Option<&Self>;
}

impl Tree for Value {
    fn child(&self, key: &str) -> Option<&Self> {
        match self.as_ref() {
            ValueRef::Object(map) => map.get(&key),
            ValueRef::Array(items) => items.get(key.parse::<usize>().ok()?),
            _ => None,
        }
    }
}

impl Tree for serde_json::Value {
    fn child(&self, key: &str) -> Option<&Self> {
        match self {
            serde_json::Value::Object(map) => map.get(key),
            serde_json::Value::Array(items) => items.get(key.parse::<usize>().ok()?),
            _ => None,
        }
    }
}

/// [`pointer`], mutably. Every object on the way becomes an owned map
/// (see the module's note): only for a value that is there to change.
pub(crate) fn pointer_mut<'a>(v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    pointer(v, path)?;
    segments(path)?.try_fold(v, |cur, key| {
        if cur.is_object() {
            cur.as_object_mut()?.get_mut(&key)
        } else {
            cur.as_array_mut()?.get_mut(key.parse::<usize>().ok()?)
        }
    })
}

/// Whether `a` and `b` are the same JSON. `==` on objects looks every key
/// of one up in the other (a linear search each: parsed objects are lists
/// of pairs); two versions of an object list their keys in the same order,
/// so the keys are walked side by side, and looked up only after they
/// part.
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a.as_ref(), b.as_ref()) {
        (ValueRef::Object(x), ValueRef::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let mut ys = y.iter();
            for (k, v) in x.iter() {
                match ys.next() {
                    Some((k2, w)) if k == k2 => {
                        if !same(v, w) {
                            return false;
                        }
                    }
                    // Keys are unique: the rest of `x` is looked up in `y`.
                    _ => {
                        return x.iter().all(|(k, v)| y.get(&k).is_some_and(|w| same(v, w)));
                    }
                }
            }
            true
        }
        (ValueRef::Array(x), ValueRef::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(v, w)| same(v, w))
        }
        (ValueRef::String(x), ValueRef::String(y)) => x == y,
        (ValueRef::Number(x), ValueRef::Number(y)) => x == y,
        (ValueRef::Bool(x), ValueRef::Bool(y)) => x == y,
        (ValueRef::Null, ValueRef::Null) => true,
        _ => false,
    }
}

/// `bytes` as text when they are UTF-8: checked with SIMD (simdutf8 picks
/// AVX2 or SSE4.2 at run time), where std's check of every webhook body and
/// log line was 1 % of the collector's instructions. Input that is not
/// UTF-8 is checked again by std, whose error says where.
///
/// ```
/// assert_eq!(kascade::test_support::json::utf8(b"{}"), Ok("{}"));
/// assert_eq!(kascade::test_support::json::utf8(b"a\xffb").unwrap_err().valid_up_to(), 1);
/// ```
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(_) => std::str::from_utf8(bytes),
    }
}

/// Parses JSON text into the object model; text nested deeper than
/// [`depth::MAX_OBJECT_DEPTH`] is refused (sonic-rs parses by recursion).
///
/// ```
/// let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
/// assert!(kascade::test_support::json::parse(&deep).unwrap_err().to_string().contains("nested deeper"));
/// ```
pub fn parse(text: &str) -> sonic_rs::Result<Value> {
    if depth::exceeds(text.as_bytes(), depth::MAX_OBJECT_DEPTH) {
        return Err(<sonic_rs::Error as serde::de::Error>::custom(format_args!(
            "JSON nested deeper than {} levels",
            depth::MAX_OBJECT_DEPTH
        )));
    }
    sonic_rs::from_str(text)
}

/// [`parse`] for text already bounded by [`depth::cap`] (an object cut from
/// an audit event as it was decoded), which is not scanned again.
pub(crate) fn parse_capped(text: &str) -> sonic_rs::Result<Value> {
    sonic_rs::from_str(text)
}

/// A value as compact JSON text.
pub(crate) fn to_text(v: &Value) -> String {
    sonic_rs::to_string(v).unwrap_or_default()
}

/// Whether JSON writes `text` as it is between its quotes (serde_json
/// escapes only quotes, backslashes and control characters).
pub(crate) fn needs_no_escape(text: &str) -> bool {
    !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

fn segments(path: &str) -> Option<Segments<'_>> {
    debug_assert!(!path.contains('~'), "escaped pointer {path:?}");
    match path {
        "" => Some(Segments(None)),
        _ => path.strip_prefix('/').map(|rest| Segments(Some(rest))),
    }
}

/// A pointer's segments, split at each `/` by a byte loop: the paths are a
/// few bytes long, and `str::split`'s searcher cost a third of a lookup
/// (pointers are looked up a dozen times per write).
struct Segments<'a>(Option<&'a str>);

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.0?;
        Some(match rest.bytes().position(|b| b == b'/') {
            Some(at) => {
                self.0 = Some(&rest[at + 1..]);
                &rest[..at]
            }
            None => {
                self.0 = None;
                rest
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_reaches_fields_and_list_items() {
        let v = sonic_rs::json!({"metadata": {"labels": {"app": "web"}}, "items": [1, 2]});
        assert_eq!(pointer(&v, "/metadata/labels/app"), Some(&"web".into()));
        assert_eq!(pointer(&v, "/items/1"), Some(&2.into()));
        assert_eq!(pointer(&v, "/metadata/name"), None);
    }

    #[test]
    fn finds_what_serde_json_finds() {
        let text = r#"{"a": {"b": [1, {"e": 2}], "c": {"d": null}, "": 4}, "x": 1}"#;
        let mut v = parse(text).unwrap();
        let reference: serde_json::Value = serde_json::from_str(text).unwrap();
        for p in [
            "", "/a", "/a/b", "/a/b/1/e", "/a/b/2", "/a/b/x", "/a/c/d", "/a/", "/x/y", "a", "/q",
        ] {
            let found = pointer(&v, p).map(|f| serde_json::from_str(&to_text(f)).unwrap());
            assert_eq!(found.as_ref(), reference.pointer(p), "{p}");
        }
        *pointer_mut(&mut v, "/a/c/d").unwrap() = 3.into();
        assert_eq!(to_text(pointer(&v, "/a/c/d").unwrap()), "3");
        assert!(pointer_mut(&mut v, "/a/b/9").is_none());
    }

    #[test]
    fn segments_are_what_split_finds() {
        for p in [
            "",
            "/",
            "//",
            "/a",
            "/a/",
            "/a/b",
            "/metadata/resourceVersion",
            "/a//b",
            "/é/ü",
        ] {
            let ours: Vec<&str> = segments(p).unwrap().collect();
            let split: Vec<&str> = p.split('/').skip(1).collect();
            assert_eq!(ours, split, "{p:?}");
        }
        assert!(segments("a/b").is_none());
    }

    #[test]
    fn same_is_json_equality_whatever_the_key_order() {
        let cases = [
            (
                r#"{"a": 1, "b": [1, {"c": null}]}"#,
                r#"{"a": 1, "b": [1, {"c": null}]}"#,
                true,
            ),
            (r#"{"a": 1, "b": 2}"#, r#"{"b": 2, "a": 1}"#, true),
            (
                r#"{"a": 1, "b": 2, "c": 3}"#,
                r#"{"a": 1, "c": 3, "b": 2}"#,
                true,
            ),
            (r#"{"a": 1, "b": 2}"#, r#"{"a": 1, "b": 3}"#, false),
            (r#"{"a": 1, "b": 2}"#, r#"{"a": 1, "c": 2}"#, false),
            (r#"{"a": 1}"#, r#"{"a": 1, "b": 2}"#, false),
            (r#"[1, 2]"#, r#"[2, 1]"#, false),
            (r#"{"a": "1"}"#, r#"{"a": 1}"#, false),
            (r#"{"a": 1.5}"#, r#"{"a": 1.5}"#, true),
            (r#"{}"#, r#"[]"#, false),
            (r#"null"#, r#"false"#, false),
        ];
        for (a, b, expected) in cases {
            let (a, b) = (parse(a).unwrap(), parse(b).unwrap());
            assert_eq!(same(&a, &b), expected, "{a} {b}");
            assert_eq!(same(&b, &a), expected, "{b} {a}");
            // What serde_json calls equal.
            let as_serde =
                |v: &Value| serde_json::from_str::<serde_json::Value>(&to_text(v)).unwrap();
            assert_eq!(as_serde(&a) == as_serde(&b), expected, "{a} {b}");
        }
    }

    #[test]
    fn text_needs_no_escape_when_json_writes_it_as_it_is() {
        for text in [
            "",
            "app.kubernetes.io/name",
            "é ~ /",
            "a\"b",
            "a\\b",
            "a\nb",
            "\u{1f}",
        ] {
            let quoted = serde_json::to_string(text).unwrap();
            assert_eq!(
                needs_no_escape(text),
                quoted[1..quoted.len() - 1] == *text,
                "{text:?}"
            );
        }
    }
}
