//! Cascades over the fixtures captured from the real control plane: the
//! changes the real processor records, assembled into trees with their
//! completion (`analysis::cascade`), `kascade trace --mode cascade`, and
//! display mode `cascade` of the frontend over the collector's spans.

mod common;

use common::int_attr;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::Redactor;
use kascade::test_support::analysis::cascade::{
    self, Cascade, Completion, change_name, format_duration,
};
use kascade::test_support::frontend::assemble::Scope;
use kascade::test_support::frontend::display::Mode;
use kascade::test_support::frontend::display::cascade::CRITICAL_MARK;
use kascade::test_support::frontend::offline::store_from_audit_lines;
use kascade::test_support::frontend::raw::{MemoryStore, TimeRange, from_nanos, string_attr};
use kascade::test_support::frontend::{AssembledTrace, Frontend, FrontendConfig, SearchQuery};
use kascade::test_support::pipeline::ChangeRecord;
use kascade::test_support::source::audit::AuditFilter;
use kascade::test_support::span_model::attr;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

const CLUSTER: &str = "fixture";

async fn cascades(scenario: &str) -> Vec<Cascade> {
    cascade::build(common::changes_of_lines(common::audit_lines(scenario), CLUSTER).await)
}

/// The last cascade whose root write is named `root` (`<user> <verb>[
/// <sub>] <resource> <ns>/<name>`): a scenario may start by deleting what
/// an earlier run left.
fn rooted_at<'a>(all: &'a [Cascade], root: &str) -> &'a Cascade {
    all.iter()
        .rev()
        .find(|c| change_name(c.root()) == root)
        .unwrap_or_else(|| {
            panic!(
                "no cascade rooted at {root:?} among {:?}",
                all.iter()
                    .map(|c| change_name(c.root()))
                    .collect::<Vec<_>>()
            )
        })
}

fn time(v: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap()
}

/// The fixture's own timestamps of a write: (requestReceived,
/// stageTimestamp) of its ResponseComplete event, found by user, verb,
/// resource, subresource and received time.
fn raw_times(raw: &[Value], c: &ChangeRecord) -> (SystemTime, SystemTime) {
    let found: Vec<_> = raw
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == c.user.as_str()
                && e["verb"] == c.verb.as_str()
                && e["objectRef"]["resource"] == c.object.resource.as_str()
                && e["objectRef"]["subresource"].as_str().unwrap_or_default() == c.subresource
                && time(&e["requestReceivedTimestamp"]) == c.received
        })
        .collect();
    assert_eq!(found.len(), 1, "one audit event for {}", change_name(c));
    (
        time(&found[0]["requestReceivedTimestamp"]),
        time(&found[0]["stageTimestamp"]),
    )
}

fn waiting(c: &Cascade) -> Vec<String> {
    match &c.completion {
        Completion::Waiting(w) => w.iter().map(ToString::to_string).collect(),
        Completion::Complete { at } => panic!("{} complete at {at:?}", change_name(c.root())),
        Completion::NotKnown(w) => panic!("{} not known: {w:?}", change_name(c.root())),
    }
}

const PATCH: &str = "kascade-e2e-admin patch deployments default/hello";

