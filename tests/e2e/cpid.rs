//! Changes by CPID (the cpid-annotated scenario under one CPID, its image
//! changed under a second), read through the UI tier after an instrumented
//! controller reported merging the two.

use super::*;

const CPID_FIRST: &str = "6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01";

const CPID_SECOND: &str = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f02";

/// The CPID `kubectl` printed as the webhook's warning, in a file the
/// cpid-webhook scenario kept.
fn warned_cpid(file: &str) -> String {
    let path = format!("{}/{file}", env("KASCADE_E2E_RUN_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let re = regex::Regex::new(r"Warning: kascade\.io/cpid=([0-9a-f-]{36})").unwrap();
    // The last: the apiserver retries a patch that met a conflict within
    // the one request, calling the CPID webhook again, and the object
    // keeps the last attempt's CPID (kubectl prints every attempt's).
    re.captures_iter(&text)
        .last()
        .unwrap_or_else(|| panic!("{path}: no CPID warning in {text:?}"))[1]
        .to_string()
}

/// The config-roller scenario's files (its kubectl warnings, the merged CPID).
fn roller_file(name: &str) -> String {
    format!("{}/config-roller/{name}", env("KASCADE_E2E_RUN_DIR"))
}

/// The one change trace the UI shows for `cpid`, once it holds a patch of
/// `<namespace>/web` (a user's or the controller's roll) and a Pod binding
/// of its rollout, and `extra` holds.
async fn rollout_change(
    cpid: &str,
    namespace: &str,
    extra: impl Fn(&[Value]) -> Result<(), String>,
) -> Vec<Value> {
    let patch = format!(" patch deployments {namespace}/web");
    let binding = format!("kube-scheduler create binding pods {namespace}/");
    let rolled = |traces: &[Value]| {
        let ops: Vec<&str> = traces
            .iter()
            .flat_map(|t| t["spans"].as_array().unwrap())
            .map(|s| s["operationName"].as_str().unwrap())
            .collect();
        if traces.len() != 1 {
            return Err(format!("{} traces, not one", traces.len()));
        }
        if !ops.iter().any(|o| o.ends_with(&patch)) {
            return Err(format!("no span ends with {patch:?}"));
        }
        if !ops.iter().any(|o| o.contains(&binding)) {
            return Err(format!("no span contains {binding:?}"));
        }
        extra(traces)
    };
    ui_search_until("cascade", serde_json::json!({ "cpid": cpid }), rolled).await
}

#[tokio::test]
#[ignore]
async fn a_change_is_found_by_its_cpid_and_a_reported_merge_is_named() {
    use kascade_cpid::{ChangeContext, Cpid, Outcome};
    let tracer = tracer_of_collector_a("e2e-merger");
    let (first, second) = (
        Cpid::parse(CPID_FIRST).unwrap(),
        Cpid::parse(CPID_SECOND).unwrap(),
    );
    let mut p = tracer.propagation();
    p.observe_context(ChangeContext::new(first))
        .observe_context(ChangeContext::new(second));
    let decision = p.decide();
    assert_eq!(decision.outcome, Outcome::Merged);
    let merged = decision.cpid().unwrap();
    tracer.flush().await;
    assert_eq!(tracer.stats().sent, 1, "{:?}", tracer.stats());

    let note = format!("change {merged} merged from {first}, {second} by e2e-merger");
    let notes_of = |t: &Value| -> Vec<String> {
        t["spans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["tags"].as_array().cloned().unwrap_or_default())
            .filter(|t| t["key"] == "note")
            .filter_map(|t| t["value"].as_str().map(str::to_string))
            .collect()
    };
    let named = |traces: &[Value]| {
        traces.len() == 1
            && notes_of(&traces[0]).contains(&note)
            && traces[0]["spans"].as_array().unwrap().iter().any(|s| {
                s["operationName"]
                    .as_str()
                    .unwrap()
                    .contains("kube-scheduler create binding pods cpid-demo/")
            })
    };
    let traces = ui_search("cascade", serde_json::json!({ "cpid": CPID_FIRST }), named).await;
    let spans = traces[0]["spans"].as_array().unwrap();
    // Every write shown belongs to the first change: the user's create
    // carries it in its annotation, the Pods' writes inherit it by inference.
    for s in spans {
        assert_eq!(
            tag_str(s, "cpid"),
            Some(CPID_FIRST),
            "{}",
            s["operationName"]
        );
    }
    let origin_of = |op: &str| {
        spans
            .iter()
            .filter(|s| s["operationName"].as_str().unwrap().contains(op))
            .map(|s| tag_str(s, "cpid.origin").unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        origin_of("kascade-e2e-admin create deployments cpid-demo/web"),
        ["annotation"]
    );
    let bindings = origin_of("kube-scheduler create binding pods cpid-demo/");
    assert!(!bindings.is_empty() && bindings.iter().all(|o| *o == "inferred"));
    // The trace's id is the CPID: the UI reloads it from any frontend.
    assert_eq!(traces[0]["traceID"], CPID_FIRST.replace('-', ""));
}

/// A change whose writes lie in more object windows than one raw search
/// returns is searched past `--raw-search-limit` through the real raw
/// Jaeger, over both its APIs: its time range split until each part's
/// search holds fewer (Jaeger's search has no offset). A frontend allowed
/// two windows per search shows the same writes as one allowed 500, and no
/// note of a cut.
#[tokio::test]
#[ignore]
async fn a_change_is_searched_past_the_raw_search_limit_in_the_raw_jaeger() {
    use kascade::test_support::frontend::raw::{
        JaegerGrpc, JaegerHttp, JaegerStore, RawStore as _,
    };
    use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
    // Stored, and read as the UI reads it, before the frontends below look.
    ui_search("cascade", serde_json::json!({ "cpid": CPID_FIRST }), |t| {
        t.len() == 1
            && t[0]["spans"].as_array().unwrap().iter().any(|s| {
                s["operationName"]
                    .as_str()
                    .unwrap()
                    .contains("kube-scheduler create binding pods cpid-demo/")
            })
    })
    .await;
    let service = "kascade";
    let timeout = Duration::from_secs(30);
    let stores = || {
        [
            JaegerStore::Grpc(
                JaegerGrpc::connect(
                    &env("JAEGER_REMOTE_STORAGE_URL"),
                    service,
                    timeout,
                    &Default::default(),
                )
                .unwrap(),
            ),
            JaegerStore::Http(JaegerHttp::new(&env("JAEGER_QUERY_URL"), service, timeout)),
        ]
    };
    let now = std::time::SystemTime::now();
    let query = SearchQuery {
        mode: kascade::test_support::frontend::display::Mode::Cascade,
        scope: kascade::test_support::frontend::assemble::Scope::Object,
        all_siblings: false,
        tags: vec![("cpid".into(), CPID_FIRST.into())],
        range: kascade::test_support::frontend::raw::TimeRange::new(
            now - Duration::from_secs(7200),
            now,
        ),
        limit: 1,
    };
    let writes = |t: &kascade::test_support::frontend::AssembledTrace| {
        let mut w: Vec<(String, String)> = t
            .cascades
            .iter()
            .flat_map(|c| c.changes.iter())
            .map(|c| {
                (
                    format!("{:?}", c.span),
                    format!("{} {} {}", c.verb, c.object.resource, c.object.name),
                )
            })
            .collect();
        w.sort();
        w
    };
    for (whole_store, paged_store) in stores().into_iter().zip(stores()) {
        let what = whole_store.describe();
        let frontend = |store, raw_search_limit| {
            Frontend::new(
                std::sync::Arc::new(store),
                FrontendConfig {
                    raw_search_limit,
                    ..FrontendConfig::default()
                },
            )
        };
        let (whole, paged) = (frontend(whole_store, 500), frontend(paged_store, 2));
        // Compared when the whole change read the same before and after the
        // paged read: a kubelet's late status write would otherwise race.
        let mut rounds = 0;
        let (before, paged, after) = loop {
            let before = whole.search(&query).await.unwrap().remove(0);
            let paged = paged.search(&query).await.unwrap().remove(0);
            let after = whole.search(&query).await.unwrap().remove(0);
            rounds += 1;
            if writes(&before) == writes(&after) || rounds == 10 {
                break (before, paged, after);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert_eq!(writes(&before), writes(&after), "{what}: still changing");
        let objects: std::collections::BTreeSet<_> = before
            .cascades
            .iter()
            .flat_map(|c| c.changes.iter())
            .map(|c| (c.object.resource.clone(), c.object.name.clone()))
            .collect();
        assert!(objects.len() > 2, "{what}: the change wrote {objects:?}");
        assert_eq!(writes(&paged), writes(&before), "{what}");
        assert!(
            !paged
                .assembly
                .notes
                .iter()
                .any(|n| n.contains("object windows")),
            "{what}: {:?}",
            paged.assembly.notes
        );
    }
}

#[tokio::test]
#[ignore]
async fn the_cpid_webhook_gives_each_user_change_its_own_cpid_and_kubectl_shows_it() {
    let created = warned_cpid("cpid-webhook-create.err");
    let changed = warned_cpid("cpid-webhook-set-image.err");
    assert_ne!(created, changed, "two changes, two CPIDs");
    let ns = "cpidhook-demo";
    let annotation = "{.metadata.annotations.kascade\\.io/cpid}";
    assert_eq!(
        kubectl(&[
            "get",
            "deployment",
            "web",
            "-n",
            ns,
            "-o",
            &format!("jsonpath={annotation}")
        ]),
        changed
    );
    // The deployment controller copied each rollout's CPID onto its ReplicaSet.
    let rs = kubectl(&[
        "get",
        "replicasets",
        "-n",
        ns,
        "-o",
        &format!("jsonpath={{range .items[*]}}{annotation}{{\"\\n\"}}{{end}}"),
    ]);
    let rs: BTreeSet<&str> = rs.lines().collect();
    assert_eq!(rs, BTreeSet::from([created.as_str(), changed.as_str()]));
    // Searching the image change finds its rollout through the UI tier.
    let traces = rollout_change(&changed, "cpidhook-demo", |_| Ok(())).await;
    for s in traces[0]["spans"].as_array().unwrap() {
        assert_eq!(
            tag_str(s, "cpid"),
            Some(changed.as_str()),
            "{}",
            s["operationName"]
        );
    }
}

#[tokio::test]
#[ignore]
async fn an_instrumented_controller_passes_a_configmap_edits_cpid_on_to_the_rollout() {
    let edit = warned_cpid("config-roller/edit-configmap.err");
    let traces = rollout_change(&edit, "roller-demo", |_| Ok(())).await;
    let spans = traces[0]["spans"].as_array().unwrap();
    let op = |s: &Value| s["operationName"].as_str().unwrap().to_string();
    // One change from the user's edit to the Pods: every write carries it.
    for s in spans {
        assert_eq!(tag_str(s, "cpid"), Some(edit.as_str()), "{}", op(s));
    }
    let edit_span = spans
        .iter()
        .find(|s| op(s).ends_with(" patch configmaps roller-demo/app-config"))
        .expect("the ConfigMap edit");
    assert_eq!(tag_str(edit_span, "cpid.origin"), Some("annotation"));
    let roll = spans
        .iter()
        .find(|s| op(s).ends_with(" patch deployments roller-demo/web"))
        .unwrap();
    assert_eq!(
        tag_str(roll, "cpid.origin"),
        Some("annotation"),
        "the controller stamped it"
    );
    // The chain: edit → roll (no relation says a Deployment reacts to a
    // ConfigMap: the cause is the CPID's) → the new ReplicaSet → its Pods.
    assert_eq!(
        parent_of(roll),
        edit_span["spanID"].as_str(),
        "{}",
        op(roll)
    );
    assert_eq!(tag_str(roll, "cascade.rule"), Some("cpid"));
    let rs = spans
        .iter()
        .find(|s| op(s).contains(" create replicasets roller-demo/web-"))
        .expect("the new ReplicaSet");
    assert_eq!(parent_of(rs), roll["spanID"].as_str(), "{}", op(rs));
    assert!(
        spans
            .iter()
            .any(|s| op(s).contains(" create pods roller-demo/web-")
                && parent_of(s) == rs["spanID"].as_str())
    );
    let pods: Vec<&Value> = spans
        .iter()
        .filter(|s| op(s).contains(" pods roller-demo/"))
        .collect();
    assert!(!pods.is_empty());
    for p in pods {
        assert_eq!(tag_str(p, "cpid.origin"), Some("inferred"), "{}", op(p));
    }
}

#[tokio::test]
#[ignore]
async fn a_controllers_merge_of_two_changes_is_found_from_either() {
    let deployment_edit = warned_cpid("config-roller/edit-deployment.err");
    let configmap_edit = warned_cpid("config-roller/edit-configmap-again.err");
    let merged = std::fs::read_to_string(roller_file("merged.cpid")).unwrap();
    let merged = merged.trim();
    assert_ne!(merged, configmap_edit);
    assert_ne!(merged, deployment_edit);
    let note =
        format!("change {merged} merged from {configmap_edit}, {deployment_edit} by config-roller");
    let has_note = |traces: &[Value]| {
        let notes: Vec<&str> = traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["tags"].as_array().into_iter().flatten())
            .filter(|t| t["key"] == "note")
            .filter_map(|t| t["value"].as_str())
            .collect();
        if notes.contains(&note.as_str()) {
            Ok(())
        } else {
            Err(format!("no note {note:?} among {notes:?}"))
        }
    };
    for searched in [&configmap_edit, &deployment_edit] {
        let traces = rollout_change(searched, "roller-demo", has_note).await;
        let cpids: BTreeSet<&str> = traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| tag_str(s, "cpid"))
            .collect();
        // The searched change's own writes, and the merged rollout's.
        assert!(
            cpids.contains(searched.as_str()) && cpids.contains(merged),
            "{cpids:?}"
        );
        assert!(cpids.len() == 2, "{cpids:?}");
    }
}
