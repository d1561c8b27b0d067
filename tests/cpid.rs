//! Change propagation IDs on writes, over the `cpid-annotated` fixture
//! captured from the real control plane: a Deployment created under one CPID
//! (its annotation), its image changed under a second, a ConfigMap with a W3C
//! traceparent, one with a malformed CPID. The built-in controllers are not
//! instrumented: the deployment controller copies the Deployment's
//! annotations onto its ReplicaSets, Pods carry none.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::Redactor;
use kascade::test_support::flow::{ChangeRecord, CpidOrigin};
use kascade::test_support::frontend::raw::string_attr;
use kascade::test_support::source::audit::AuditFilter;
use serde_json::Value;

const SCENARIO: &str = "cpid-annotated";
const FIRST: &str = "6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01";
const SECOND: &str = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f02";

fn raw_events() -> Vec<Value> {
    common::audit_lines(SCENARIO)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn time(v: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap()
}

/// When the user's patch that set the second CPID was received (read from
/// the fixture itself).
fn second_change_received() -> SystemTime {
    let raw = raw_events();
    let patch = raw
        .iter()
        .find(|e| {
            e["verb"] == "patch"
                && e["user"]["username"] == "kascade-e2e-admin"
                && e["objectRef"]["resource"] == "deployments"
        })
        .expect("the user's patch of the Deployment");
    time(&patch["requestReceivedTimestamp"])
}

fn describe(c: &ChangeRecord) -> String {
    format!(
        "{} {} {} {}/{}",
        c.user, c.verb, c.subresource, c.object.resource, c.object.name
    )
}

#[tokio::test]
async fn each_rollout_write_carries_the_cpid_of_the_change_it_belongs_to() {
    let changes = common::changes_of_lines(common::audit_lines(SCENARIO), "fixture").await;
    let patched = second_change_received();
    let rollout: Vec<&ChangeRecord> = changes
        .iter()
        .filter(|c| {
            c.code < 400 && ["deployments", "replicasets", "pods"].contains(&&*c.object.resource)
        })
        .collect();
    assert!(rollout.len() > 40, "{}", rollout.len());
    for c in &rollout {
        let want = if c.received < patched { FIRST } else { SECOND };
        let got = c
            .cpid
            .unwrap_or_else(|| panic!("{} has no CPID", describe(c)));
        assert_eq!(got.cpid.to_string(), want, "{}", describe(c));
        if c.object.resource == "pods" {
            // Pods carry no annotation: the CPID is carried over.
            assert_eq!(got.origin, CpidOrigin::Inferred, "{}", describe(c));
        }
        if c.verb == "create" && c.object.resource != "pods" || c.user == "kascade-e2e-admin" {
            // The user set it; the deployment controller copied it onto
            // the ReplicaSet it created.
            assert_eq!(got.origin, CpidOrigin::Annotation, "{}", describe(c));
        }
    }
    // The old ReplicaSet keeps the first CPID in its annotation while the
    // second rollout scales it down: those writes belong to the second
    // change, carried over from their cause.
    let scale_down: Vec<_> = rollout
        .iter()
        .filter(|c| {
            c.object.resource == "replicasets"
                && c.verb == "update"
                && c.subresource.is_empty()
                && c.received >= patched
        })
        .collect();
    assert!(!scale_down.is_empty());
    let old_rs_writes = scale_down
        .iter()
        .filter(|c| c.cpid.unwrap().origin == CpidOrigin::Inferred)
        .count();
    assert!(
        old_rs_writes > 0,
        "the old ReplicaSet's scale-down is inferred"
    );
}

#[tokio::test]
async fn a_traceparent_is_a_cpid_and_a_malformed_annotation_none() {
    let changes = common::changes_of_lines(common::audit_lines(SCENARIO), "fixture").await;
    let of = |name: &str| {
        changes
            .iter()
            .find(|c| c.object.resource == "configmaps" && c.object.name == name)
            .unwrap_or_else(|| panic!("configmap {name}"))
    };
    let traced = of("traced").cpid.unwrap();
    assert_eq!(
        traced.cpid.to_string(),
        "4bf92f35-77b3-4da6-a3ce-929d0e0e4736"
    );
    assert_eq!(traced.origin, CpidOrigin::Traceparent);
    assert_eq!(of("forged").cpid, None);
    // Writes of objects no change reached carry none.
    assert_eq!(of("kube-root-ca.crt").cpid, None);
}

/// The spans the collector makes of the fixture.
async fn fixture_spans() -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
    let (spans, errors) = kascade::test_support::offline::spans_from_audit_lines(
        common::audit_lines(SCENARIO),
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
async fn audit_spans_carry_cpid_attributes_users_can_search() {
    let spans = fixture_spans().await;
    let with = |cpid: &str, origin: &str| {
        spans
            .iter()
            .filter(|s| {
                string_attr(&s.attributes, "cpid") == Some(cpid)
                    && string_attr(&s.attributes, "cpid.origin") == Some(origin)
            })
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    let bindings = |names: &[String]| {
        names
            .iter()
            .filter(|n| n.starts_with("system:kube-scheduler create binding"))
            .count()
    };
    // Two Pods per rollout, each bound once.
    assert_eq!(bindings(&with(FIRST, "inferred")), 2);
    assert_eq!(bindings(&with(SECOND, "inferred")), 2);
    assert!(
        with(SECOND, "annotation")
            .iter()
            .any(|n| n == "kascade-e2e-admin patch"),
        "{:?}",
        with(SECOND, "annotation")
    );
}

// ---- Search by change, over the fixture's spans plus merges.

use kascade::test_support::frontend::raw::MemoryStore;
use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
use kascade_cpid::{Cpid, Mergelog};

/// The fixture's spans, and the spans of `mergelogs` as the collector
/// shows them.
async fn store_with(mergelogs: &[Mergelog]) -> (Frontend<MemoryStore>, TimeRange) {
    let mut spans = fixture_spans().await;
    for m in mergelogs {
        spans.extend(
            kascade::test_support::span_model::merge_spans("fixture", m)
                .into_iter()
                .map(|s| s.finish().decode()),
        );
    }
    let store = MemoryStore::new(spans);
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(
        kascade::test_support::frontend::raw::from_nanos(a),
        kascade::test_support::frontend::raw::from_nanos(b),
    );
    let config = FrontendConfig {
        // Reloading a change by id looks back from now: far enough for the
        // fixture, however old it is.
        change_lookback: std::time::Duration::from_secs(100 * 365 * 24 * 3600),
        ..FrontendConfig::default()
    };
    (Frontend::new(Arc::new(store), config), range)
}

use kascade::test_support::frontend::raw::TimeRange;

fn cpid(s: &str) -> Cpid {
    Cpid::parse(s).unwrap()
}

fn by_change(id: &str, range: TimeRange) -> SearchQuery {
    SearchQuery {
        mode: kascade::test_support::frontend::display::Mode::Cascade,
        scope: kascade::test_support::frontend::assemble::Scope::Object,
        all_siblings: false,
        tags: vec![("cpid".into(), id.into())],
        range,
        limit: 10,
    }
}

async fn search(f: &Frontend<MemoryStore>, range: TimeRange, id: &str) -> Vec<ChangeRecord> {
    let found = f.search(&by_change(id, range)).await.unwrap();
    assert!(found.len() <= 1);
    found
        .iter()
        .flat_map(|t| t.cascades.iter().flat_map(|c| c.changes.clone()))
        .collect()
}

#[tokio::test]
async fn searching_a_change_finds_its_writes_as_one_cascade() {
    let (f, range) = store_with(&[]).await;
    let patched = second_change_received();
    let first = search(&f, range, FIRST).await;
    assert!(first.len() > 10);
    assert!(first.iter().all(|c| c.received < patched));
    assert!(first.iter().all(|c| c.cpid.unwrap().cpid == cpid(FIRST)));
    let second = search(&f, range, SECOND).await;
    assert!(second.iter().all(|c| c.received >= patched));
    // The old ReplicaSet's scale-down belongs to the second change.
    assert!(second.iter().any(|c| c.object.resource == "replicasets"
        && c.verb == "update"
        && c.cpid.unwrap().origin == CpidOrigin::Inferred));
    // Unknown: nothing; malformed: refused naming the tag.
    assert!(
        search(&f, range, "11111111-2222-4333-8444-555555555555")
            .await
            .is_empty()
    );
    let e = f.search(&by_change("nope", range)).await.unwrap_err();
    assert!(e.to_string().contains("tag \"cpid\""), "{e}");
}

#[tokio::test]
async fn a_merged_change_is_found_from_its_source_with_an_explicit_cause() {
    // As if the second CPID had been minted by a controller merging the
    // first one: searching the first follows the merge.
    let merge = Mergelog {
        cpid: cpid(SECOND),
        sources: vec![cpid(FIRST)],
        time: second_change_received(),
        controller: "roller".into(),
    };
    let (f, range) = store_with(&[merge]).await;
    let found = f.search(&by_change(FIRST, range)).await.unwrap();
    let t = &found[0];
    assert_eq!(t.id, cpid(FIRST).to_bytes(), "the trace id is the CPID");
    assert!(
        t.assembly
            .notes
            .iter()
            .any(|n| n == &format!("change {SECOND} merged from {FIRST} by roller")),
        "{:?}",
        t.assembly.notes
    );
    assert_eq!(t.cascades.len(), 1, "both rollouts, joined by the merge");
    let patch = t.cascades[0]
        .changes
        .iter()
        .find(|c| c.user == "kascade-e2e-admin" && c.verb == "patch")
        .expect("the second change's root");
    let cause = patch.cause.as_ref().unwrap();
    assert_eq!(
        (cause.rule.as_str(), cause.edge.as_str()),
        ("cpid", "cpid merged")
    );
    // Its cause is a write of the first change that completed before it.
    let by_span: std::collections::HashMap<_, _> =
        t.cascades[0].changes.iter().map(|c| (c.span, c)).collect();
    let k = by_span[&cause.span];
    assert_eq!(k.cpid.unwrap().cpid, cpid(FIRST));
    assert!(k.completed <= patch.received);

    // Searching the merged CPID shows its own writes only (descendants, not
    // ancestors), and reloading by id gives the same trace.
    let second = search(&f, range, SECOND).await;
    assert!(second.iter().all(|c| c.cpid.unwrap().cpid == cpid(SECOND)));
    let again = f.get(&cpid(FIRST).to_bytes()).await.unwrap().unwrap();
    assert_eq!(again.cascades[0].changes.len(), t.cascades[0].changes.len());
}

#[tokio::test]
async fn forged_merge_cycles_end_the_walk() {
    let (a, b) = (cpid(FIRST), cpid(SECOND));
    let at = second_change_received();
    let m = |cpid, source| Mergelog {
        cpid,
        sources: vec![source],
        time: at,
        controller: String::new(),
    };
    let (f, range) = store_with(&[m(b, a), m(a, b)]).await;
    let both = search(&f, range, FIRST).await;
    let ids: std::collections::BTreeSet<_> = both.iter().map(|c| c.cpid.unwrap().cpid).collect();
    assert_eq!(ids.len(), 2);
}

#[tokio::test]
async fn the_related_cpid_query_walks_down_and_up_the_merges() {
    // first ← (a merge of) nothing; m1 ← {first, x}; m2 ← {m1}.
    let (first, x) = (cpid(FIRST), Cpid::new_random());
    let (m1, m2) = (Cpid::new_random(), Cpid::new_random());
    let at = second_change_received();
    let log = |cpid, sources: Vec<Cpid>| Mergelog {
        cpid,
        sources,
        time: at,
        controller: "roller".into(),
    };
    let (f, _) = store_with(&[log(m1, vec![first, x]), log(m2, vec![m1])]).await;
    let down = f.related_cpids(first).await.unwrap();
    let cpids: Vec<(Cpid, u32)> = down.descendants.iter().map(|r| (r.cpid, r.depth)).collect();
    assert_eq!(cpids, vec![(first, 0), (m1, 1), (m2, 2)]);
    assert_eq!(down.descendants[1].sources, vec![first, x]);
    assert_eq!(down.ancestors.len(), 1, "first was merged from nothing");
    let up = f.related_cpids(m2).await.unwrap();
    let cpids: Vec<Cpid> = up.ancestors.iter().map(|r| r.cpid).collect();
    assert_eq!(cpids, vec![m2, m1, first, x]);
    assert_eq!(up.descendants.len(), 1);
    // The JSON the frontend serves on GET /cpid/related.
    let json = serde_json::to_value(&up).unwrap();
    assert_eq!(json["ancestors"][1]["sources"][0], FIRST);
}

/// Captured from a real e2e run on a loaded machine (the config-roller
/// scenario, its `roller-demo` writes kept): the apiserver finished the
/// response of the new ReplicaSet's create 50 ms after its controller's Pod
/// create had completed, and logged it after that Pod's create and binding.
/// Not regenerated by `e2e/fixtures.sh`: the race cannot be ordered.
const LATE_RESPONSE: &str = "late-response";

#[tokio::test]
async fn a_pod_created_before_its_replicasets_create_response_carries_the_rollouts_cpid() {
    let raw = common::audit_lines(LATE_RESPONSE);
    let events: Vec<Value> = raw
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The fixture's own record: a ReplicaSet create logged after a Pod
    // create of that ReplicaSet which completed before it.
    let position = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred);
    let rs_create = position(&|e| {
        e["verb"] == "create" && e["objectRef"]["resource"] == "replicasets" && {
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            events.iter().any(|p| {
                p["verb"] == "create"
                    && p["objectRef"]["resource"] == "pods"
                    && p["objectRef"]["subresource"].is_null()
                    && p["responseObject"]["metadata"]["ownerReferences"][0]["name"] == name
                    && time(&p["stageTimestamp"]) < time(&e["stageTimestamp"])
            })
        }
    })
    .expect("a ReplicaSet create whose response completed after its Pod's");
    let rs = &events[rs_create];
    let rs_name = rs["objectRef"]["name"].as_str().unwrap();
    let rollout_cpid = rs["responseObject"]["metadata"]["annotations"]["kascade.io/cpid"]
        .as_str()
        .expect("the deployment controller copied the rollout's CPID");
    let pod_create = position(&|e| {
        e["verb"] == "create"
            && e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["subresource"].is_null()
            && e["responseObject"]["metadata"]["ownerReferences"][0]["name"] == rs_name
    })
    .unwrap();
    assert!(
        pod_create < rs_create,
        "logged before the ReplicaSet's create"
    );
    let pod = events[pod_create]["responseObject"]["metadata"]["name"]
        .as_str()
        .unwrap();

    let changes = common::changes_of_lines(raw.clone(), "fixture").await;
    let of = |resource: &str, name: &str, verb: &str, sub: &str| {
        changes
            .iter()
            .find(|c| {
                c.object.resource == resource
                    && c.object.name == name
                    && c.verb == verb
                    && c.subresource == sub
            })
            .unwrap_or_else(|| panic!("{verb} {sub} {resource}/{name}"))
    };
    let created = of("pods", pod, "create", "");
    let cause = created.cause.as_ref().expect("the Pod create has a cause");
    assert_eq!(cause.object.resource, "replicasets");
    assert_eq!(cause.object.name, rs_name);
    assert_eq!(cause.hop, Duration::ZERO, "its cause completed after it");
    let bound = of("pods", pod, "create", "binding");
    for c in [created, bound] {
        let got = c
            .cpid
            .unwrap_or_else(|| panic!("{} has no CPID", describe(c)));
        assert_eq!(got.cpid.to_string(), rollout_cpid, "{}", describe(c));
        assert_eq!(got.origin, CpidOrigin::Inferred);
    }
}

/// A change whose writes in several object windows all began within one
/// millisecond (a controller creating its Pods at once), a range too narrow
/// to split, is still found whole a page at a time, and said to be whole:
/// the captured rollout's writes, moved to the instant of its first.
#[tokio::test]
async fn windows_written_within_one_instant_are_found_whole() {
    use kascade::test_support::frontend::raw::{RawStore, find_all, from_nanos};
    let mut spans = fixture_spans().await;
    let of_change = |s: &opentelemetry_proto::tonic::trace::v1::Span| {
        s.attributes.iter().any(|a| {
            a.key == "cpid"
                && a.value.as_ref().and_then(|v| v.value.as_ref())
                    == Some(
                        &opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                            FIRST.to_string(),
                        ),
                    )
        })
    };
    let instant = spans
        .iter()
        .filter(|s| of_change(s))
        .map(|s| s.start_time_unix_nano)
        .min()
        .expect("the rollout's writes carry its CPID");
    for s in spans.iter_mut().filter(|s| of_change(s)) {
        s.end_time_unix_nano = instant + (s.end_time_unix_nano - s.start_time_unix_nano);
        s.start_time_unix_nano = instant;
    }
    let store = MemoryStore::new(spans);
    let tags = [("cpid".to_string(), FIRST.to_string())];
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(from_nanos(a), from_nanos(b));
    let mut every = store.find(&tags, range, usize::MAX).await.unwrap();
    every.sort();
    assert!(
        every.len() > 3,
        "the rollout's writes lie in {} windows",
        every.len()
    );
    for page in [1, 2, every.len() - 1] {
        let found = find_all(&store, &tags, range, page, 5000).await.unwrap();
        assert_eq!(found.ids, every, "page {page}");
        assert!(found.complete, "page {page}");
    }
    // Past `max`, still said to be cut.
    let capped = find_all(&store, &tags, range, 1, 2).await.unwrap();
    assert_eq!(capped.ids.len(), 2);
    assert!(!capped.complete);
}

/// A change whose writes lie in more object windows than one search
/// returns (`--raw-search-limit`) is searched in parts, its range split
/// until each part's search holds fewer: every write is shown, with no
/// note of a cut. Jaeger's search has no offset, so this is the only way
/// past its limit.
#[tokio::test]
async fn a_change_in_more_windows_than_one_search_returns_is_shown_whole() {
    use kascade::test_support::frontend::raw::{RawStore, find_all};
    let store = Arc::new(MemoryStore::new(fixture_spans().await));
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(
        kascade::test_support::frontend::raw::from_nanos(a),
        kascade::test_support::frontend::raw::from_nanos(b),
    );
    let tags = [("cpid".to_string(), FIRST.to_string())];
    let every = store.find(&tags, range, usize::MAX).await.unwrap();
    assert!(
        every.len() > 3,
        "the rollout's writes lie in {} windows",
        every.len()
    );
    let mut expected = every.clone();
    expected.sort();

    // The store's own search, a page at a time.
    for page in [2, 3, every.len() - 1] {
        let found = find_all(&*store, &tags, range, page, 5000).await.unwrap();
        assert_eq!(found.ids, expected, "page {page}");
        assert!(found.complete, "page {page}");
    }
    // Past `max`, as many as asked for, and said to be incomplete.
    let capped = find_all(&*store, &tags, range, 1, 2).await.unwrap();
    assert_eq!(capped.ids.len(), 2);
    assert!(!capped.complete);

    let frontend = |raw_search_limit| {
        Frontend::new(
            store.clone(),
            FrontendConfig {
                raw_search_limit,
                ..FrontendConfig::default()
            },
        )
    };
    let writes = |t: &kascade::test_support::frontend::AssembledTrace| {
        let mut spans: Vec<_> = t
            .cascades
            .iter()
            .flat_map(|c| c.changes.iter().map(|w| (w.span, describe(w))))
            .collect();
        spans.sort();
        spans
    };
    let whole = frontend(5000)
        .search(&by_change(FIRST, range))
        .await
        .unwrap();
    let paged = frontend(2).search(&by_change(FIRST, range)).await.unwrap();
    assert_eq!(writes(&paged[0]), writes(&whole[0]));
    assert!(writes(&whole[0]).len() > 10);
    assert!(
        !paged[0]
            .assembly
            .notes
            .iter()
            .any(|n| n.contains("object windows")),
        "{:?}",
        paged[0].assembly.notes
    );
}