#[tokio::test]
async fn the_image_patch_roots_the_rollout_with_hops_from_the_audit_timestamps() {
    let all = cascades("deployment").await;
    let c = rooted_at(&all, PATCH);
    assert_eq!(c.missing_cause, None);
    let has = |user: &str, verb: &str, sub: &str, resource: &str| {
        c.changes[1..].iter().any(|x| {
            x.user.ends_with(user)
                && x.verb == verb
                && x.subresource == sub
                && x.object.resource == resource
                && x.code < 400
        })
    };
    // The new ReplicaSet, its Pods, their bindings and the kubelet's reports.
    assert!(has(":deployment-controller", "create", "", "replicasets"));
    assert!(has(":replicaset-controller", "create", "", "pods"));
    assert!(has("system:kube-scheduler", "create", "binding", "pods"));
    assert!(has("kwok-kubelet", "patch", "status", "pods"));
    // The old ReplicaSet scaled down and its Pods deleted.
    assert!(has(":deployment-controller", "update", "", "replicasets"));
    assert!(has(":replicaset-controller", "delete", "", "pods"));
    // Every change is under its cause, and each hop is the effect's
    // requestReceived minus the cause's stageTimestamp, both read from the
    // fixture file.
    let raw: Vec<Value> = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut hops = 0;
    for (i, x) in c.changes.iter().enumerate().skip(1) {
        let p = c.parent[i].expect("every change but the root has its cause in the cascade");
        let k = x.cause.as_ref().unwrap();
        assert_eq!(k.span, c.changes[p].span);
        let (received, _) = raw_times(&raw, x);
        let (_, cause_completed) = raw_times(&raw, &c.changes[p]);
        assert_eq!(
            k.hop,
            received.duration_since(cause_completed).unwrap_or_default(),
            "{}",
            change_name(x)
        );
        hops += 1;
    }
    assert!(hops > 40, "{hops} hops");
    // The new ReplicaSet's create comes right under the patch.
    let rs = c.children[0]
        .iter()
        .map(|&i| &c.changes[i])
        .find(|x| x.verb == "create" && x.object.resource == "replicasets")
        .expect("the new ReplicaSet's create under the patch");
    assert_eq!(
        rs.cause.as_ref().unwrap().edge,
        "deployments → replicasets create"
    );
    // Complete when the last object settled (the Deployment available, the
    // old ReplicaSet scaled to 0, the old Pods gone); the critical path ends
    // with the write that ended last.
    let Completion::Complete { at } = c.completion else {
        panic!("{:?}", c.completion)
    };
    let last_end = c.changes.iter().map(|x| x.completed).max().unwrap();
    assert!(at <= last_end && at > c.root().completed);
    assert_eq!(c.critical_path[0], 0);
    assert_eq!(
        c.changes[*c.critical_path.last().unwrap()].completed,
        last_end
    );
    for w in c.critical_path.windows(2) {
        assert_eq!(c.parent[w[1]], Some(w[0]));
    }
    let text = cascade::render_text(std::slice::from_ref(c));
    let (received, _) = raw_times(&raw, rs);
    let (_, patched) = raw_times(&raw, c.root());
    let rs_hop = format_duration(received.duration_since(patched).unwrap());
    for want in [
        format!("cascade 1 of 1: {PATCH}  at "),
        format!(
            "completed after {} (at ",
            format_duration(at.duration_since(c.root().received).unwrap())
        ),
        format!("[deployments → replicasets create, hop {rs_hop}]"),
        "★ critical path".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
}

/// Per scenario with a fixture: the cascade of its main write, complete,
/// or waiting for what the scenario makes it wait for.
#[tokio::test]
async fn every_scenario_cascade_completes_or_says_what_it_waits_for() {
    let complete: &[(&str, &str)] = &[
        (
            "deployment",
            "kascade-e2e-admin create deployments default/hello",
        ),
        (
            "deployment",
            "kascade-e2e-admin delete deployments default/hello",
        ),
        ("service", "kascade-e2e-admin create services svc-demo/web"),
        (
            "service",
            "kascade-e2e-admin create deployments svc-demo/web",
        ),
        ("job", "kascade-e2e-admin create jobs job-demo/pi"),
        (
            "config",
            "kascade-e2e-admin create deployments config-demo/app",
        ),
        (
            "config",
            "kascade-e2e-admin create pods config-demo/config-pod",
        ),
        (
            "statefulset",
            "kascade-e2e-admin create statefulsets sts-demo/db",
        ),
        (
            "statefulset",
            "kascade-e2e-admin patch scale statefulsets sts-demo/db",
        ),
        (
            "volumes",
            "kascade-e2e-admin create statefulsets vol-demo/data",
        ),
        (
            "crosscluster",
            "kascade-e2e-admin create pods remote-demo/labeled",
        ),
    ];
    let mut by_scenario: HashMap<&str, Vec<Cascade>> = HashMap::new();
    for (scenario, root) in complete {
        if !by_scenario.contains_key(scenario) {
            by_scenario.insert(scenario, cascades(scenario).await);
        }
        let c = rooted_at(&by_scenario[scenario], root);
        assert!(
            c.completion.is_complete(),
            "{scenario}: {root}: {:?}",
            c.completion
        );
        assert!(c.changes.len() > 1, "{scenario}: {root} caused nothing");
    }
    // The CronJob's Jobs are made by its schedule, not by the CronJob's
    // create: each roots a cascade of its own, named by its timer, through
    // its Pod to the Job's completion.
    let cron = cascades("cronjob").await;
    let scheduled: Vec<&Cascade> = cron
        .iter()
        .filter(|c| c.root().object.resource == "jobs" && c.root().verb == "create")
        .collect();
    assert!(!scheduled.is_empty());
    for c in scheduled {
        assert_eq!(c.root().timer.as_deref(), Some("cronjob-schedule"));
        assert!(c.root().cause.is_none());
        assert!(c.completion.is_complete(), "{:?}", c.completion);
        assert!(c.changes.iter().any(|x| x.object.resource == "pods"));
    }
    let create = rooted_at(&cron, "kascade-e2e-admin create cronjobs cron-demo/tick");
    assert!(
        create.changes.iter().all(|x| x.object.resource != "jobs"),
        "the CronJob's create did not make its Jobs"
    );

    // The Job's Pod ran to Succeeded: the Job is Complete after it.
    let job = rooted_at(
        &by_scenario["job"],
        "kascade-e2e-admin create jobs job-demo/pi",
    );
    assert!(job.changes.iter().any(|x| x.object.resource == "pods"));
    assert!(job.duration().unwrap() > Duration::from_secs(1));

    // No controller reacts to a ConfigMap: each write of the big one (a
    // megabyte value, created then replaced three times) is a complete
    // cascade of its own, and so is the relabel of the crosscluster Pod.
    let big = cascades("bigobject").await;
    let writes: Vec<&Cascade> = big
        .iter()
        .filter(|c| change_name(c.root()).ends_with(" configmaps big-demo/big"))
        .collect();
    assert_eq!(
        writes.len(),
        4,
        "{:?}",
        big.iter()
            .map(|c| change_name(c.root()))
            .collect::<Vec<_>>()
    );
    for c in writes {
        assert_eq!(c.changes.len(), 1, "{}", change_name(c.root()));
        assert!(c.completion.is_complete());
    }
    let relabel = rooted_at(
        &cascades("crosscluster").await,
        "kascade-e2e-admin patch pods remote-demo/labeled",
    )
    .completion
    .clone();
    assert!(relabel.is_complete(), "{relabel:?}");

    let incomplete: &[(&str, &str, &[&str])] = &[
        (
            "unschedulable",
            "kascade-e2e-admin create pods sched-demo/stuck",
            &["pods sched-demo/stuck Failed (Unschedulable: 0/3 nodes are available"],
        ),
        (
            "rollout-stuck",
            "kascade-e2e-admin patch deployments rollout-demo/web",
            &[
                "deployments rollout-demo/web InProgress",
                "Failed (Unschedulable: ",
            ],
        ),
        // The progress deadline is a timer's cascade of its own, not the
        // last hop of the patch's.
        (
            "rollout-stuck",
            "system:serviceaccount:kube-system:deployment-controller update status deployments rollout-demo/web",
            &["deployments rollout-demo/web Failed (ProgressDeadlineExceeded: "],
        ),
        (
            "quota",
            "kascade-e2e-admin create deployments quota-demo/capped",
            &[
                "deployments quota-demo/capped Failed (FailedCreate: ",
                "exceeded quota: pods",
            ],
        ),
        (
            "job-failed",
            "kascade-e2e-admin create jobs jobfail-demo/migrate",
            &["jobs jobfail-demo/migrate Failed (BackoffLimitExceeded: "],
        ),
        (
            "pvc-pending",
            "kascade-e2e-admin create persistentvolumeclaims pvc-demo/data",
            &["persistentvolumeclaims pvc-demo/data InProgress (Pending"],
        ),
        (
            "pvc-pending",
            "kascade-e2e-admin create pods pvc-demo/db",
            &["pods pvc-demo/db Failed (Unschedulable: "],
        ),
        (
            "finalizer-blocked",
            "kascade-e2e-admin delete deployments fin-demo/held",
            &[
                "deployments fin-demo/held Terminating (deletion requested, waiting for finalizers: kascade.io/hold)",
            ],
        ),
    ];
    for (scenario, root, wants) in incomplete {
        let all = cascades(scenario).await;
        let c = rooted_at(&all, root);
        let w = waiting(c).join("; ");
        for want in *wants {
            assert!(
                w.contains(want),
                "{scenario}: waiting for {w}, not {want:?}"
            );
        }
        let text = cascade::render_text(std::slice::from_ref(c));
        assert!(text.contains("not complete: waiting for "), "{text}");
    }
}

async fn frontend(scenario: &str) -> (Frontend<MemoryStore>, TimeRange) {
    let (store, errors) = store_from_audit_lines(
        common::audit_lines(scenario),
        CLUSTER,
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let (a, b) = store.time_span().unwrap();
    (
        Frontend::new(Arc::new(store), FrontendConfig::default()),
        TimeRange::new(from_nanos(a), from_nanos(b)),
    )
}

async fn search(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    t: &[(&str, &str)],
) -> Arc<AssembledTrace> {
    let found = f
        .search(&SearchQuery {
            mode: Mode::Cascade,
            scope: Scope::Full,
            all_siblings: false,
            tags: t
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            range,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{t:?}");
    found[0].clone()
}

fn spans(t: &AssembledTrace) -> Vec<(String, Span)> {
    t.resource_spans
        .iter()
        .flat_map(|rs| {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default()
                .to_string();
            rs.scope_spans
                .iter()
                .flat_map(|ss| ss.spans.clone())
                .map(move |s| (service.clone(), s))
        })
        .collect()
}

#[tokio::test]
async fn display_mode_cascade_lays_out_the_patch_as_a_tree_of_writes() {
    let (f, range) = frontend("deployment").await;
    let t = search(
        &f,
        range,
        &[
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ],
    )
    .await;
    let all = spans(&t);
    let by_id: HashMap<Vec<u8>, &Span> = all.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
    // The cascades hang under one span, the trace's only root, named by
    // the latest cascade (none failed).
    let tops: Vec<&Span> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(
        tops.len(),
        1,
        "{:?}",
        tops.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let top = tops[0];
    assert!(
        top.name.starts_with("default/hello: ") && top.name.contains(" cascades, latest: "),
        "{}",
        top.name
    );
    assert!(top.status.is_none(), "{:?}", top.status);
    let root = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.parent_span_id == top.span_id && s.name.ends_with(PATCH))
        .expect("the image patch roots a cascade under the top span");
    assert_eq!(
        string_attr(&root.attributes, "cascade.complete"),
        Some("true")
    );
    let completion = string_attr(&root.attributes, "cascade.completion").unwrap();
    // The same as offline: the frontend read the writes back from the
    // collector's spans.
    let offline = cascades("deployment").await;
    let c = rooted_at(&offline, PATCH);
    assert_eq!(completion, format_duration(c.duration().unwrap()));
    // Every write of the cascade is a span below the root; each child
    // starts when its cause's response completed and ends with its own.
    let mut below = 0;
    for (service, s) in &all {
        // Below the patch's root (which is below the top span).
        let mut at = s;
        let mut under_root = false;
        while let Some(p) = by_id.get(&at.parent_span_id) {
            under_root |= p.span_id == root.span_id;
            at = p;
        }
        if !under_root {
            continue;
        }
        below += 1;
        let parent = by_id[&s.parent_span_id];
        // A retry of a refused write starts with its own request: the
        // wait before it is its writer's back-off.
        let starts_at = if int_attr(s, "cascade.attempt").is_some() {
            "request.received"
        } else {
            "response.completed"
        };
        let from = if starts_at == "request.received" {
            s
        } else {
            parent
        };
        let start =
            humantime::parse_rfc3339_weak(string_attr(&from.attributes, starts_at).unwrap())
                .unwrap();
        assert_eq!(
            from_nanos(s.start_time_unix_nano),
            start
                .min(from_nanos(s.end_time_unix_nano))
                .max(from_nanos(parent.start_time_unix_nano))
        );
        assert!(s.end_time_unix_nano <= parent.end_time_unix_nano);
        assert_eq!(
            string_attr(&s.attributes, "resource"),
            Some(service.as_str())
        );
        assert!(string_attr(&s.attributes, "cascade.edge").is_some());
    }
    assert_eq!(below, c.changes.len() - 1);
    // The critical path is marked in the name and as an attribute.
    let critical: Vec<_> = all
        .iter()
        .filter(|(_, s)| string_attr(&s.attributes, "cascade.critical_path") == Some("true"))
        .collect();
    assert!(critical.len() >= c.critical_path.len());
    assert!(critical.iter().all(|(_, s)| s.name.starts_with("★ ")));

    // Searching one of the new Pods finds the same cascade.
    let pod = c
        .changes
        .iter()
        .find(|x| x.object.resource == "pods" && x.verb == "create" && x.subresource.is_empty())
        .unwrap();
    let t = search(
        &f,
        range,
        &[
            ("resource", "pods"),
            ("namespace", "default"),
            ("name", &pod.object.name),
        ],
    )
    .await;
    let pod_spans = spans(&t);
    let roots: HashSet<&Vec<u8>> = pod_spans
        .iter()
        .filter(|(_, s)| s.parent_span_id.is_empty())
        .map(|(_, s)| &s.span_id)
        .collect();
    assert!(
        pod_spans.iter().any(|(_, s)| {
            (s.parent_span_id.is_empty() || roots.contains(&s.parent_span_id))
                && s.name.ends_with(PATCH)
        }),
        "the Pod's trace holds the patch's cascade"
    );
    assert!(t.cascades.iter().any(|x| change_name(x.root()) == PATCH));
}

#[tokio::test]
async fn an_incomplete_cascade_names_what_it_waits_for_on_its_root_span() {
    let (f, range) = frontend("unschedulable").await;
    let t = search(&f, range, &[("resource", "pods"), ("name", "stuck")]).await;
    let root = spans(&t)
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.name.ends_with("create pods sched-demo/stuck"))
        .expect("root span");
    assert_eq!(
        string_attr(&root.attributes, "cascade.complete"),
        Some("false")
    );
    let waiting = string_attr(&root.attributes, "cascade.waiting_for").unwrap();
    assert!(
        waiting.starts_with("pods sched-demo/stuck Failed (Unschedulable: "),
        "{waiting}"
    );
    assert_eq!(root.status.as_ref().unwrap().code, 2);
}

#[test]
fn kascade_trace_mode_cascade_prints_the_tree_and_its_completion() {
    let trace = |format: &str| {
        common::succeeded(
            common::kascade()
                .args(["trace", "--resource", "deployments", "--namespace"])
                .args(["default", "--name", "hello", "--mode", "cascade"])
                .args(["--format", format])
                .arg(common::fixture_path("deployment", "audit.log")),
        )
    };
    let out = trace("text");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!(": {PATCH}  at ")), "{text}");
    assert!(text.contains("completed after "), "{text}");
    assert!(
        text.contains("[deployments → replicasets create, hop "),
        "{text}"
    );
    assert!(text.contains("[replicasets → pods create, hop "), "{text}");
    assert!(text.contains("[pods binding, hop "), "{text}");
    assert!(text.contains("[pods → Running, hop "), "{text}");
    assert!(text.contains("[replicasets → pods delete, hop "), "{text}");
    assert!(text.contains("★ critical path"), "{text}");

    let out = trace("otlp-json");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["resourceSpans"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rs| rs["scopeSpans"][0]["spans"].as_array().unwrap())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.iter().any(|n| n.ends_with(PATCH)), "{names:?}");
}

