//! What a search finds and how its traces are titled, started and marked
//! in error.

use super::*;

#[tokio::test]
async fn full_scope_shows_the_searched_objects_own_subtree() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let uses = pod_uses("deployment");
    // Every ReplicaSet searched: its own Pods under it (not only its sibling's).
    for rs in &owned[&("Deployment".to_string(), "hello".to_string())] {
        let t = search_one(
            &f,
            range,
            Mode::Tracing,
            Scope::Full,
            &[("resource", "replicasets"), ("name", rs)],
        )
        .await;
        let asm = &t.assembly;
        assert_eq!(asm.nodes[0].history.object.name, "hello");
        let pods: BTreeSet<String> = children_of(asm, asm.searched)
            .into_iter()
            .filter(|(r, _)| r == "pods")
            .map(|(_, n)| n)
            .collect();
        assert_eq!(pods, owned[&("ReplicaSet".to_string(), rs.clone())], "{rs}");
    }
    // A Pod searched: its Node and ServiceAccount under it.
    let (pod, (node, sa)) = uses.iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", pod)],
    )
    .await;
    let asm = &t.assembly;
    let below = children_of(asm, asm.searched);
    assert!(below.contains(&("nodes".into(), node.clone())), "{below:?}");
    assert!(
        below.contains(&("serviceaccounts".into(), sa.clone())),
        "{below:?}"
    );
    // And every other Pod shows its own Node too (a shared object under
    // each object that uses it), each copy its own span.
    for (i, n) in asm.nodes.iter().enumerate() {
        if n.history.object.resource != "pods" {
            continue;
        }
        let want = &uses[&n.history.object.name].0;
        assert!(
            children_of(asm, i).contains(&("nodes".into(), want.clone())),
            "{} lacks its node {want}",
            n.history.object.name
        );
    }
    // Copies are leaves: each carries the shared object's entries but not
    // its links (one per user: a Node under 1,000 Pods was copied with its
    // 1,000 links each time, and assembly grew with the square of the Pods).
    let mut copies = 0;
    for n in asm.nodes.iter() {
        let Some(original) = n.copy_of else { continue };
        copies += 1;
        let original = &asm.nodes[original].history;
        assert!(
            n.history.links.is_empty(),
            "{} copied with its links",
            n.history.object
        );
        assert!(
            !original.links.is_empty(),
            "{} has no links",
            original.object
        );
    }
    assert!(copies > 0, "no shared object was shown twice");
    let spans = all_spans(&t);
    let ids: HashSet<Vec<u8>> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");
}

#[tokio::test]
async fn full_scope_of_a_cronjobs_job_shows_the_jobs_pod() {
    let (f, range) = frontend("cronjob").await;
    let owned = owned_by_fixture("cronjob");
    let (job, pods) = owned
        .iter()
        .find(|((kind, _), _)| kind == "Job")
        .map(|((_, n), p)| (n.clone(), p.clone()))
        .unwrap();
    assert!(owned[&("CronJob".to_string(), "tick".to_string())].contains(&job));
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "jobs"), ("name", &job)],
    )
    .await;
    let asm = &t.assembly;
    assert_eq!(
        asm.nodes[0].history.object.name, "tick",
        "the CronJob is the root"
    );
    let got: BTreeSet<String> = children_of(asm, asm.searched)
        .into_iter()
        .filter(|(r, _)| r == "pods")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(got, pods);
    // The result is titled by the Job, not only by its CronJob.
    let root = all_spans(&t)
        .into_iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert_eq!(
        format!("{}: {}", root.0, root.1.name),
        format!("cronjobs: cron-demo/tick ▸ jobs cron-demo/{job}")
    );
}

#[tokio::test]
async fn search_results_are_titled_by_the_searched_object() {
    let (f, range) = frontend("deployment").await;
    let (pod, _) = pod_uses("deployment").into_iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", &pod)],
    )
    .await;
    // The Jaeger UI titles a trace by its root span.
    let root = all_spans(&t)
        .into_iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert_eq!(root.0, "deployments");
    assert!(
        root.1.name.ends_with(&format!("▸ pods default/{pod}")),
        "{}",
        root.1.name
    );
}

