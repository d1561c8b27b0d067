//! Object diffs after redaction, as the processor computes them: two objects
//! (the input split at its first NUL byte) parsed, redacted, diffed.
//! Checks that redaction leaves no value at a redacted path and that a diff
//! is sorted, well-formed and empty between equal objects.
#![no_main]

use std::sync::LazyLock;

use kascade::test_support::aggregate::diff::{diff, is_noise, parse_object, walk_leaves};
use kascade::test_support::aggregate::redact::{DEFAULT_REDACT_PATHS, MARKER_PREFIX, PathPattern, Redactor};
use libfuzzer_sys::fuzz_target;
use regex::Regex;
use kascade::test_support::json::{JsonValueTrait as _, Value};

static PATHS: LazyLock<Regex> = LazyLock::new(|| Regex::new(DEFAULT_REDACT_PATHS).unwrap());
static REDACTOR: LazyLock<Redactor> =
    LazyLock::new(|| Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap())));

fn is_marker(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with(MARKER_PREFIX))
}

/// Nothing readable is left where redaction applies.
fn check_redacted(v: &Value, secret: bool) {
    walk_leaves(v, &mut |path, leaf| {
        let hidden = is_marker(leaf) || leaf.is_null() || leaf.is_object() || leaf.is_array();
        if PATHS.is_match(path) {
            assert!(hidden, "{path} = {leaf}");
        }
        let secret_field = ["data", "stringData"].iter().any(|f| {
            path == *f || path.starts_with(&format!("{f}.")) || path.starts_with(&format!("{f}["))
        });
        if secret && secret_field {
            assert!(hidden, "{path} = {leaf}");
        }
    });
}

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (Ok(a), Ok(b)) = (
        std::str::from_utf8(&data[..split]),
        std::str::from_utf8(&data[split + 1..]),
    ) else {
        return;
    };
    let (Ok(mut old), Ok(mut new)) = (parse_object(a), parse_object(b)) else {
        return;
    };
    // Both the Secret rules and the path rules, depending on the input.
    let resource = if data.len() % 2 == 0 {
        "secrets"
    } else {
        "pods"
    };
    REDACTOR.redact("", resource, &mut old);
    REDACTOR.redact("", resource, &mut new);
    check_redacted(&old, resource == "secrets");
    check_redacted(&new, resource == "secrets");

    let changes = diff(&old, &new);
    assert!(diff(&old, &old).is_empty());
    assert!(changes.windows(2).all(|w| w[0].path <= w[1].path));
    for c in &changes {
        assert!(c.old.is_some() || c.new.is_some(), "{c:?}");
        assert!(!is_noise(&c.path), "{c:?}");
    }
});