/// (parent span, resource, verb, subresource) of a write's span: the level
/// it belongs to.
fn level_of(s: &Span) -> (Vec<u8>, String, String, String) {
    let a = |k| string_attr(&s.attributes, k).unwrap_or("").to_string();
    (
        s.parent_span_id.clone(),
        a(attr::RESOURCE),
        a(attr::AUDIT_VERB),
        a(attr::AUDIT_SUBRESOURCE),
    )
}

/// Beyond `max_siblings` writes of one verb on one resource caused by one
/// write, display mode `cascade` shows the critical path and the latest to
/// settle with what they caused, and one span per level names the rest:
/// every write of the whole trace is shown as it is there, named in a
/// summary's logs, or counted there as caused by one of those; a Pod
/// searched for has its writes shown; the choice travels in the trace id.
#[tokio::test]
async fn display_mode_cascade_summarises_a_wide_level() {
    const MAX: usize = 20;
    let store =
        Arc::new(common::raw_store_of_lines(common::deployment_with_pods(120), CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(from_nanos(a), from_nanos(b));
    let config = FrontendConfig {
        max_siblings: MAX,
        ..FrontendConfig::default()
    };
    let f = Frontend::new(store.clone(), config.clone());
    let query = |tags: &[(&str, &str)], all_siblings| SearchQuery {
        mode: Mode::Cascade,
        scope: Scope::Full,
        all_siblings,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        range,
        limit: 1,
    };
    let deployment = [
        ("resource", "deployments"),
        ("namespace", "default"),
        ("name", "hello"),
    ];
    let whole = f.search(&query(&deployment, true)).await.unwrap().remove(0);
    assert_eq!(f.metrics().summarised.get(), 0, "all shown");
    let part = f
        .search(&query(&deployment, false))
        .await
        .unwrap()
        .remove(0);
    assert_ne!(whole.id, part.id);
    let whole_spans: Vec<Span> = spans(&whole).into_iter().map(|(_, s)| s).collect();
    let part_spans: Vec<Span> = spans(&part).into_iter().map(|(_, s)| s).collect();
    let by_id: HashMap<&[u8], &Span> = whole_spans
        .iter()
        .map(|s| (s.span_id.as_slice(), s))
        .collect();
    let (summaries, shown): (Vec<&Span>, Vec<&Span>) = part_spans
        .iter()
        .partition(|s| int_attr(s, "writes.not_shown").is_some());
    assert!(
        !summaries.is_empty(),
        "the 120 Pod creates are a wide level"
    );

    // What is shown is shown as in the whole trace; nothing lacks a parent.
    let part_ids: std::collections::HashSet<&[u8]> =
        part_spans.iter().map(|s| s.span_id.as_slice()).collect();
    for s in &shown {
        let w = by_id
            .get(s.span_id.as_slice())
            .unwrap_or_else(|| panic!("{} is a write of the whole trace", s.name));
        assert_eq!(
            (
                &s.name,
                &s.parent_span_id,
                s.start_time_unix_nano,
                s.end_time_unix_nano
            ),
            (
                &w.name,
                &w.parent_span_id,
                w.start_time_unix_nano,
                w.end_time_unix_nano
            )
        );
    }
    for s in &part_spans {
        assert!(
            s.parent_span_id.is_empty() || part_ids.contains(s.parent_span_id.as_slice()),
            "{} has no parent in the trace",
            s.name
        );
    }
    // The critical path is shown whole.
    for s in whole_spans
        .iter()
        .filter(|s| s.name.starts_with(CRITICAL_MARK))
    {
        assert!(
            part_ids.contains(s.span_id.as_slice()),
            "{} is shown",
            s.name
        );
    }
    // At most MAX shown per level.
    let mut per_level: HashMap<_, usize> = HashMap::new();
    for s in &shown {
        *per_level.entry(level_of(s)).or_default() += 1;
    }
    assert!(per_level.values().all(|&n| n <= MAX), "{per_level:?}");

    // Each summary names exactly its level's writes not shown, counts what
    // they caused, and lies within its parent.
    let below = |root: &Span| {
        let mut n = 0;
        let mut stack = vec![root.span_id.clone()];
        while let Some(id) = stack.pop() {
            for c in whole_spans.iter().filter(|c| c.parent_span_id == id) {
                n += 1;
                stack.push(c.span_id.clone());
            }
        }
        n
    };
    let mut accounted = shown.len();
    for sum in &summaries {
        let level: Vec<&Span> = whole_spans
            .iter()
            .filter(|s| level_of(s) == level_of(sum))
            .collect();
        let (level_shown, level_hidden): (Vec<&Span>, Vec<&Span>) = level
            .iter()
            .partition(|s| part_ids.contains(s.span_id.as_slice()));
        assert_eq!(level_shown.len(), MAX, "{}", sum.name);
        let hidden_names: std::collections::BTreeSet<&str> =
            level_hidden.iter().map(|s| s.name.as_str()).collect();
        let logged: std::collections::BTreeSet<&str> =
            sum.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(logged, hidden_names, "{}", sum.name);
        assert_eq!(sum.events.len(), level_hidden.len());
        let (verb, resource) = (&level_of(sum).2, &level_of(sum).1);
        assert_eq!(
            sum.name,
            format!("{} more {verb} {resource}", level_hidden.len())
        );
        assert_eq!(
            int_attr(sum, "writes.not_shown"),
            Some(level_hidden.len() as i64)
        );
        assert_eq!(int_attr(sum, "writes.shown"), Some(MAX as i64));
        let caused: usize = level_hidden.iter().map(|s| below(s)).sum();
        assert_eq!(int_attr(sum, "writes.below_not_shown"), Some(caused as i64));
        accounted += level_hidden.len() + caused;
        // The latest to settle are shown (besides the critical path).
        let earliest_shown = level_shown
            .iter()
            .map(|s| s.end_time_unix_nano)
            .min()
            .unwrap();
        let latest_hidden = level_hidden
            .iter()
            .map(|s| s.end_time_unix_nano)
            .max()
            .unwrap();
        assert!(earliest_shown >= latest_hidden, "{}", sum.name);
        let parent = by_id[sum.parent_span_id.as_slice()];
        assert!(
            sum.start_time_unix_nano >= parent.start_time_unix_nano
                && sum.end_time_unix_nano <= parent.end_time_unix_nano,
            "{} within its parent",
            sum.name
        );
    }
    assert_eq!(accounted, whole_spans.len(), "every write accounted for");
    let not_shown: i64 = summaries
        .iter()
        .filter_map(|s| int_attr(s, "writes.not_shown"))
        .sum();
    assert_eq!(f.metrics().summarised.get(), not_shown as u64);
    assert!(part_spans.len() < whole_spans.len() / 2);

    // A Pod whose create the Deployment's trace summarised: searched for,
    // its writes are shown.
    let hidden_create = summaries
        .iter()
        .flat_map(|s| &s.events)
        .map(|e| e.name.as_str())
        .find(|n| n.contains(" create pods default/"))
        .expect("a Pod create not shown");
    let pod = hidden_create.rsplit('/').next().unwrap();
    let t = f
        .search(&query(
            &[
                ("resource", "pods"),
                ("namespace", "default"),
                ("name", pod),
            ],
            false,
        ))
        .await
        .unwrap()
        .remove(0);
    let names: Vec<String> = spans(&t).into_iter().map(|(_, s)| s.name).collect();
    assert!(
        names
            .iter()
            .any(|n| n.trim_start_matches(CRITICAL_MARK) == hidden_create),
        "{hidden_create} among {names:?}"
    );

    // Reloaded by id on a replica without the cache: the same either way.
    common::assert_rebuilt_alike(&Frontend::new(store.clone(), config), &[&whole, &part]).await;
}

/// A summarised level's failures stay in sight: the quota scenario's
/// refused Pod creates beyond the one shown make the summary span an error,
/// counted, each named in a log with the apiserver's refusal.
#[tokio::test]
async fn a_summarised_cascade_level_keeps_its_failures_in_sight() {
    let store = Arc::new(common::raw_store_of_lines(common::audit_lines("quota"), CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let f = Frontend::new(
        store.clone(),
        FrontendConfig {
            max_siblings: 1,
            ..FrontendConfig::default()
        },
    );
    let t = f
        .search(&SearchQuery {
            mode: Mode::Cascade,
            scope: Scope::Full,
            all_siblings: false,
            tags: [
                ("resource", "deployments"),
                ("namespace", "quota-demo"),
                ("name", "capped"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            range: TimeRange::new(from_nanos(a), from_nanos(b)),
            limit: 1,
        })
        .await
        .unwrap()
        .remove(0);
    let all = spans(&t);
    // Refused creates are named by what they tried to create (Pods, by
    // their generateName), at the level of the ReplicaSet's other Pod
    // creates: the one shown is the accepted create on the critical path.
    let refused: Vec<&Span> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| int_attr(s, attr::AUDIT_CODE) == Some(403))
        .collect();
    assert!(refused.is_empty(), "the refused creates are summarised");
    let shown = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| {
            s.name.contains("create pods quota-demo/capped-")
                && int_attr(s, attr::AUDIT_CODE) == Some(201)
        })
        .expect("the accepted Pod create shown");
    let summary = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.parent_span_id == shown.parent_span_id && s.name.ends_with(" more create pods"))
        .expect("the refused creates summarised");
    let failed = int_attr(summary, "writes.failed").unwrap();
    assert_eq!(failed, int_attr(summary, "writes.not_shown").unwrap());
    assert!(failed >= 2, "{failed}");
    assert_eq!(summary.status.as_ref().map(|s| s.code), Some(2), "in error");
    for e in &summary.events {
        let error = string_attr(&e.attributes, "error").unwrap_or_default();
        assert!(error.contains("exceeded quota"), "{}: {error:?}", e.name);
    }
}

/// A rollout whose writes lie in more object windows than
/// `--raw-search-limit` still shows every write on its own Pods: those are
/// taken from the assembled tree, only other objects' windows come from the
/// capped raw search, and a note says that cap was reached.
#[tokio::test]
async fn a_cascade_wider_than_the_raw_search_limit_shows_every_write_of_its_tree() {
    const PODS: usize = 120;
    let lines = common::deployment_with_pods(PODS);
    // The Pods the apiserver created, read from the audit log itself.
    let created: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            let created = v["stage"] == "ResponseComplete"
                && v["verb"] == "create"
                && v["objectRef"]["resource"] == "pods"
                && v["objectRef"].get("subresource").is_none()
                && v["responseStatus"]["code"] == 201;
            created.then(|| {
                v["responseObject"]["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
            })?
        })
        .collect();
    assert!(created.len() > PODS, "{}", created.len());
    let store = Arc::new(common::raw_store_of_lines(lines, CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(from_nanos(a), from_nanos(b));
    let query = SearchQuery {
        mode: Mode::Cascade,
        scope: Scope::Full,
        all_siblings: true,
        tags: [
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        range,
        limit: 1,
    };
    let capped = Frontend::new(
        store.clone(),
        FrontendConfig {
            raw_search_limit: 30,
            ..FrontendConfig::default()
        },
    );
    let trace = capped.search(&query).await.unwrap().remove(0);
    let all = spans(&trace);
    let pod_creates: std::collections::BTreeSet<String> = all
        .iter()
        .filter_map(|(_, s)| {
            let (_, name) = s.name.split_once(" create pods default/")?;
            Some(name.to_string())
        })
        .collect();
    assert_eq!(pod_creates, created);
    let notes: Vec<&str> = all
        .iter()
        .flat_map(|(_, s)| s.attributes.iter())
        .filter_map(|kv| string_attr(std::slice::from_ref(kv), "note"))
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("more than 30 object windows (--raw-search-limit)")),
        "{notes:?}"
    );
    // The same writes as with a search limit above the cascade's width.
    let uncapped = Frontend::new(
        store.clone(),
        FrontendConfig {
            raw_search_limit: 10 * PODS,
            ..FrontendConfig::default()
        },
    );
    let names = |t: &AssembledTrace| {
        let mut v: Vec<(Vec<u8>, String)> = spans(t)
            .into_iter()
            .map(|(_, s)| (s.span_id, s.name))
            .collect();
        v.sort();
        v
    };
    let whole = uncapped.search(&query).await.unwrap().remove(0);
    assert_eq!(names(&trace), names(&whole));
}
