//! The trace builder over audit logs captured from the real control plane
//! (e2e/fixtures): object spans, owner and rule links in both directions,
//! diffs, snapshots, redaction, Kubernetes Events as event spans. Expected
//! names and values are read from the fixture itself, not from kascade's output.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::{DEFAULT_REDACT_PATHS, PathPattern, Redactor};
use kascade::test_support::model::Windowing;
use kascade::test_support::offline::spans_from_audit_lines;
use kascade::test_support::pipeline::FilterReason;
use kascade::test_support::source::audit::AuditFilter;
use kascade::test_support::span_model::Span;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::Value;

/// An attribute's value as text (integers in decimal).
fn attr_of(attrs: &[KeyValue], key: &str) -> Option<String> {
    let kv = attrs.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(v) => Some(v.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    attr_of(&s.attributes, key)
}

fn event_attr(e: &Event, key: &str) -> Option<String> {
    attr_of(&e.attributes, key)
}

fn start_time(s: &Span) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_nanos(s.start_time_unix_nano)
}

fn status_code(s: &Span) -> StatusCode {
    s.status
        .as_ref()
        .map(|st| st.code())
        .unwrap_or(StatusCode::Unset)
}

async fn build(scenario: &str, window: Duration) -> Vec<Span> {
    build_with(
        scenario,
        ProcessorConfig {
            windowing: Windowing::new(window),
            ..ProcessorConfig::default()
        },
    )
    .await
}

async fn build_with(scenario: &str, cfg: ProcessorConfig) -> Vec<Span> {
    let rules = Arc::new(RuleSources::default().load().unwrap());
    let redactor = Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap()));
    let (spans, errors) = spans_from_audit_lines(
        common::audit_lines(scenario),
        "fixture",
        rules,
        &AuditFilter::default(),
        cfg,
        redactor,
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    spans
}

/// (resource, name) of every object span.
fn objects(spans: &[Span]) -> HashSet<(String, String)> {
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("object"))
        .map(|s| (attr(s, "resource").unwrap(), attr(s, "name").unwrap()))
        .collect()
}

/// Object span (resource, name) by span id, to resolve a link span's parent.
fn object_by_span(spans: &[Span]) -> HashMap<Vec<u8>, (String, String)> {
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("object"))
        .map(|s| {
            (
                s.span_id.clone(),
                (attr(s, "resource").unwrap(), attr(s, "name").unwrap()),
            )
        })
        .collect()
}

/// (from resource, from name, role, class, to resource, to name) of every link span.
fn link_set(spans: &[Span]) -> BTreeSet<(String, String, String, String, String, String)> {
    let owners = object_by_span(spans);
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("link"))
        .map(|s| {
            let (fr, fname) = owners[&s.parent_span_id].clone();
            (
                fr,
                fname,
                attr(s, "link.role").unwrap(),
                attr(s, "link.class").unwrap(),
                attr(s, "link.resource").unwrap(),
                attr(s, "link.name").unwrap(),
            )
        })
        .collect()
}

fn audit_spans_of<'a>(spans: &'a [Span], resource: &str, name: &str) -> Vec<&'a Span> {
    let owners = object_by_span(spans);
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("audit"))
        .filter(|s| {
            owners.get(&s.parent_span_id) == Some(&(resource.to_string(), name.to_string()))
        })
        .collect()
}

fn diffs(span: &Span) -> Vec<(String, Option<String>, Option<String>)> {
    span.events
        .iter()
        .filter(|e| e.name == "diff")
        .map(|e| {
            (
                event_attr(e, "diff.path").unwrap(),
                event_attr(e, "diff.old"),
                event_attr(e, "diff.new"),
            )
        })
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

#[tokio::test]
async fn deployment_scenario_gives_object_spans_for_every_object() {
    let spans = build("deployment", Duration::from_secs(3600 * 24)).await;
    let objs = objects(&spans);
    assert!(objs.contains(&(s("deployments"), s("hello"))));
    let rs = common::created("deployment", "replicasets");
    assert_eq!(rs.len(), 2, "the fixture has two ReplicaSets: {rs:?}");
    let pods = common::created("deployment", "pods");
    assert!(pods.len() >= 7, "{pods:?}");
    for name in rs.iter() {
        assert!(
            objs.contains(&(s("replicasets"), name.clone())),
            "no object span for ReplicaSet {name}"
        );
    }
    for name in pods.iter() {
        assert!(
            objs.contains(&(s("pods"), name.clone())),
            "no object span for Pod {name}"
        );
    }
    // One object span per object (one window here); two when the first
    // went out before the object's uid was known, and then the second
    // carries it.
    let mut uids: HashMap<(String, String), Vec<Option<String>>> = HashMap::new();
    for s in spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("object"))
    {
        uids.entry((attr(s, "resource").unwrap(), attr(s, "name").unwrap()))
            .or_default()
            .push(attr(s, "uid"));
    }
    for (object, uids) in &uids {
        assert!(
            matches!(uids.as_slice(), [_] | [None, Some(_)]),
            "object spans of {object:?}: {uids:?}"
        );
    }
    // hello's first write, a refused delete, names no uid.
    assert!(
        matches!(
            uids[&(s("deployments"), s("hello"))].as_slice(),
            [None, Some(_)]
        ),
        "{:?}",
        uids[&(s("deployments"), s("hello"))]
    );
}

