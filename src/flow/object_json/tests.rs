//! Unit tests of `object_json`.

use super::*;

fn cut_text(object: &str) -> Option<ObjectText> {
    let mut de = sonic_rs::Deserializer::from_str(object);
    let out = without_managed_fields(&mut de).unwrap();
    de.end().unwrap();
    out
}

fn trimmed(object: &str) -> Option<String> {
    cut_text(object).map(|t| t.get().to_string())
}

/// Hashes vouch for a top-level field exactly when two versions write it
/// alike: each pair of objects the fixtures captured, against serde_json
/// comparing the fields; a key given twice vouches for nothing.
#[test]
fn field_hashes_vouch_for_fields_written_alike() {
    let objects: Vec<Value> = fixture_objects(&["deployment", "statefulset"])
        .into_iter()
        .filter(|o| o.get("spec").is_some())
        .collect();
    let (mut alike, mut differ) = (0, 0);
    for pair in objects.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (ha, hb) = (
            cut_text(&a.to_string()).unwrap(),
            cut_text(&b.to_string()).unwrap(),
        );
        let (ha, hb) = (ha.field_hashes().unwrap(), hb.field_hashes().unwrap());
        for key in ["kind", "spec", "status"] {
            let equal = a.get(key).is_some() && a.get(key) == b.get(key);
            assert_eq!(ha.same_field(hb, key), equal, "{key}: {a} {b}");
            alike += usize::from(equal);
            differ += usize::from(!equal);
        }
        assert!(
            !ha.same_field(hb, "metadata"),
            "metadata is rewritten: no hash"
        );
    }
    assert!(alike > 100 && differ > 50, "{alike} alike, {differ} differ");
    let twice = cut_text(r#"{"spec":{"a":1},"spec":{"a":2},"kind":"Pod"}"#).unwrap();
    let once = cut_text(r#"{"spec":{"a":1},"kind":"Pod"}"#).unwrap();
    let (twice, once) = (twice.field_hashes().unwrap(), once.field_hashes().unwrap());
    assert!(!twice.same_field(once, "spec") && !twice.same_field(once, "kind"));
    assert!(once.same_field(once, "spec"));
}

#[test]
fn objects_are_kept_whole_but_for_their_managed_fields() {
    let (mut cut, mut kept) = (0, 0);
    for obj in fixture_objects(&["deployment", "statefulset", "bigobject", "service"]) {
        let mut expected = obj.clone();
        let had = expected
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .is_some_and(|meta| meta.remove("managedFields").is_some());
        cut += usize::from(had);
        kept += usize::from(!had);
        let text = cut_text(&obj.to_string()).unwrap();
        assert_eq!(text.had_managed_fields(), had, "{obj}");
        assert_eq!(serde_json::from_str::<Value>(text.get()).unwrap(), expected);
        assert!(!text.get().contains("\"managedFields\""), "{}", text.get());
    }
    assert!(cut > 100 && kept > 10, "{cut} cut, {kept} without");
    // Kept as written: field order, numbers, escapes inside values.
    let text = r#"{"z":1.50,"metadata":{"b":"\u00e9","managedFields":[{"a":{}}],"a":[]},"a":null}"#;
    assert_eq!(
        trimmed(text).unwrap(),
        r#"{"z":1.50,"metadata":{"b":"\u00e9","a":[]},"a":null}"#
    );
    // A key that needs escaping, written back escaped.
    assert_eq!(trimmed(r#"{"a\"b":1}"#).unwrap(), r#"{"a\"b":1}"#);
    // Only metadata's managedFields go.
    assert_eq!(
        trimmed(r#"{"managedFields":1,"spec":{"managedFields":2}}"#).unwrap(),
        r#"{"managedFields":1,"spec":{"managedFields":2}}"#
    );
    // What is not an object is kept whole; null is no object.
    assert_eq!(trimmed("null"), None);
    assert_eq!(
        trimmed(r#"{"metadata":null}"#).unwrap(),
        r#"{"metadata":null}"#
    );
    assert_eq!(
        trimmed(r#"{"metadata":["x",{"managedFields":1}]}"#).unwrap(),
        r#"{"metadata":["x",{"managedFields":1}]}"#
    );
    assert_eq!(trimmed(r#"[1,"a"]"#).unwrap(), r#"[1,"a"]"#);
    // A metadata that is an array keeps its items as written.
    let long = r#"{"metadata":[1.50,123456789012345678901234567890,"\u00e9"],"kind":"X"}"#;
    assert_eq!(trimmed(long).unwrap(), long);
    assert_eq!(trimmed(r#""text""#).unwrap(), r#""text""#);
    assert_eq!(trimmed("-7").unwrap(), "-7");
}

#[test]
fn the_text_is_sized_as_it_is_written() {
    let sizes = |object: &str| {
        let version = Cell::new(None);
        let uid = Cell::new(None);
        let managed_fields = Cell::new(false);
        let mut de = sonic_rs::Deserializer::from_str(object);
        let seed = PieceVisitor {
            trim: Trim::Top,
            version: &version,
            uid: &uid,
            managed_fields: &managed_fields,
        };
        let Piece::Fields(fields) = seed.deserialize(&mut de).unwrap() else {
            panic!("not an object: {object}");
        };
        let mut out = String::new();
        write_fields(&mut out, &fields);
        (fields_len(&fields), out.len())
    };
    let mut objects: Vec<String> =
        fixture_objects(&["deployment", "statefulset", "bigobject", "service"])
            .iter()
            .map(Value::to_string)
            .collect();
    objects.extend(
        [
            "{}",
            r#"{"a":1}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"managedFields":[]}}"#,
            r#"{"metadata":{"managedFields":[],"name":"x"},"spec":{}}"#,
        ]
        .map(String::from),
    );
    for object in &objects {
        let (estimate, written) = sizes(object);
        assert_eq!(estimate, written, "{object}");
    }
}

#[test]
fn owner_references_are_read_as_a_full_parse_reads_them() {
    let mut with_owners = 0;
    for obj in fixture_objects(&["deployment", "statefulset", "job", "cronjob"]) {
        let full: Vec<OwnerReference> = obj
            .pointer("/metadata/ownerReferences")
            .map(|o| serde_json::from_value(o.clone()).unwrap())
            .unwrap_or_default();
        with_owners += usize::from(!full.is_empty());
        // As the apiserver writes it, and with the keys reordered.
        assert_eq!(owner_references_of(&obj.to_string()), full, "{obj}");
        assert_eq!(
            owner_references_of(&serde_json::to_string_pretty(&obj).unwrap()),
            full
        );
    }
    assert!(with_owners > 20, "{with_owners}");
    let owner = r#"{"apiVersion":"v1","kind":"X","name":"o","uid":"u"}"#;
    let late = format!(r#"{{"metadata":{{"managedFields":[{{}}],"ownerReferences":[{owner}]}}}}"#);
    assert_eq!(owner_references_of(&late)[0].name, "o");
    for none in [
        "null",
        "[]",
        r#"{"metadata":null}"#,
        r#"{"metadata":{}}"#,
        "{",
    ] {
        assert!(owner_references_of(none).is_empty(), "{none}");
    }
    let bad = r#"{"metadata":{"ownerReferences":[{"name":7}]}}"#;
    assert!(owner_references_of(bad).is_empty());
}

#[test]
fn resource_versions_are_read_as_a_full_parse_reads_them() {
    let version = |text: &str| {
        let mut de = sonic_rs::Deserializer::from_str(text);
        without_managed_fields(&mut de)
            .unwrap()
            .and_then(|t| t.resource_version())
    };
    let mut with_version = 0;
    for obj in fixture_objects(&["deployment", "service", "late-response"]) {
        let full = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(|v| v.parse::<u64>().unwrap());
        with_version += usize::from(full.is_some());
        assert_eq!(version(&obj.to_string()), full, "{obj}");
    }
    assert!(with_version > 50, "{with_version}");
    for (text, want) in [
        (
            r#"{"metadata":{"name":"a","resourceVersion":"17"}}"#,
            Some(17),
        ),
        // Another storage's opaque version, or none.
        (r#"{"metadata":{"resourceVersion":"v1-abc"}}"#, None),
        (r#"{"metadata":{"resourceVersion":17}}"#, None),
        (r#"{"metadata":{"resourceVersion":"0"}}"#, None),
        // Not as etcd writes a revision: written out again, it would
        // not be the text logged.
        (r#"{"metadata":{"resourceVersion":"017"}}"#, None),
        (r#"{"metadata":{"resourceVersion":"+17"}}"#, None),
        (r#"{"metadata":{"name":"a"}}"#, None),
        (r#"{"spec":{"resourceVersion":"5"}}"#, None),
        (r#"{"kind":"Status","status":"Success"}"#, None),
        ("null", None),
    ] {
        assert_eq!(version(text), want, "{text}");
    }
}

#[test]
fn uids_are_read_as_a_full_parse_reads_them() {
    let uid = |text: &str| {
        let mut de = sonic_rs::Deserializer::from_str(text);
        without_managed_fields(&mut de)
            .unwrap()
            .and_then(|t| t.uid().map(str::to_string))
    };
    let mut with_uid = 0;
    for obj in fixture_objects(&["deployment", "service", "statefulset"]) {
        let full = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        with_uid += usize::from(full.is_some());
        assert_eq!(uid(&obj.to_string()), full, "{obj}");
    }
    assert!(with_uid > 50, "{with_uid}");
    for (text, want) in [
        (r#"{"metadata":{"name":"a","uid":"u-1"}}"#, Some("u-1")),
        // Escaped: the parse unescapes it, the decode does not try.
        (r#"{"metadata":{"uid":"u\u002d1"}}"#, None),
        (r#"{"metadata":{"uid":7}}"#, None),
        (r#"{"metadata":{"name":"a"}}"#, None),
        (r#"{"spec":{"uid":"u"}}"#, None),
        ("null", None),
    ] {
        assert_eq!(uid(text).as_deref(), want, "{text}");
    }
}
