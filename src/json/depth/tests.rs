//! Unit tests of `depth`.

use super::*;

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The deepest level of `text` as serde_json counts it, for valid JSON
/// within its own bound.
fn reference_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(items) => 1 + items.iter().map(reference_depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(reference_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn the_depth_is_serde_jsons_on_captured_objects() {
    let log = include_str!("../../../e2e/fixtures/statefulset/audit.log");
    let mut deepest = 0;
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let depth = reference_depth(&v);
        deepest = deepest.max(depth);
        assert!(!exceeds(line.as_bytes(), depth), "{line}");
        assert!(exceeds(line.as_bytes(), depth - 1), "{line}");
        assert!(matches!(cap(line, depth, 0).text, Cow::Borrowed(_)));
    }
    assert!(deepest > 5, "{deepest}");
}

#[test]
fn brackets_in_strings_and_escapes_do_not_count() {
    let text = r#"{"a": "]]]]\"[[[[", "b": ["\\", {"c": "}}}"}]}"#;
    assert!(!exceeds(text.as_bytes(), 3));
    assert!(exceeds(text.as_bytes(), 2));
    // A string's closing brackets cannot hide a deeper level.
    let hiding = r#"[["]]]]]]]", [["x"]]]]"#;
    assert!(exceeds(hiding.as_bytes(), 3));
}

#[test]
fn every_container_too_deep_becomes_a_marker_and_the_rest_stays() {
    let text = format!(
        r#"{{"keep": [1, 2], "deep": {}, "also": {}, "tail": "t"}}"#,
        nested(20),
        nested(3)
    );
    let capped = cap(&text, 2, 0);
    assert_eq!(capped.markers, 2);
    let v: serde_json::Value = serde_json::from_str(&capped.text).unwrap();
    assert_eq!(v["keep"], serde_json::json!([1, 2]));
    assert_eq!(v["tail"], "t");
    assert_eq!(
        v["deep"],
        serde_json::json!(["<nested deeper than 2 levels: 38 bytes>"])
    );
    assert_eq!(
        v["also"],
        serde_json::json!(["<nested deeper than 2 levels: 4 bytes>"])
    );
    assert_eq!(markers_in(&capped.text), 2);
    assert!(!exceeds(capped.text.as_bytes(), 2));
    // Bounded below a level: the marker names the values' own bound.
    assert_eq!(
        cap(r#"{"o": [[[1]]]}"#, 2, 1).text,
        r#"{"o": [["<nested deeper than 2 levels: 3 bytes>"]]}"#
    );
}

#[test]
fn a_huge_depth_is_capped_in_one_pass_without_recursion() {
    let text = format!(r#"{{"x": {}}}"#, nested(1_000_000));
    let capped = cap(&text, MAX_OBJECT_DEPTH, 0);
    assert_eq!(capped.markers, 1);
    let v: sonic_rs::Value = sonic_rs::from_str(&capped.text).unwrap();
    // Level 65 is the 64th bracket: 1,000,000 - 63 pairs are cut.
    assert!(crate::json::to_text(&v).contains("levels: 1999874 bytes"));
}

/// A xorshift generator: the same cases on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Valid JSON nesting up to `depth`, its strings full of what the scan
/// must not count: brackets, escaped quotes, backslash runs.
fn random_json(rng: &mut Rng, depth: usize, out: &mut String) {
    let pad = |rng: &mut Rng, out: &mut String| {
        for _ in 0..rng.below(3) {
            out.push(' ');
        }
    };
    match (depth, rng.below(5)) {
        (0, _) | (_, 0) => {
            out.push('"');
            for _ in 0..rng.below(24) {
                let pieces = ["a", "[", "]", "{", "}", "\\\"", "\\\\", "\\n", ":", ","];
                out.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
            }
            out.push('"');
        }
        (_, 1) => out.push_str(["1", "true", "null", "-2.5e3"][rng.below(4) as usize]),
        (_, 2 | 3) => {
            out.push('[');
            for k in 0..rng.below(4) {
                if k > 0 {
                    out.push(',');
                }
                pad(rng, out);
                random_json(rng, depth - 1, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for k in 0..rng.below(4) {
                if k > 0 {
                    out.push(',');
                }
                random_json(rng, 0, out);
                out.push(':');
                pad(rng, out);
                random_json(rng, depth - 1, out);
            }
            out.push('}');
        }
    }
}

#[test]
fn the_wide_scan_finds_what_the_byte_scan_finds() {
    let mut texts: Vec<String> = include_str!("../../../e2e/fixtures/statefulset/audit.log")
        .lines()
        .map(str::to_string)
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let mut text = String::new();
        let depth = rng.below(30) as usize;
        random_json(&mut rng, depth, &mut text);
        texts.push(text);
    }
    // Malformed text, backslashes outside strings too, reads alike in both.
    for _ in 0..3000 {
        let text: String = (0..rng.below(80))
            .map(|_| ["[", "]", "{", "}", "\"", "a", " ", "\\"][rng.below(8) as usize])
            .collect();
        texts.push(text);
    }
    for text in &texts {
        // Every alignment against the 16-byte blocks.
        for shift in [0, 1, 7, 15, 33, 63] {
            let shifted = format!("{}{text}", " ".repeat(shift));
            let bytes = shifted.as_bytes();
            for limit in [0, 1, 2, 3, 5, 8, 13, 21, 40] {
                assert_eq!(
                    first_too_deep(bytes, 0, 0, limit),
                    first_too_deep_bytewise(bytes, 0, 0, limit),
                    "{shifted:?} at {limit}"
                );
            }
        }
    }
}

/// Found by the fuzz target `depth`: a backslash outside a string was
/// read as escaping the next bracket by the bytes after the last block
/// but not by the blocks, so what `cap` left (longer than a block)
/// still nested too deep; a marker after a backslash had its quote
/// escaped.
#[test]
fn backslashes_outside_strings_read_alike_in_every_scan() {
    for text in [
        "[\t\\[[]\t+[[\\]",
        "[\\[[[\\]]]]",
        "[\\\"[[[\"]]]",
        "{\\{\\{\\{}}}",
    ] {
        for limit in [1, 2, 3] {
            let capped = cap(text, limit, 0);
            assert!(
                !exceeds(capped.text.as_bytes(), limit),
                "{text:?} at {limit}"
            );
            // Past a block, as the marker makes the capped text.
            let long = format!("{text}{}", " ".repeat(70));
            assert!(
                !exceeds(cap(&long, limit, 0).text.as_bytes(), limit),
                "{long:?} at {limit}"
            );
            for shift in [0, 1, 63] {
                let shifted = format!("{}{text}", " ".repeat(shift));
                let bytes = shifted.as_bytes();
                assert_eq!(
                    first_too_deep(bytes, 0, 0, limit),
                    first_too_deep_bytewise(bytes, 0, 0, limit),
                    "{shifted:?} at {limit}"
                );
            }
        }
    }
}

#[test]
fn malformed_text_is_scanned_as_far_as_it_goes() {
    for text in ["[[[[", "]]]][[[[", "[\"unterminated", "{\"a\\", "[[\"\\"] {
        let capped = cap(text, 2, 0);
        assert!(!exceeds(capped.text.as_bytes(), 2), "{text}");
    }
    assert_eq!(
        cap("[[[[", 2, 0).text,
        "[[\"<nested deeper than 2 levels: 2 bytes>\""
    );
}