#[tokio::test]
async fn owner_and_node_links_exist_in_both_directions() {
    let spans = build("deployment", Duration::from_secs(3600 * 24)).await;
    let links = link_set(&spans);
    let rs = common::created("deployment", "replicasets");
    for r in &rs {
        assert!(
            links.contains(&(
                s("replicasets"),
                r.clone(),
                s("parent"),
                s("owner"),
                s("deployments"),
                s("hello")
            )),
            "{r} → deployment"
        );
        assert!(
            links.contains(&(
                s("deployments"),
                s("hello"),
                s("child"),
                s("owner"),
                s("replicasets"),
                r.clone()
            )),
            "deployment → {r}"
        );
    }
    let bound = common::bindings("deployment");
    assert!(!bound.is_empty());
    for pod in common::created("deployment", "pods") {
        let owner = rs
            .iter()
            .find(|r| pod.starts_with(&format!("{r}-")))
            .expect("pod named after its ReplicaSet");
        assert!(
            links.contains(&(
                s("pods"),
                pod.clone(),
                s("parent"),
                s("owner"),
                s("replicasets"),
                owner.clone()
            )),
            "{pod} → rs"
        );
        assert!(
            links.contains(&(
                s("replicasets"),
                owner.clone(),
                s("child"),
                s("owner"),
                s("pods"),
                pod.clone()
            )),
            "rs → {pod}"
        );
        if let Some(node) = bound.get(&pod) {
            assert!(
                links.contains(&(
                    s("pods"),
                    pod.clone(),
                    s("child"),
                    s("node"),
                    s("nodes"),
                    node.clone()
                )),
                "{pod} → {node}"
            );
            assert!(
                links.contains(&(
                    s("nodes"),
                    node.clone(),
                    s("parent"),
                    s("node"),
                    s("pods"),
                    pod.clone()
                )),
                "{node} → {pod}"
            );
        }
    }
    // Links point at the other object's span with an OpenTelemetry link too.
    let link_span = spans
        .iter()
        .find(|s| attr(s, "kascade.span").as_deref() == Some("link"))
        .unwrap();
    assert_eq!(link_span.links.len(), 1);
}

#[tokio::test]
async fn scale_and_image_changes_are_diffs_with_old_and_new_values() {
    let spans = build("deployment", Duration::from_secs(3600 * 24)).await;
    let writes = audit_spans_of(&spans, "deployments", "hello");
    let all: Vec<_> = writes.iter().flat_map(|w| diffs(w)).collect();
    assert!(
        all.contains(&(s("spec.replicas"), Some(s("3")), Some(s("5")))),
        "{all:#?}"
    );
    assert!(all.contains(&(s("spec.replicas"), Some(s("5")), Some(s("2")))));
    assert!(all.contains(&(
        s("spec.template.spec.containers[nginx].image"),
        Some(s("\"nginx:1.27\"")),
        Some(s("\"nginx:1.28\""))
    )));
    // The scale writes are the user's, on the scale subresource.
    let scale_writes: Vec<_> = writes
        .iter()
        .filter(|w| attr(w, "audit.subresource").as_deref() == Some("scale"))
        .collect();
    assert_eq!(scale_writes.len(), 2);
    assert!(
        scale_writes
            .iter()
            .all(|w| w.name.starts_with("kascade-e2e-admin patch scale"))
    );
    // The create carries a snapshot; nothing carries managedFields.
    let create = writes
        .iter()
        .find(|w| attr(w, "audit.verb").as_deref() == Some("create"))
        .unwrap();
    let snap = create
        .events
        .iter()
        .find(|e| e.name == "snapshot")
        .expect("create snapshot");
    assert!(
        event_attr(snap, "snapshot")
            .unwrap()
            .contains("\"replicas\":3")
    );
    for span in &spans {
        for e in &span.events {
            for kv in &e.attributes {
                assert!(
                    !event_attr(e, &kv.key)
                        .unwrap_or_default()
                        .contains("managedFields"),
                    "managedFields in {}",
                    span.name
                );
            }
        }
    }
    // Optimistic-concurrency conflicts (409 in the fixture, retried by the
    // controllers) are shown with their Status message but are not errors.
    let conflicts: Vec<_> = writes
        .iter()
        .filter(|w| attr(w, "audit.code").as_deref() == Some("409"))
        .collect();
    assert!(!conflicts.is_empty(), "the fixture has 409 conflicts");
    for c in conflicts {
        assert_ne!(
            status_code(c),
            StatusCode::Error,
            "{}: {:?}",
            c.name,
            c.status
        );
        assert!(
            attr(c, "audit.conflict").is_some_and(|m| m.contains("the object has been modified")),
            "{}: {:?}",
            c.name,
            attr(c, "audit.conflict")
        );
    }
}

#[tokio::test]
async fn states_kept_parsed_or_compressed_give_the_same_spans() {
    // Every state read back from the compressed tier (no hot tier) must diff
    // exactly like the parsed one.
    for scenario in ["deployment", "statefulset", "job", "service"] {
        let encode = |spans: Vec<Span>| -> Vec<String> {
            let mut v: Vec<String> = spans
                .iter()
                .map(|s| serde_json::to_string(s).unwrap())
                .collect();
            v.sort();
            v
        };
        let hot = build_with(scenario, ProcessorConfig::default()).await;
        let cold = build_with(
            scenario,
            ProcessorConfig {
                hot_states: 0,
                ..ProcessorConfig::default()
            },
        )
        .await;
        assert!(hot.iter().any(|s| !diffs(s).is_empty()), "{scenario}");
        assert_eq!(encode(hot), encode(cold), "{scenario}");
    }
}

#[tokio::test]
async fn deleted_replicasets_carry_a_snapshot() {
    let spans = build("deployment", Duration::from_secs(3600 * 24)).await;
    for rs in common::created("deployment", "replicasets") {
        let writes = audit_spans_of(&spans, "replicasets", &rs);
        let delete = writes
            .iter()
            .find(|w| attr(w, "audit.verb").as_deref() == Some("delete"))
            .unwrap_or_else(|| panic!("no delete of {rs}"));
        assert!(delete.name.contains("generic-garbage-collector"));
        let snap = delete
            .events
            .iter()
            .find(|e| e.name == "snapshot")
            .expect("delete snapshot");
        assert!(event_attr(snap, "snapshot").unwrap().contains(&rs));
    }
}

#[tokio::test]
async fn secret_values_appear_nowhere_in_the_output() {
    let raw = common::audit_lines("config").join("\n");
    let secrets = [
        "kascade-fixture-s3cr3t-value",
        "a2FzY2FkZS1maXh0dXJlLXMzY3IzdC12YWx1ZQ==",
        "kascade-fixture-rotated-value",
        "a2FzY2FkZS1maXh0dXJlLXJvdGF0ZWQtdmFsdWU=",
    ];
    // Precondition: the fixture does carry the secret (base64 in Secret data).
    assert!(raw.contains(secrets[1]) && raw.contains(secrets[3]));
    let spans = build("config", Duration::from_secs(3600 * 24)).await;
    let resource = kascade::test_support::export::resource("kascade");
    let json = kascade::test_support::export::to_otlp_json(spans.clone(), &resource).unwrap();
    for secret in secrets {
        assert!(
            !json.contains(secret),
            "secret {secret} leaked into the OTLP output"
        );
    }
    // The rotation is still visible, as a change of the redaction marker.
    let writes = audit_spans_of(&spans, "secrets", "app-secret");
    let changed: Vec<_> = writes
        .iter()
        .flat_map(|w| diffs(w))
        .filter(|(p, _, _)| p == "data.password")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    let (_, old, new) = &changed[0];
    assert!(
        old.as_ref().unwrap().contains("<redacted:")
            && new.as_ref().unwrap().contains("<redacted:")
    );
    assert_ne!(old, new);
}