#[tokio::test]
async fn a_later_search_shows_later_writes_under_a_new_id() {
    let s = store("deployment").await;
    let (f, range) = (
        Frontend::new(Arc::new(s), FrontendConfig::default()),
        None::<()>,
    );
    let _ = range;
    // The Deployment's writes in the audit log: search once half way, once
    // after the last.
    let writes: Vec<u64> = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| {
            ev["objectRef"]["resource"] == "deployments" && ev["responseStatus"]["code"] == 200
        })
        .map(|ev| received_ns(&ev))
        .collect();
    let (first, last) = (writes[0], *writes.last().unwrap());
    // Whole seconds: the clip end is kept to the second.
    let middle = first.div_ceil(1_000_000_000) * 1_000_000_000;
    assert!(
        middle < last,
        "the fixture's writes span more than a second"
    );
    let query = |end: u64| SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Object,
        all_siblings: false,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: TimeRange::new(from_nanos(first - 60_000_000_000), from_nanos(end)),
        limit: 5,
    };
    let early = f.search(&query(middle)).await.unwrap();
    let late = f.search(&query(last + 1_000_000_000)).await.unwrap();
    assert_ne!(early[0].id, late[0].id);
    let count = |t: &AssembledTrace| t.assembly.nodes[0].history.entries.len();
    assert!(count(&early[0]) < count(&late[0]));
    assert!(
        early[0].assembly.nodes[0]
            .history
            .entries
            .iter()
            .all(|e| e.span.start_time_unix_nano <= middle),
        "nothing after the first search's end"
    );
    // The first id still gives the first trace (another replica, no cache).
    let again = Frontend::new(f.store().clone(), FrontendConfig::default())
        .get(&early[0].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count(&again), count(&early[0]));
}

#[tokio::test]
async fn the_deployment_trace_starts_at_the_first_write_of_its_tree() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let rs: BTreeSet<String> = owned[&("Deployment".to_string(), "hello".to_string())].clone();
    let pods: BTreeSet<String> = rs
        .iter()
        .flat_map(|r| owned[&("ReplicaSet".to_string(), r.clone())].clone())
        .collect();
    let first_write = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| {
            let r = &ev["objectRef"];
            let name = r["name"].as_str().unwrap_or_default();
            match r["resource"].as_str().unwrap_or_default() {
                "deployments" => name == "hello",
                "replicasets" => rs.contains(name),
                "pods" => {
                    pods.contains(name)
                        || ev["responseObject"]["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| pods.contains(n))
                }
                _ => false,
            }
        })
        .map(|ev| received_ns(&ev))
        .min()
        .unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let start = all_spans(&t)
        .iter()
        .map(|(_, s)| s.start_time_unix_nano)
        .min()
        .unwrap();
    assert_eq!(start, first_write);
    assert_eq!(t.assembly.range.unwrap().0, first_write);
}

#[tokio::test]
async fn system_architecture_counts_the_relations_between_resources() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let replicasets = &owned[&("Deployment".to_string(), "hello".to_string())];
    let pods: usize = replicasets
        .iter()
        .map(|rs| owned[&("ReplicaSet".to_string(), rs.clone())].len())
        .sum();
    let counts = f.dependencies(range).await.unwrap();
    let count = |p: &str, c: &str| counts.get(&(p.to_string(), c.to_string())).copied();
    assert_eq!(
        count("deployments", "replicasets"),
        Some(replicasets.len() as u64)
    );
    assert_eq!(count("replicasets", "pods"), Some(pods as u64));
    assert!(
        count("pods", "nodes").is_some_and(|n| n as usize >= pods),
        "{counts:?}"
    );
    assert_eq!(
        count("pods", "deployments"),
        None,
        "children only: {counts:?}"
    );
}

