//! Lookups in parsed objects, and what JSON escapes. `serde_json::Value::pointer` allocates two
//! strings per segment (it unescapes `~0`/`~1`), and ran on every write's
//! state several times (≈ 5 % of the collector's instructions, README,
//! Benchmarks); these walk the segments as they are.

use serde_json::Value;

/// The value at a JSON pointer whose segments need no unescaping (no `~`):
/// object fields, and list indices.
///
/// ```
/// let v = serde_json::json!({"metadata": {"labels": {"app": "web"}}, "items": [1, 2]});
/// assert_eq!(kascade::json::pointer(&v, "/metadata/labels/app"), Some(&"web".into()));
/// assert_eq!(kascade::json::pointer(&v, "/items/1"), Some(&2.into()));
/// assert_eq!(kascade::json::pointer(&v, "/metadata/name"), None);
/// ```
pub fn pointer<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path)?.try_fold(v, |cur, key| match cur {
        Value::Object(map) => map.get(key),
        Value::Array(items) => items.get(key.parse::<usize>().ok()?),
        _ => None,
    })
}

/// [`pointer`], mutably.
pub fn pointer_mut<'a>(v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    segments(path)?.try_fold(v, |cur, key| match cur {
        Value::Object(map) => map.get_mut(key),
        Value::Array(items) => items.get_mut(key.parse::<usize>().ok()?),
        _ => None,
    })
}

/// Whether JSON writes `text` as it is between its quotes (serde_json
/// escapes only quotes, backslashes and control characters).
pub fn needs_no_escape(text: &str) -> bool {
    !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

fn segments(path: &str) -> Option<impl Iterator<Item = &str>> {
    debug_assert!(!path.contains('~'), "escaped pointer {path:?}");
    match path {
        "" => Some("".split('/').skip(1)),
        _ if path.starts_with('/') => Some(path.split('/').skip(1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_serde_json_finds() {
        let mut v = json!({"a": {"b": [1, {"e": 2}], "c": {"d": null}, "": 4}, "x": 1});
        for p in [
            "", "/a", "/a/b", "/a/b/1/e", "/a/b/2", "/a/b/x", "/a/c/d", "/a/", "/x/y", "a", "/q",
        ] {
            assert_eq!(pointer(&v, p), v.pointer(p), "{p}");
        }
        *pointer_mut(&mut v, "/a/c/d").unwrap() = json!(3);
        assert_eq!(v.pointer("/a/c/d"), Some(&json!(3)));
        assert!(pointer_mut(&mut v, "/a/b/9").is_none());
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