#[tokio::test]
async fn config_pods_link_to_configmap_and_secret_and_configmap_change_is_a_diff() {
    let spans = build("config", Duration::from_secs(3600 * 24)).await;
    let links = link_set(&spans);
    assert!(links.contains(&(
        s("pods"),
        s("config-pod"),
        s("child"),
        s("configmap"),
        s("configmaps"),
        s("app-config")
    )));
    assert!(links.contains(&(
        s("pods"),
        s("config-pod"),
        s("child"),
        s("secret"),
        s("secrets"),
        s("app-secret")
    )));
    assert!(links.contains(&(
        s("configmaps"),
        s("app-config"),
        s("parent"),
        s("configmap"),
        s("pods"),
        s("config-pod")
    )));
    let app_pods: Vec<_> = common::created("config", "pods")
        .into_iter()
        .filter(|p| p.starts_with("app-"))
        .collect();
    assert_eq!(app_pods.len(), 2);
    for p in app_pods {
        assert!(
            links.contains(&(
                s("pods"),
                p.clone(),
                s("child"),
                s("secret"),
                s("secrets"),
                s("app-secret")
            )),
            "{p} env secretKeyRef"
        );
        assert!(
            links.contains(&(
                s("pods"),
                p.clone(),
                s("child"),
                s("configmap"),
                s("configmaps"),
                s("app-config")
            )),
            "{p} volume"
        );
    }
    let cm = audit_spans_of(&spans, "configmaps", "app-config");
    let all: Vec<_> = cm.iter().flat_map(|w| diffs(w)).collect();
    assert!(
        all.contains(&(s("data.mode"), Some(s("\"blue\"")), Some(s("\"green\"")))),
        "{all:?}"
    );
}

#[tokio::test]
async fn service_statefulset_and_job_relations() {
    let spans = build("service", Duration::from_secs(3600 * 24)).await;
    let links = link_set(&spans);
    let slices = common::created("service", "endpointslices");
    assert!(!slices.is_empty());
    for sl in slices {
        assert!(
            links.contains(&(
                s("endpointslices"),
                sl.clone(),
                s("parent"),
                s("service"),
                s("services"),
                s("web")
            )),
            "{sl}"
        );
        assert!(links.contains(&(
            s("services"),
            s("web"),
            s("child"),
            s("service"),
            s("endpointslices"),
            sl
        )));
    }

    let spans = build("statefulset", Duration::from_secs(3600 * 24)).await;
    let links = link_set(&spans);
    assert!(links.contains(&(
        s("statefulsets"),
        s("db"),
        s("child"),
        s("service"),
        s("services"),
        s("db")
    )));
    for pod in ["db-0", "db-1", "db-2"] {
        assert!(
            links.contains(&(
                s("pods"),
                s(pod),
                s("parent"),
                s("owner"),
                s("statefulsets"),
                s("db")
            )),
            "{pod}"
        );
    }

    let spans = build("job", Duration::from_secs(3600 * 24)).await;
    let links = link_set(&spans);
    let pods = common::created("job", "pods");
    assert!(pods.len() >= 3);
    for pod in pods {
        assert!(
            links.contains(&(
                s("jobs"),
                s("pi"),
                s("child"),
                s("owner"),
                s("pods"),
                pod.clone()
            )),
            "{pod}"
        );
    }
}

#[tokio::test]
async fn small_windows_split_an_object_into_one_span_per_window() {
    let long = build("deployment", Duration::from_secs(3600 * 24)).await;
    let short = build("deployment", Duration::from_secs(1)).await;
    let windows_of = |spans: &[Span]| -> BTreeSet<String> {
        spans
            .iter()
            .filter(|s| {
                attr(s, "kascade.span").as_deref() == Some("object")
                    && attr(s, "name").as_deref() == Some("hello")
            })
            .map(|s| attr(s, "kascade.window.start").unwrap())
            .collect()
    };
    assert_eq!(windows_of(&long).len(), 1);
    let short_windows = windows_of(&short);
    assert!(short_windows.len() >= 2, "{short_windows:?}");
    // Every audit span sits in the window of its start time, under that window's object span.
    let by_id: HashMap<_, _> = short.iter().map(|s| (s.span_id.clone(), s)).collect();
    for a in short
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("audit"))
    {
        let parent = by_id[&a.parent_span_id];
        assert_eq!(parent.trace_id, a.trace_id);
        let start: u64 = attr(parent, "kascade.window.start")
            .unwrap()
            .parse()
            .unwrap();
        let t = start_time(a)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(t, start);
    }
}

// ---- Kubernetes Events → event spans ----

/// The Event objects written in a fixture (the `responseObject` of every
/// successful Event create/update/patch, either API), read from the audit log.
fn event_writes(scenario: &str) -> Vec<Value> {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| {
            e["objectRef"]["resource"] == "events"
                && matches!(e["verb"].as_str(), Some("create" | "update" | "patch"))
                && e["responseStatus"]["code"].as_i64().unwrap_or(0) < 400
        })
        .map(|e| e["responseObject"].clone())
        .collect()
}

/// The first audit log line of the fixture that writes an Event through `group`.
fn event_write_line(scenario: &str, group: &str) -> String {
    common::audit_lines(scenario)
        .into_iter()
        .find(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["objectRef"]["resource"] == "events"
                && e["objectRef"]["apiGroup"].as_str().unwrap_or("") == group
        })
        .unwrap_or_else(|| panic!("{scenario} has no Event written through {group:?}"))
}

