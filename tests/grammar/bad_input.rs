//! Lines and files that are not what they should be are named by what
//! they are.

use super::*;

#[test]
fn a_line_that_is_no_audit_event_is_named_by_what_it_is_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let lines = common::audit_lines("deployment");
    // An Event as `kubectl get events -o json` lists it, with the list's
    // kind and apiVersion on the item, as one Event per line would be.
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture_path("deployment", "events.json")).unwrap(),
    )
    .unwrap();
    let mut event = events["items"][0].clone();
    event["kind"] = "Event".into();
    event["apiVersion"] = "v1".into();
    let mut text = format!("{}\n", lines[0]);
    for bad in [
        "[1,2,3]".to_string(),
        "42".to_string(),
        "\"audit\"".to_string(),
        "null".to_string(),
        "{\"a\":1}".to_string(),
        event.to_string(),
        "{\"truncated\": ".to_string(),
    ] {
        text.push_str(&bad);
        text.push('\n');
    }
    for l in &lines[1..] {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&log, text).unwrap();
    let at = |n: usize| format!("{}:{n}: ", log.display());
    let expected = [
        (
            2,
            "expected a JSON object, an audit event (kind \"Event\", apiVersion audit.k8s.io/v1); found an array",
        ),
        (3, "found a number"),
        (4, "found a string"),
        (5, "found null"),
        (
            6,
            "a JSON object without kind and apiVersion where an audit event",
        ),
        (
            7,
            "a Kubernetes Event (kind \"Event\", apiVersion v1) where an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) was expected; Events go in `kascade explain --events`",
        ),
        (8, "not valid JSON"),
    ];
    let log = log.display().to_string();
    let out_file = dir.path().join("spans.jsonl");
    let output = format!("otlp-json={}", out_file.display());
    for args in [
        vec!["trace", &log, "--object", "deploy/hello", "-n", "default"],
        vec!["analyze", &log],
        vec!["replay", &log, "--output", &output],
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The good lines around them are read.
        assert!(out.status.success(), "{args:?}: {stderr}");
        for (line, what) in expected {
            let said = stderr
                .lines()
                .find(|l| l.contains(&at(line)))
                .unwrap_or_else(|| panic!("{args:?}: line {line} not named: {stderr}"));
            assert!(said.contains(what), "{args:?}: {said}");
        }
    }
}

#[test]
fn an_audit_log_given_as_events_is_named_as_one() {
    let log = fixture("deployment");
    let e = error_of(&["explain", &log, "--events", &log]);
    assert!(
        e.contains(&format!(
            "{log}:1: an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) where a Kubernetes Event"
        )),
        "{e}"
    );
    assert!(e.contains("audit logs go in FILES, not --events"), "{e}");
}

#[test]
fn an_events_file_with_items_that_are_no_event_is_read_around_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = fixture("rollout-stuck");
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture_path("rollout-stuck", "events.json")).unwrap(),
    )
    .unwrap();
    // One Event per line (`kubectl get events -o json | jq -c '.items[]'`),
    // with an audit event and an array among them.
    let items: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| serde_json::to_string(item).unwrap())
        .collect();
    let audit = common::audit_lines("rollout-stuck")[0].clone();
    let mut text = format!("{}\n{audit}\n[1,2,3]\nnot json\n", items[0]);
    for item in &items[1..] {
        text += &format!("{item}\n");
    }
    let mixed = dir.path().join("events.jsonl");
    std::fs::write(&mixed, text).unwrap();
    let mixed = mixed.display().to_string();

    let out = run(&["explain", &log, "--events", &mixed]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for (line, what) in [
        (
            2,
            "an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) where a Kubernetes Event",
        ),
        (3, "an array where a Kubernetes Event"),
        (4, "not an Event list or JSON line"),
    ] {
        let said = stderr
            .lines()
            .find(|l| l.starts_with(&format!("{mixed}:{line}: ")))
            .unwrap_or_else(|| panic!("line {line} not named: {stderr}"));
        assert!(said.contains(what) && said.ends_with("(skipped)"), "{said}");
    }
    // Every Event read: the findings are those of the whole list.
    let findings = |stdout: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(stdout)
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARN") || l.starts_with("NOTE"))
            .map(str::to_string)
            .collect()
    };
    let whole = run(&[
        "explain",
        &log,
        "--events",
        &common::fixture_path("rollout-stuck", "events.json")
            .display()
            .to_string(),
    ]);
    assert!(!findings(&whole.stdout).is_empty());
    assert_eq!(findings(&out.stdout), findings(&whole.stdout));
}
