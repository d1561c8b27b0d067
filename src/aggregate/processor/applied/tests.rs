//! Unit tests of `state`.

use super::super::test_support::{accepted, audit_values, parse};
use super::*;

/// Applies each write of `scenario`'s audit log in order, keeping states
/// the way the processor does; the events as logged, with their outcomes.
fn replay(scenario: &str) -> Vec<(serde_json::Value, AuditEvent, Outcome)> {
    replay_keeping(scenario, true, &Redactor::new(None))
        .into_iter()
        .map(|(raw, ev, outcome, _)| (raw, ev, outcome))
        .collect()
}

/// [`replay`], keeping the states' field hashes or not; with each write,
/// whether its diff was told of a field logged alike.
fn replay_keeping(
    scenario: &str,
    field_hashes: bool,
    redactor: &Redactor,
) -> Vec<(serde_json::Value, AuditEvent, Outcome, bool)> {
    let kinds = KindRegistry::default();
    let mut states: std::collections::HashMap<String, (Arc<Value>, Option<Arc<FieldHashes>>)> =
        Default::default();
    let mut out = Vec::new();
    for raw in audit_values(scenario) {
        let Some(item) = accepted(&raw) else { continue };
        let key = item.object.key();
        let (old, old_fields) = states.get(&key).cloned().unzip();
        let old_fields = old_fields.flatten();
        let outcome = apply(
            &item.event,
            &item.object,
            old.as_ref(),
            old_fields.as_deref(),
            &kinds,
            Some(redactor),
            None,
        );
        let told = match (&old_fields, &outcome.state_fields, &outcome.state) {
            (Some(a), Some(b), Some(state)) if outcome.snapshot.is_none() => state
                .as_object()
                .is_some_and(|o| o.iter().any(|(k, _)| a.same_field(b, k))),
            _ => false,
        };
        if let Some(s) = &outcome.state {
            let fields = outcome.state_fields.clone().filter(|_| field_hashes);
            states.insert(key, (s.clone(), fields));
        }
        out.push((raw, item.event, outcome, told));
    }
    out
}

/// A field two logged versions of an object write alike is not compared,
/// and the changes are those of comparing every field: each write of
/// every captured scenario.
#[test]
fn fields_logged_alike_are_not_compared_and_change_nothing() {
    let fixtures = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures"));
    let (mut writes, mut told) = (0, 0);
    for dir in std::fs::read_dir(fixtures).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.join("audit.log").exists() {
            continue;
        }
        let scenario = dir.file_name().unwrap().to_str().unwrap().to_string();
        // One redactor: its markers are keyed per instance.
        let redactor = Redactor::new(None);
        let hashed = replay_keeping(&scenario, true, &redactor);
        let walked = replay_keeping(&scenario, false, &redactor);
        assert_eq!(hashed.len(), walked.len());
        for ((_, ev, a, was_told), (_, _, b, _)) in hashed.iter().zip(&walked) {
            assert_eq!(a.changes, b.changes, "{scenario}: {}", ev.audit_id);
            writes += 1;
            told += usize::from(*was_told);
        }
    }
    assert!(
        told > 200,
        "{told} of {writes} writes told of fields logged alike"
    );
}

/// A binding's and a Scale's changes, found comparing only the field
/// they write, are those of comparing the whole states: each such write
/// of every captured scenario.
#[test]
fn one_field_written_onto_a_state_diffs_as_the_whole_state() {
    let fixtures = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures"));
    let (mut bindings, mut scales) = (0, 0);
    let redactor = Redactor::new(None);
    let kinds = KindRegistry::default();
    for dir in std::fs::read_dir(fixtures).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.join("audit.log").exists() {
            continue;
        }
        let scenario = dir.file_name().unwrap().to_str().unwrap().to_string();
        let mut states: std::collections::HashMap<String, Arc<Value>> = Default::default();
        for raw in audit_values(&scenario) {
            let Some(item) = accepted(&raw) else { continue };
            let key = item.object.key();
            let old = states.get(&key).cloned();
            let ev = &item.event;
            let outcome = apply(
                ev,
                &item.object,
                old.as_ref(),
                None,
                &kinds,
                Some(&redactor),
                None,
            );
            let one_field = ev.subresource() == "binding" || ev.subresource() == "scale";
            if let (true, Some(o), Some(n)) = (one_field && ev.code() < 300, &old, &outcome.state) {
                assert_eq!(
                    outcome.changes,
                    diff::diff(o, n),
                    "{scenario}: {}",
                    ev.audit_id
                );
                assert!(!outcome.changes.is_empty(), "{scenario}: {}", ev.audit_id);
                bindings += usize::from(ev.subresource() == "binding");
                scales += usize::from(ev.subresource() == "scale");
            }
            if let Some(s) = &outcome.state {
                states.insert(key, s.clone());
            }
        }
    }
    assert!(
        bindings > 20 && scales > 1,
        "{bindings} bindings, {scales} scales"
    );
}