/// An event span as (involved resource, involved name, span) — the involved
/// object is the event span's parent object span.
fn event_spans(spans: &[Span]) -> Vec<(String, String, &Span)> {
    let owners = object_by_span(spans);
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("event"))
        .map(|s| {
            let (r, n) = owners
                .get(&s.parent_span_id)
                .unwrap_or_else(|| panic!("event span {} has no object span parent", s.name))
                .clone();
            (r, n, s)
        })
        .collect()
}

fn events_on<'a>(
    spans: &[(String, String, &'a Span)],
    resource: &str,
    name: &str,
) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|(r, n, _)| r == resource && n == name)
        .map(|(_, _, s)| *s)
        .collect()
}

/// The resource of an involved object's kind, for the kinds the fixtures' Events are about.
fn resource_of_kind(kind: &str) -> String {
    assert!(
        ["Deployment", "ReplicaSet", "Pod", "Job", "StatefulSet"].contains(&kind),
        "an Event about a {kind}: extend this test"
    );
    format!("{}s", kind.to_ascii_lowercase())
}

fn message_of(event: &Value) -> String {
    event["message"]
        .as_str()
        .or(event["note"].as_str())
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn deployment_events_become_event_spans_on_the_objects_they_are_about() {
    let spans = build("deployment", Duration::from_secs(3600 * 24)).await;
    let events = event_spans(&spans);

    // The Deployment's trace has its ScalingReplicaSet events, with the
    // messages the deployment controller wrote.
    let on_deploy = events_on(&events, "deployments", "hello");
    let deploy_span = spans
        .iter()
        .find(|s| {
            attr(s, "kascade.span").as_deref() == Some("object")
                && attr(s, "resource").as_deref() == Some("deployments")
                && attr(s, "name").as_deref() == Some("hello")
        })
        .unwrap();
    let expected: BTreeSet<String> = event_writes("deployment")
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "Deployment")
        .map(message_of)
        .collect();
    let got: BTreeSet<String> = on_deploy
        .iter()
        .map(|s| attr(s, "event.message").unwrap())
        .collect();
    assert_eq!(got, expected);
    assert!(on_deploy.iter().all(|s| s.name == "ScalingReplicaSet"));
    assert!(
        got.iter()
            .any(|m| m.starts_with("Scaled up replica set hello-") && m.ends_with(" from 0 to 3")),
        "{got:#?}"
    );
    for s in &on_deploy {
        assert_eq!(s.trace_id, deploy_span.trace_id);
        assert_eq!(
            s.start_time_unix_nano, s.end_time_unix_nano,
            "an occurrence is a point in time"
        );
        assert_eq!(attr(s, "event.type").as_deref(), Some("Normal"));
        assert_eq!(
            attr(s, "event.component").as_deref(),
            Some("deployment-controller")
        );
        assert_eq!(attr(s, "event.count").as_deref(), Some("1"));
        assert!(attr(s, "event.name").unwrap().starts_with("hello."));
        assert_eq!(status_code(s), StatusCode::Unset);
        // In the second of the Event's lastTimestamp (core/v1 has no eventTime
        // here), refined by the time the Event was written.
        let uid = attr(s, "event.uid").unwrap();
        let source = event_writes("deployment")
            .into_iter()
            .find(|e| e["metadata"]["uid"] == uid.as_str())
            .unwrap();
        let last =
            humantime::parse_rfc3339_weak(source["lastTimestamp"].as_str().unwrap()).unwrap();
        assert!(
            start_time(s) >= last && start_time(s) < last + Duration::from_secs(1),
            "{:?} is not within the second of {last:?}",
            start_time(s)
        );
    }

    // ReplicaSets have SuccessfulCreate events naming the pods they created.
    let replicasets = common::created("deployment", "replicasets");
    assert!(!replicasets.is_empty());
    for rs in replicasets {
        let on_rs = events_on(&events, "replicasets", &rs);
        let creates: Vec<_> = on_rs
            .iter()
            .filter(|s| s.name == "SuccessfulCreate")
            .collect();
        assert!(!creates.is_empty(), "no SuccessfulCreate on {rs}");
        for s in creates {
            let msg = attr(s, "event.message").unwrap();
            assert!(msg.starts_with(&format!("Created pod: {rs}-")), "{msg}");
            assert_eq!(
                attr(s, "event.component").as_deref(),
                Some("replicaset-controller")
            );
        }
    }

    // Pods have the scheduler's Scheduled event (events.k8s.io), naming the
    // node of the binding, at the event's own time.
    let bound = common::bindings("deployment");
    assert!(!bound.is_empty());
    let written = event_writes("deployment");
    for (pod, node) in &bound {
        let on_pod = events_on(&events, "pods", pod);
        let scheduled: Vec<_> = on_pod.iter().filter(|s| s.name == "Scheduled").collect();
        assert_eq!(scheduled.len(), 1, "{pod}: {on_pod:?}");
        let s = scheduled[0];
        assert_eq!(
            attr(s, "event.component").as_deref(),
            Some("default-scheduler")
        );
        assert_eq!(attr(s, "event.action").as_deref(), Some("Binding"));
        assert_eq!(
            attr(s, "event.message").unwrap(),
            format!("Successfully assigned default/{pod} to {node}")
        );
        let source = written
            .iter()
            .find(|e| e["regarding"]["name"] == pod.as_str() && e["reason"] == "Scheduled")
            .unwrap();
        let event_time =
            humantime::parse_rfc3339_weak(source["eventTime"].as_str().unwrap()).unwrap();
        assert_eq!(start_time(s), event_time);
        assert_eq!(
            attr(s, "event.uid").unwrap(),
            source["metadata"]["uid"].as_str().unwrap()
        );
    }

    // Events are not objects of their own.
    assert!(
        !objects(&spans).iter().any(|(r, _)| r == "events"),
        "an Event got an object span"
    );
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "resource").as_deref() != Some("events"))
    );
}

