//! Unit tests of `redact`.

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
        crate::flow::fixture_objects(&["config", "deployment", "statefulset"])
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
    let mut texts: Vec<String> = crate::flow::fixture_objects(&[
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