#[test]
fn a_scale_carries_its_replicas_and_version_onto_the_object() {
    let writes = replay("deployment");
    let (raw, _, outcome) = writes
        .iter()
        .find(|(raw, ev, _)| {
            ev.subresource() == "scale"
                && raw["objectRef"]["resource"] == "deployments"
                && ev.code() < 300
        })
        .expect("the deployment scenario scales its Deployment");
    let scale = &raw["responseObject"];
    let state = outcome.state.as_ref().unwrap();
    assert_eq!(state["kind"], "Deployment", "the object, not the Scale");
    assert_eq!(
        state["spec"]["replicas"].as_i64(),
        scale["spec"]["replicas"].as_i64()
    );
    assert!(scale["spec"]["replicas"].is_number());
    assert_eq!(
        resource_version(state),
        scale["metadata"]["resourceVersion"].as_str().unwrap()
    );
    assert!(
        outcome.changes.iter().any(|c| &*c.path == "spec.replicas"),
        "{:?}",
        outcome.changes
    );
}

#[test]
fn a_binding_sets_the_node_its_request_names() {
    let writes = replay("deployment");
    let (raw, _, outcome) = writes
        .iter()
        .find(|(_, ev, _)| ev.subresource() == "binding")
        .expect("the scheduler binds the scenario's pods");
    let state = outcome.state.as_ref().unwrap();
    assert_eq!(
        state["spec"]["nodeName"].as_str(),
        raw["requestObject"]["target"]["name"].as_str()
    );
    assert!(raw["requestObject"]["target"]["name"].is_string());
    assert_eq!(state["kind"], "Pod", "the pod created before it");
    let change = outcome
        .changes
        .iter()
        .find(|c| &*c.path == "spec.nodeName")
        .expect("the node is a change");
    assert!(change.old.is_none());
}

#[test]
fn creates_and_deletes_are_snapshots_updates_are_diffs_failures_nothing() {
    let writes = replay("deployment");
    let mut seen = (false, false, false, false);
    for (_, ev, outcome) in &writes {
        if ev.code() >= 400 {
            assert!(outcome.state.is_none() && outcome.snapshot.is_none());
            assert!(outcome.changes.is_empty());
            seen.3 = true;
        } else if ev.verb == "create" && ev.subresource().is_empty() {
            assert!(outcome.snapshot.is_some() && outcome.changes.is_empty());
            assert_eq!(outcome.snapshot, outcome.state);
            seen.0 = true;
        } else if ev.verb == "delete" {
            assert!(outcome.snapshot.is_some(), "{}", ev.audit_id);
            seen.1 = true;
        } else if ev.verb == "update" && ev.subresource() == "status" {
            assert!(outcome.snapshot.is_none());
            seen.2 |= !outcome.changes.is_empty();
        }
    }
    assert_eq!(
        seen,
        (true, true, true, true),
        "creates, deletes, status updates, failures"
    );
    // managedFields are noise, never state nor change.
    for (_, _, outcome) in &writes {
        if let Some(s) = &outcome.state {
            assert!(crate::json::pointer(&**s, "/metadata/managedFields").is_none());
        }
        assert!(
            outcome
                .changes
                .iter()
                .all(|c| !c.path.contains("managedFields"))
        );
    }
}

#[test]
fn a_response_of_another_kind_to_a_subresource_is_not_the_object() {
    // A Pod's create answered, as if by a subresource, with another kind
    // (what serviceaccounts/token does): never taken as the object's state.
    let writes = replay("deployment");
    let (raw, _, outcome) = writes
        .iter()
        .find(|(_, ev, out)| {
            ev.verb == "create"
                && ev.subresource().is_empty()
                && out.state.as_ref().is_some_and(|s| s["kind"] == "Pod")
        })
        .unwrap();
    let mut forged = raw.clone();
    forged["objectRef"]["subresource"] = "token".into();
    forged["responseObject"]["kind"] = "TokenRequest".into();
    let ev = parse(&forged);
    let (obj, _) = ev.object("c").unwrap().unwrap();
    let out = apply(
        &ev,
        &obj,
        outcome.state.as_ref(),
        outcome.state_fields.as_deref(),
        &KindRegistry::default(),
        Some(&Redactor::new(None)),
        None,
    );
    assert!(out.state.is_none() && out.changes.is_empty() && out.snapshot.is_none());
}

#[test]
fn only_integer_versions_are_ordered() {
    assert!(is_older("9", "10"));
    assert!(!is_older("10", "9"));
    assert!(!is_older("10", "10"));
    assert!(!is_older("", "10"));
    assert!(!is_older("a", "b"));
}

#[test]
fn the_old_version_is_one_known_to_precede_the_new_one() {
    let writes = replay("deployment");
    let (raw, ev, _) = writes
        .iter()
        .find(|(raw, ev, _)| {
            ev.verb == "update"
                && raw["objectRef"]["resourceVersion"]
                    .as_str()
                    .is_some_and(|v| !v.is_empty())
        })
        .expect("an update with a precondition");
    let requested = raw["objectRef"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let next = (requested.parse::<u64>().unwrap() + 5).to_string();
    // The request's own precondition comes first.
    assert_eq!(old_resource_version(ev, "1", "", &next), requested);
    // Without a new version only the request's is reported.
    assert_eq!(old_resource_version(ev, "1", "", ""), requested);
    // Without one, the version the watch saw before; a last state at or
    // after the new version is not reported.
    let later = sonic_rs::json!({"metadata": {"resourceVersion": next.as_str()}});
    let mut unconditional = raw.clone();
    unconditional["objectRef"]["resourceVersion"] = "".into();
    let ev = parse(&unconditional);
    assert_eq!(
        old_resource_version(&ev, "", resource_version(&later), &next),
        ""
    );
    assert_eq!(
        old_resource_version(&ev, &requested, resource_version(&later), &next),
        requested
    );
}