#[tokio::test]
async fn every_event_write_in_every_fixture_is_one_event_span() {
    for scenario in [
        "deployment",
        "service",
        "config",
        "statefulset",
        "job",
        "unschedulable",
        "rollout-stuck",
        "quota",
    ] {
        let spans = build(scenario, Duration::from_secs(3600 * 24)).await;
        let events = event_spans(&spans);
        let expected: BTreeSet<(String, String, String, String)> = event_writes(scenario)
            .iter()
            .map(|e| {
                let involved = if e["involvedObject"].is_object() {
                    &e["involvedObject"]
                } else {
                    &e["regarding"]
                };
                (
                    resource_of_kind(involved["kind"].as_str().unwrap()),
                    involved["name"].as_str().unwrap().to_string(),
                    e["reason"].as_str().unwrap().to_string(),
                    message_of(e),
                )
            })
            .collect();
        let got: BTreeSet<(String, String, String, String)> = events
            .iter()
            .map(|(r, n, s)| {
                (
                    r.clone(),
                    n.clone(),
                    s.name.to_string(),
                    attr(s, "event.message").unwrap(),
                )
            })
            .collect();
        assert_eq!(got, expected, "{scenario}");
        assert_eq!(
            events.len(),
            event_writes(scenario).len(),
            "{scenario}: one span per Event write"
        );
        assert!(!objects(&spans).iter().any(|(r, _)| r == "events"));
    }
    // The Job's completion is on the Job.
    let spans = build("job", Duration::from_secs(3600 * 24)).await;
    let events = event_spans(&spans);
    assert!(
        events_on(&events, "jobs", "pi")
            .iter()
            .any(|s| s.name == "Completed")
    );
}