#[tokio::test]
async fn a_stuck_rollout_shows_its_pending_pod_and_the_path_to_it_in_error() {
    let (f, range) = frontend("rollout-stuck").await;
    // The Pod that never got a node, from the audit log: created, never bound.
    let mut created = BTreeSet::new();
    let mut bound = BTreeSet::new();
    for line in common::audit_lines("rollout-stuck") {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let r = &ev["objectRef"];
        if r["resource"] != "pods" {
            continue;
        }
        if r["subresource"] == "binding" {
            bound.insert(r["name"].as_str().unwrap().to_string());
        } else if ev["verb"] == "create"
            && let Some(n) = ev["responseObject"]["metadata"]["name"].as_str()
        {
            created.insert(n.to_string());
        }
    }
    let pending: Vec<&String> = created.difference(&bound).collect();
    assert_eq!(pending.len(), 1, "{created:?} {bound:?}");
    let pending = pending[0];
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "web")],
    )
    .await;
    let errors = spans_in_error(&t);
    let pod = &errors[&format!("pods rollout-demo/{pending}")];
    assert!(pod.contains("Unschedulable"), "{pod}");
    // Its ReplicaSet and the Deployment are in error too; the old
    // ReplicaSet's Pods, which run, are not.
    let owner = owned_by_fixture("rollout-stuck")
        .into_iter()
        .find(|(_, pods)| pods.contains(pending))
        .map(|((_, rs), _)| rs)
        .unwrap();
    assert!(
        errors.contains_key(&format!("replicasets rollout-demo/{owner}")),
        "{errors:?}"
    );
    assert!(
        errors.contains_key("deployments rollout-demo/web"),
        "{errors:?}"
    );
    for bound_pod in &bound {
        assert!(
            !errors.contains_key(&format!("pods rollout-demo/{bound_pod}")),
            "{bound_pod} runs: {errors:?}"
        );
    }
}

#[tokio::test]
async fn a_quota_denied_replicaset_is_in_error_with_the_refused_creates() {
    let (f, range) = frontend("quota").await;
    // The refused creates in the audit log: 403s naming the quota.
    let refused: Vec<String> = common::audit_lines("quota")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| ev["objectRef"]["resource"] == "pods" && ev["responseStatus"]["code"] == 403)
        .map(|ev| {
            ev["responseStatus"]["message"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|m| m.contains("exceeded quota")));
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "capped")],
    )
    .await;
    let errors = spans_in_error(&t);
    let rs = owned_by_fixture("quota")
        .into_keys()
        .find(|(kind, _)| kind == "ReplicaSet")
        .map(|(_, n)| n)
        .unwrap();
    let msg = &errors[&format!("replicasets quota-demo/{rs}")];
    assert!(msg.contains("exceeded quota"), "{msg}");
    assert!(
        errors.contains_key("deployments quota-demo/capped"),
        "{errors:?}"
    );
    // Each refused create is a log of the ReplicaSet's span, as an error.
    let spans = all_spans(&t);
    let rs_span = spans
        .iter()
        .find(|(svc, s)| svc == "replicasets" && s.name.ends_with(&rs))
        .unwrap();
    let refused_logs = rs_span
        .1
        .events
        .iter()
        .filter(|e| {
            string_attr(&e.attributes, "level") == Some("error")
                && string_attr(&e.attributes, "error.message")
                    .is_some_and(|m| m.contains("exceeded quota"))
                && e.name.contains(" create")
        })
        .count();
    assert_eq!(refused_logs, refused.len());
}

#[tokio::test]
async fn clusters_are_read_from_what_is_stored() {
    let (f, range) = frontend("deployment").await;
    assert!(
        f.clusters().is_empty(),
        "nothing assembled, nothing configured"
    );
    f.read_clusters(range).await.unwrap();
    assert_eq!(f.clusters(), vec![CLUSTER.to_string()]);
}