async fn build_lines(lines: Vec<String>) -> Vec<Span> {
    let (spans, errors) = spans_from_audit_lines(
        lines,
        "fixture",
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    spans
}

#[tokio::test]
async fn the_same_event_write_twice_is_one_event_span() {
    for group in ["", "events.k8s.io"] {
        let line = event_write_line("deployment", group);
        // A retried webhook batch (or the Event watch) reports it again.
        let spans = build_lines(vec![line.clone(), line.clone()]).await;
        let events = event_spans(&spans);
        assert_eq!(events.len(), 1, "{group:?}: one occurrence, one span");
        // Separate processors (replicas, restarts) derive the same span id.
        let other = build_lines(vec![line.clone()]).await;
        assert_eq!(
            (&events[0].2.trace_id, &events[0].2.span_id),
            (
                &event_spans(&other)[0].2.trace_id,
                &event_spans(&other)[0].2.span_id
            ),
            "{group:?}: the same occurrence has the same span id everywhere"
        );
        // Its involved object's span is created once, as the trace root.
        let roots: Vec<_> = spans
            .iter()
            .filter(|s| attr(s, "kascade.span").as_deref() == Some("object"))
            .collect();
        assert_eq!(roots.len(), 1);
        assert_eq!(events[0].2.trace_id, roots[0].trace_id);

        // The same Event occurring again (the recorder bumps its count) is a
        // new span in the same trace. The real write, with the count it
        // would carry after one more occurrence.
        let mut again: Value = serde_json::from_str(&line).unwrap();
        // Another request of the recorder: its own audit ID.
        again["auditID"] = format!("{}-again", again["auditID"].as_str().unwrap()).into();
        let obj = &mut again["responseObject"];
        if obj["involvedObject"].is_object() {
            obj["count"] = 2.into();
        } else {
            obj["series"] = serde_json::json!({"count": 2, "lastObservedTime": obj["eventTime"]});
        }
        let spans = build_lines(vec![line, again.to_string()]).await;
        let events = event_spans(&spans);
        assert_eq!(events.len(), 2);
        assert_ne!(events[0].2.span_id, events[1].2.span_id);
        assert_eq!(events[0].2.trace_id, events[1].2.trace_id);
        assert_eq!(attr(events[1].2, "event.count").as_deref(), Some("2"));
    }
}

#[tokio::test]
async fn event_writes_without_a_response_fall_back_to_the_request_or_are_counted() {
    use kascade::test_support::aggregate::Processor;
    use kascade::test_support::aggregate::span_cache::LocalSpanCache;
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::source::accept;
    use kascade::test_support::source::audit::parse_event;

    let metrics = Arc::new(Metrics::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let processor = Processor::new(
        ProcessorConfig::default(),
        Redactor::new(None),
        Arc::new(RuleSources::default().load().unwrap()),
        Arc::new(LocalSpanCache::new(1000, Duration::from_secs(3600))),
        tx,
        metrics.clone(),
    );
    let run = |line: String| {
        let item = accept(
            parse_event(&line).unwrap(),
            "fixture",
            &AuditFilter::default(),
            &metrics,
        )
        .expect("Event writes pass the default filter");
        let processor = &processor;
        async move { processor.process(&item).await }
    };
    // A real Event create as a Request-level policy logs it: no response.
    let mut ev: Value = serde_json::from_str(&event_write_line("deployment", "")).unwrap();
    let expected_message = message_of(&ev["requestObject"]);
    ev.as_object_mut().unwrap().remove("responseObject");
    run(ev.to_string()).await.unwrap();
    // ... and as a Metadata-level policy logs it: neither request nor response.
    ev.as_object_mut().unwrap().remove("requestObject");
    run(ev.to_string()).await.unwrap();
    drop(processor);
    let mut spans = Vec::new();
    while let Some(s) = rx.recv().await {
        spans.push(s.decode());
    }
    let events = event_spans(&spans);
    assert_eq!(events.len(), 1, "the create's request carries the Event");
    assert_eq!(
        attr(events[0].2, "event.message").unwrap(),
        expected_message
    );
    let filtered = |reason| {
        metrics
            .events_filtered
            .get_or_create(&Metrics::filtered(reason))
            .get()
    };
    assert_eq!(filtered(FilterReason::EventWithoutObject), 1);
}

#[test]
fn audit_events_keep_their_request_uri() {
    // The dry-run filter reads it: a field name mismatch would silently
    // leave it empty.
    let mut checked = 0;
    for line in common::audit_lines("deployment") {
        let raw: Value = serde_json::from_str(&line).unwrap();
        let ev = kascade::test_support::source::audit::parse_event(&line).unwrap();
        assert_eq!(ev.request_uri, raw["requestURI"].as_str().unwrap());
        checked += 1;
    }
    assert!(checked > 100);
}

/// The deployment scenario's audit events and the watch streams of its
/// Deployment, ReplicaSets and Pods (all captured from the real control plane)
/// through one processor, audit first or watch first; returns what it
/// exported. `audited` filters the audit events that are fed.
async fn audit_and_watch(watch_first: bool, audited: impl Fn(&Value) -> bool) -> Vec<Span> {
    let cfg = ProcessorConfig::default();
    audit_and_watch_with(cfg, watch_first, audited).await.0
}

/// [`audit_and_watch`] with a processor configuration of one's own; also
/// returns the metrics.
async fn audit_and_watch_with(
    cfg: ProcessorConfig,
    watch_first: bool,
    audited: impl Fn(&Value) -> bool,
) -> (Vec<Span>, Arc<kascade::test_support::metrics::Metrics>) {
    audit_and_watch_in("deployment", cfg, watch_first, audited).await
}

/// [`audit_and_watch_with`] over another scenario: its audit log and every
/// watch stream captured with it (`watch/<group>.<resource>.jsonl`).
async fn audit_and_watch_in(
    scenario: &str,
    cfg: ProcessorConfig,
    watch_first: bool,
    audited: impl Fn(&Value) -> bool,
) -> (Vec<Span>, Arc<kascade::test_support::metrics::Metrics>) {
    use kascade::test_support::aggregate::Processor;
    use kascade::test_support::aggregate::span_cache::LocalSpanCache;
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::model::ObjectRef;
    use kascade::test_support::pipeline::{WatchChange, WatchKind};

    let metrics = Arc::new(Metrics::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 16);
    let cfg = ProcessorConfig {
        // Whatever waits for its audit event is shown by the final flush.
        watch_audit_wait: Duration::from_secs(3600),
        ..cfg
    };
    let processor = Processor::new(
        cfg,
        Redactor::new(None),
        Arc::new(RuleSources::default().load().unwrap()),
        Arc::new(LocalSpanCache::new(1 << 16, Duration::from_secs(7200))),
        tx,
        metrics.clone(),
    );
    let mut audit = Vec::new();
    for line in common::audit_lines(scenario) {
        let raw: Value = serde_json::from_str(&line).unwrap();
        if !audited(&raw) {
            continue;
        }
        let ev = kascade::test_support::source::audit::parse_event(&line).unwrap();
        if let Some(item) =
            kascade::test_support::source::accept(ev, "fixture", &AuditFilter::default(), &metrics)
        {
            audit.push(item);
        }
    }
    let mut watch = Vec::new();
    let mut streams: Vec<_> = std::fs::read_dir(common::fixture_path(scenario, "watch"))
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    streams.sort();
    for path in streams {
        let file = path.file_stem().unwrap().to_str().unwrap();
        let (group, resource) = file.rsplit_once('.').unwrap();
        let group = if group == "core" { "" } else { group };
        let stream = std::fs::read_to_string(&path).unwrap();
        for line in stream.lines() {
            let ev: Value = serde_json::from_str(line).unwrap();
            let kind = match ev["type"].as_str().unwrap() {
                "ADDED" => WatchKind::Added,
                "MODIFIED" => WatchKind::Modified,
                "DELETED" => WatchKind::Deleted,
                _ => continue,
            };
            let state = ev["object"].clone();
            let object = ObjectRef::new(
                "fixture",
                group,
                resource,
                state["metadata"]["namespace"].as_str().unwrap(),
                state["metadata"]["name"].as_str().unwrap(),
            );
            watch.push(WatchChange {
                object,
                kind,
                state: kascade::test_support::json::parse(&state.to_string()).unwrap(),
                observed: std::time::SystemTime::now(),
            });
        }
    }
    assert!(
        watch.len() > 20,
        "the watch streams have {} events",
        watch.len()
    );
    if !watch_first {
        for item in audit.drain(..) {
            processor.process(&item).await.unwrap();
        }
    }
    for change in watch {
        processor.process_watch(change).await.unwrap();
    }
    for item in audit {
        processor.process(&item).await.unwrap();
    }
    processor.flush_watch(true).await.unwrap();
    drop(processor);
    let mut out = Vec::new();
    while let Some(s) = rx.recv().await {
        out.push(s.decode());
    }
    (out, metrics)
}

/// The watch spans, described by name, version and changed paths.
fn watch_spans(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("watch"))
        .map(|s| {
            let rv = attr(s, "watch.resource_version.new").unwrap_or_default();
            let paths: Vec<String> = s
                .events
                .iter()
                .filter_map(|e| event_attr(e, "diff.path"))
                .collect();
            format!(
                "{} {} @{rv}: {}",
                s.name,
                attr(s, "name").unwrap_or_default(),
                paths.join(", ")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_write_seen_by_audit_and_watch_is_shown_once() {
    // Every write of the scenario was audited with its response: the watch's
    // copy of each must not become a span of its own, whichever comes first —
    // also for writes the audit event cannot name by version (the scheduler's
    // binding, a delete that writes two versions, `kubectl scale`).
    for watch_first in [false, true] {
        let spans = audit_and_watch(watch_first, |_| true).await;
        let audited = spans
            .iter()
            .filter(|s| attr(s, "kascade.span").as_deref() == Some("audit"))
            .count();
        assert!(audited > 50);
        let watch = watch_spans(&spans);
        assert!(
            watch.is_empty(),
            "shown twice (watch first: {watch_first}): {watch:#?}"
        );
        if watch_first {
            // The binding's audit span then shows the watch's whole diff.
            let bindings: Vec<&Span> = spans
                .iter()
                .filter(|s| s.name.ends_with(" create binding"))
                .collect();
            assert!(!bindings.is_empty());
            for b in bindings {
                let paths: Vec<String> = b
                    .events
                    .iter()
                    .filter_map(|e| event_attr(e, "diff.path"))
                    .collect();
                assert!(paths.iter().any(|p| p == "spec.nodeName"), "{paths:?}");
                assert!(
                    paths
                        .iter()
                        .any(|p| p.starts_with("status.conditions[PodScheduled]")),
                    "{paths:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn pod_changes_without_audit_events_are_shown_from_the_watch() {
    // As under a Metadata-level policy for pods: only the watch knows what
    // changed, e.g. the scheduler setting spec.nodeName.
    let spans = audit_and_watch(false, |ev| ev["objectRef"]["resource"] != "pods").await;
    let watch: Vec<&Span> = spans
        .iter()
        .filter(|s| attr(s, "kascade.span").as_deref() == Some("watch"))
        .collect();
    let node_names: HashSet<String> = watch
        .iter()
        .flat_map(|s| s.events.iter())
        .filter(|e| event_attr(e, "diff.path").as_deref() == Some("spec.nodeName"))
        .filter_map(|e| event_attr(e, "diff.new"))
        .collect();
    // The nodes the fixture's pods were bound to, read from the stream itself.
    let stream =
        std::fs::read_to_string(common::fixture_path("deployment", "watch/core.pods.jsonl"))
            .unwrap();
    let bound: HashSet<String> = stream
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            v["object"]["spec"]["nodeName"]
                .as_str()
                .map(|n| format!("\"{n}\""))
        })
        .collect();
    assert!(!bound.is_empty());
    assert_eq!(node_names, bound, "the bindings appear as watch diffs");
    assert!(
        watch
            .iter()
            .any(|s| s.name.ends_with("deleted") && s.events.iter().any(|e| e.name == "snapshot")),
        "a deleted pod carries its last state"
    );
}

#[tokio::test]
async fn watch_changes_are_shown_even_when_the_ledger_evicted_them() {
    // No audit at all (a Metadata-level policy, no webhook): every change of
    // the captured watch streams waits for an audit event that never comes,
    // then is shown as a watch span. A ledger of 4 entries evicts nearly all
    // of them while they wait; each must still be shown, exactly as with
    // room to spare (it used to be skipped, silently).
    let (roomy, _) = audit_and_watch_with(ProcessorConfig::default(), false, |_| false).await;
    let tiny = ProcessorConfig {
        ledger_entries: 4,
        ..ProcessorConfig::default()
    };
    let (cramped, metrics) = audit_and_watch_with(tiny, false, |_| false).await;
    let expected = watch_spans(&roomy);
    assert!(expected.len() > 30, "{expected:#?}");
    assert_eq!(watch_spans(&cramped), expected);
    let evicted = metrics
        .cache_evictions
        .get_or_create(&kascade::test_support::metrics::CacheEvictionLabel {
            cache: kascade::test_support::metrics::Cache::Ledger,
            cause: kascade::test_support::metrics::EvictionCause::Size,
        })
        .get();
    assert!(
        evicted > 30,
        "the tiny ledger evicted only {evicted} entries"
    );
}

#[tokio::test]
async fn a_pod_deleted_again_under_the_same_name_is_shown_deleted_again() {
    // StatefulSet pods come back under the same name. The captured lifetime
    // of a real pod (db-2: added, updated, deleted), then the same lifetime
    // again as a new pod: another uid, later resourceVersions.
    use kascade::test_support::aggregate::Processor;
    use kascade::test_support::aggregate::span_cache::LocalSpanCache;
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::model::ObjectRef;
    use kascade::test_support::pipeline::{WatchChange, WatchKind};

    let stream =
        std::fs::read_to_string(common::fixture_path("statefulset", "watch/core.pods.jsonl"))
            .unwrap();
    let lifetime: Vec<Value> = stream
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["object"]["metadata"]["name"] == "db-2")
        .collect();
    assert_eq!(lifetime.last().unwrap()["type"], "DELETED");
    let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 16);
    let processor = Processor::new(
        ProcessorConfig {
            has_watch: true,
            ..ProcessorConfig::default()
        },
        Redactor::new(None),
        Arc::new(RuleSources::default().load().unwrap()),
        Arc::new(LocalSpanCache::new(1 << 16, Duration::from_secs(7200))),
        tx,
        Arc::new(Metrics::default()),
    );
    for round in 0..2u64 {
        for ev in &lifetime {
            let mut state = ev["object"].clone();
            if round == 1 {
                let rv: u64 = state["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                state["metadata"]["resourceVersion"] = (rv + 100_000).to_string().into();
                state["metadata"]["uid"] = "recreated-db-2".into();
            }
            let kind = match ev["type"].as_str().unwrap() {
                "ADDED" => WatchKind::Added,
                "DELETED" => WatchKind::Deleted,
                _ => WatchKind::Modified,
            };
            let object = ObjectRef::new(
                "fixture",
                "",
                "pods",
                state["metadata"]["namespace"].as_str().unwrap(),
                "db-2",
            );
            processor
                .process_watch(WatchChange {
                    object,
                    kind,
                    state: kascade::test_support::json::parse(&state.to_string()).unwrap(),
                    observed: std::time::SystemTime::now(),
                })
                .await
                .unwrap();
        }
        // No audit event will come: show what waits.
        processor.flush_watch(true).await.unwrap();
    }
    drop(processor);
    let mut spans = Vec::new();
    while let Some(s) = rx.recv().await {
        spans.push(s.decode());
    }
    let shown = watch_spans(&spans);
    let count = |prefix: &str| shown.iter().filter(|s| s.starts_with(prefix)).count();
    assert_eq!(count("watch added "), 2, "{shown:#?}");
    assert_eq!(count("watch deleted "), 2, "{shown:#?}");
}

// ---- Failures: refused creates, conflicts, versions, Event times ----

/// The audit events of a fixture, parsed.
fn audit_events(scenario: &str) -> Vec<Value> {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn quota_denied_pod_creates_are_errors_on_their_replicaset() {
    // The ReplicaSet controller's Pod creates refused by the quota (403, no
    // name yet: generateName) carry their owner in the request object.
    let denied: Vec<Value> = audit_events("quota")
        .into_iter()
        .filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["name"].is_null()
                && e["responseStatus"]["code"] == 403
        })
        .collect();
    assert!(denied.len() >= 2, "the quota fixture has refused creates");
    let owner = &denied[0]["requestObject"]["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "ReplicaSet");
    let rs = owner["name"].as_str().unwrap();
    let prefix = denied[0]["requestObject"]["metadata"]["generateName"]
        .as_str()
        .unwrap();

    let spans = build("quota", Duration::from_secs(3600 * 24)).await;
    let on_rs: HashMap<String, &Span> = audit_spans_of(&spans, "replicasets", rs)
        .into_iter()
        .filter(|s| attr(s, "audit.code").as_deref() == Some("403"))
        .map(|s| (attr(s, "audit.id").unwrap(), s))
        .collect();
    assert_eq!(on_rs.len(), denied.len(), "one span per refused create");
    for e in &denied {
        let span = on_rs[e["auditID"].as_str().unwrap()];
        let message = e["responseStatus"]["message"].as_str().unwrap();
        assert!(message.contains("exceeded quota"), "{message}");
        assert_eq!(status_code(span), StatusCode::Error);
        assert_eq!(span.status.as_ref().unwrap().message, message);
        assert_eq!(
            span.name,
            format!(
                "system:serviceaccount:kube-system:replicaset-controller create pods (generateName {prefix})"
            )
        );
        assert_eq!(
            attr(span, "audit.attempt.resource").as_deref(),
            Some("pods")
        );
        assert_eq!(
            attr(span, "audit.attempt.generate_name").as_deref(),
            Some(prefix)
        );
        assert_eq!(
            attr(span, "audit.attempt.name").as_deref(),
            e["responseStatus"]["details"]["name"].as_str()
        );
        // What it tried to create: the requested Pod.
        let snap = span.events.iter().find(|ev| ev.name == "snapshot").unwrap();
        assert!(event_attr(snap, "snapshot").unwrap().contains(prefix));
    }
    // No object span is made up for a Pod that never existed.
    assert!(
        !objects(&spans)
            .iter()
            .any(|(r, n)| r == "pods" && n == prefix)
    );

    // They are no longer filtered as naming no object.
    let metrics = Arc::new(kascade::test_support::metrics::Metrics::default());
    let accepted = common::audit_lines("quota")
        .into_iter()
        .filter_map(|l| {
            let ev = kascade::test_support::source::audit::parse_event(&l).unwrap();
            kascade::test_support::source::accept(ev, "fixture", &AuditFilter::default(), &metrics)
        })
        .filter(|a| a.failed_create.is_some())
        .count();
    assert_eq!(accepted, denied.len());
    let no_object = metrics
        .events_filtered
        .get_or_create(&kascade::test_support::metrics::Metrics::filtered(
            FilterReason::NoObject,
        ))
        .get();
    assert_eq!(no_object, 0);
}

#[tokio::test]
async fn a_refused_create_without_owner_is_shown_under_its_generate_name() {
    // The quota fixture's refused create, its owner reference removed (as a
    // user's `kubectl create` with generateName would send it).
    let mut e = audit_events("quota")
        .into_iter()
        .find(|e| e["verb"] == "create" && e["responseStatus"]["code"] == 403)
        .unwrap();
    e["requestObject"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    let prefix = e["requestObject"]["metadata"]["generateName"]
        .as_str()
        .unwrap()
        .to_string();
    let spans = build_lines(vec![e.to_string()]).await;
    let on_prefix = audit_spans_of(&spans, "pods", &prefix);
    assert_eq!(on_prefix.len(), 1, "{:?}", objects(&spans));
    assert_eq!(status_code(on_prefix[0]), StatusCode::Error);
}

#[tokio::test]
async fn resource_versions_of_a_write_are_in_order_whoever_came_first() {
    // When the list-watch got ahead of the audit events, the last state is
    // newer than the write: the old version must still be the one the write
    // replaced (or none), the same as when the audit event came first.
    let old_versions = |spans: &[Span]| -> HashMap<String, String> {
        let mut out = HashMap::new();
        for s in spans {
            if attr(s, "kascade.span").as_deref() != Some("audit") {
                continue;
            }
            let old = attr(s, "audit.resource_version.old");
            let new = attr(s, "audit.resource_version.new");
            if let (Some(o), Some(n)) = (&old, &new) {
                let (o, n): (u64, u64) = (o.parse().unwrap(), n.parse().unwrap());
                assert!(o < n, "{}: old {o} is not before new {n}", s.name);
            }
            if matches!(attr(s, "audit.verb").as_deref(), Some("update" | "patch"))
                && let Some(o) = old
            {
                out.insert(attr(s, "audit.id").unwrap(), o);
            }
        }
        out
    };
    // rollout-stuck deletes nothing, so every object's last state stays
    // (deployment: deleted objects' states are gone by then).
    for scenario in ["rollout-stuck", "deployment"] {
        let run = |watch_first| {
            audit_and_watch_in(scenario, ProcessorConfig::default(), watch_first, |_| true)
        };
        let audit_first = old_versions(&run(false).await.0);
        let watch_first = old_versions(&run(true).await.0);
        assert!(audit_first.len() > 20, "{scenario}: {}", audit_first.len());
        // Watch first, the old version is the watch's previous one: the same,
        // or later where the audit log names no version (a scheduler's binding).
        for (id, audited) in &audit_first {
            let watched = watch_first.get(id).unwrap_or_else(|| {
                panic!("{scenario} {id}: no old version when the watch came first")
            });
            let (a, w): (u64, u64) = (audited.parse().unwrap(), watched.parse().unwrap());
            assert!(a <= w, "{scenario} {id}: {a} audit first, {w} watch first");
        }
    }
}

#[tokio::test]
async fn events_never_start_before_the_pod_creates_they_report() {
    // core/v1 Event times are cut to the second: "Created pod: x" must still
    // not come before the create of x.
    let mut checked = 0;
    for scenario in ["job", "deployment", "statefulset", "quota", "rollout-stuck"] {
        let spans = build(scenario, Duration::from_secs(3600 * 24)).await;
        let creates: HashMap<String, &Span> = spans
            .iter()
            .filter(|s| {
                attr(s, "kascade.span").as_deref() == Some("audit")
                    && attr(s, "audit.verb").as_deref() == Some("create")
                    && attr(s, "audit.subresource").is_none()
                    && attr(s, "audit.code").as_deref() == Some("201")
            })
            .filter_map(|s| {
                let (r, n) = object_by_span(&spans).get(&s.parent_span_id)?.clone();
                (r == "pods").then_some((n, s))
            })
            .collect();
        for (_, _, e) in event_spans(&spans) {
            let Some(pod) = attr(e, "event.message")
                .and_then(|m| m.strip_prefix("Created pod: ").map(str::to_string))
            else {
                continue;
            };
            let create = creates[&pod];
            assert!(
                e.start_time_unix_nano >= create.end_time_unix_nano,
                "{scenario}: {} for {pod} at {:?}, its create ended at {:?}",
                e.name,
                start_time(e),
                std::time::UNIX_EPOCH + Duration::from_nanos(create.end_time_unix_nano)
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} Events checked");
}
