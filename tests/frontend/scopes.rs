//! Assembled trees of the captured scenarios: scopes, display modes,
//! classes, reloads on another replica.

use super::*;

#[tokio::test]
async fn full_tree_of_the_deployment_has_both_replicasets_and_their_pods() {
    let (f, range) = frontend("deployment").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let owned = owned_by_fixture("deployment");
    let replicasets = &owned[&("Deployment".to_string(), "hello".to_string())];
    assert_eq!(replicasets.len(), 2, "the fixture has two ReplicaSets");

    let asm = &t.assembly;
    let root = &asm.nodes[0];
    assert_eq!(root.history.object.resource, "deployments");
    assert_eq!(root.history.object.name, "hello");
    let children: BTreeSet<String> = root
        .children
        .iter()
        .map(|&c| &asm.nodes[c].history.object)
        .filter(|o| o.resource == "replicasets")
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(&children, replicasets);
    for &c in &root.children {
        let rs = &asm.nodes[c];
        let pods: BTreeSet<String> = rs
            .children
            .iter()
            .map(|&p| &asm.nodes[p].history.object)
            .filter(|o| o.resource == "pods")
            .map(|o| o.name.clone())
            .collect();
        assert_eq!(
            pods,
            owned[&("ReplicaSet".to_string(), rs.history.object.name.clone())],
            "pods under {}",
            rs.history.object.name
        );
    }

    // In tracing mode the writes, Events and diffs are logs of the object span.
    let spans = all_spans(&t);
    let root_span = spans
        .iter()
        .find(|(svc, s)| svc == "deployments" && s.parent_span_id.is_empty())
        .map(|(_, s)| s)
        .expect("root span");
    assert_eq!(root_span.name, "default/hello");
    // The fixture's first write of hello is a refused delete, which names no
    // uid; the span shows the uid its create gave it.
    let created_uid = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "deployments"
                && e["objectRef"]["name"] == "hello"
        })
        .expect("hello's create")["responseObject"]["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    for key in ["uid", "k8s.deployment.uid"] {
        assert_eq!(
            string_attr(&root_span.attributes, key),
            Some(created_uid.as_str()),
            "{key}"
        );
    }
    let log = |pred: &dyn Fn(&opentelemetry_proto::tonic::trace::v1::span::Event) -> bool| {
        root_span.events.iter().any(pred)
    };
    assert!(log(&|e| e.name.ends_with("patch scale")
        && string_attr(&e.attributes, "diff")
            .is_some_and(|d| d.contains("spec.replicas: 3 → 5"))));
    assert!(log(
        &|e| e.name.ends_with(" delete") && string_attr(&e.attributes, "snapshot").is_some()
    ));
    assert!(log(&|e| e.name == "event ScalingReplicaSet"));
    let json = serde_json::to_string(&t.resource_spans).unwrap();
    assert!(
        !json.contains("managedFields"),
        "managedFields leaked into a diff"
    );
    assert!(
        !json.contains("kascade.span"),
        "internal attributes are hidden"
    );
}

#[tokio::test]
async fn ancestors_of_a_replicaset_is_the_deployment_with_only_that_replicaset() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    for rs in &owned[&("Deployment".to_string(), "hello".to_string())] {
        let t = search_one(
            &f,
            range,
            Mode::Tracing,
            Scope::Ancestors,
            &[("resource", "replicasets"), ("name", rs)],
        )
        .await;
        let asm = &t.assembly;
        assert_eq!(asm.nodes.len(), 2);
        assert_eq!(asm.nodes[0].history.object.name, "hello");
        assert_eq!(asm.nodes[0].children, vec![1]);
        assert_eq!(&asm.nodes[1].history.object.name, rs);
        assert_eq!(asm.nodes[1].class.as_deref(), Some("owner"));
        assert_eq!(asm.searched, 1);
    }
}

#[tokio::test]
async fn descendants_and_object_scopes() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let rs = owned[&("Deployment".to_string(), "hello".to_string())]
        .iter()
        .next()
        .unwrap()
        .clone();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Descendants,
        &[("resource", "replicasets"), ("name", &rs)],
    )
    .await;
    let asm = &t.assembly;
    assert_eq!(
        asm.nodes[0].history.object.name, rs,
        "the searched RS is the root"
    );
    let pods: BTreeSet<String> = asm
        .nodes
        .iter()
        .filter(|n| n.history.object.resource == "pods")
        .map(|n| n.history.object.name.clone())
        .collect();
    assert_eq!(pods, owned[&("ReplicaSet".to_string(), rs.clone())]);
    assert!(
        asm.nodes
            .iter()
            .all(|n| n.history.object.resource != "deployments"),
        "descendants never climb"
    );

    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Object,
        &[("resource", "replicasets"), ("name", &rs)],
    )
    .await;
    assert_eq!(t.assembly.nodes.len(), 1);
}

#[tokio::test]
async fn display_modes_lay_out_the_same_entries_differently() {
    let (f, range) = frontend("deployment").await;
    let q = [("resource", "deployments"), ("name", "hello")];
    let tracing = search_one(&f, range, Mode::Tracing, Scope::Full, &q).await;
    let entries: usize = tracing
        .assembly
        .nodes
        .iter()
        .map(|n| n.history.entries.len())
        .sum();
    let objects = tracing.assembly.nodes.len();
    assert!(entries > objects);

    let spans = all_spans(&tracing);
    assert_eq!(spans.len(), objects, "tracing: one span per object");
    let logs: usize = spans.iter().map(|(_, s)| s.events.len()).sum();
    assert_eq!(logs, entries, "tracing: every entry is a log");

    let tree = search_one(&f, range, Mode::Tree, Scope::Full, &q).await;
    let spans = all_spans(&tree);
    assert_eq!(
        spans.len(),
        objects + entries,
        "tree: entries are child spans"
    );

    let timeline = search_one(&f, range, Mode::Timeline, Scope::Full, &q).await;
    let spans = all_spans(&timeline);
    assert_eq!(spans.len(), 1 + entries, "timeline: root plus every entry");
    let root = spans
        .iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert!(
        spans
            .iter()
            .filter(|(_, s)| !s.parent_span_id.is_empty())
            .all(|(_, s)| s.parent_span_id == root.1.span_id),
        "timeline: flat under the root"
    );
    let (first, last) = spans.iter().fold((u64::MAX, 0), |(a, b), (_, s)| {
        (a.min(s.start_time_unix_nano), b.max(s.end_time_unix_nano))
    });
    assert_eq!(
        (root.1.start_time_unix_nano, root.1.end_time_unix_nano),
        (first, last)
    );

    let grouped = search_one(&f, range, Mode::Grouped, Scope::Full, &q).await;
    let spans = all_spans(&grouped);
    let source_spans: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "audit" || s.name == "event")
        .collect();
    let logs: usize = source_spans.iter().map(|s| s.events.len()).sum();
    assert_eq!(logs, entries, "grouped: every entry in its source span");
    assert!(source_spans.iter().any(|s| s.name == "event"));

    // Every mode keeps one trace id and parents that exist.
    for t in [&tracing, &tree, &timeline, &grouped] {
        let spans = all_spans(t);
        let ids: HashSet<Vec<u8>> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
        assert_eq!(ids.len(), spans.len(), "span ids are unique");
        for (_, s) in &spans {
            assert_eq!(s.trace_id, t.id.to_vec());
            assert!(s.parent_span_id.is_empty() || ids.contains(&s.parent_span_id));
        }
    }
}

#[tokio::test]
async fn classes_can_be_grouped_under_a_virtual_span() {
    let (f, range) = frontend("deployment").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let group: HashSet<String> = ["node".to_string()].into();
    let rendered = render(&t.assembly, Mode::Tracing, &t.id, &group, 0);
    let spans: Vec<Span> = rendered
        .iter()
        .flat_map(|rs| rs.scope_spans.iter().flat_map(|ss| ss.spans.clone()))
        .collect();
    let virtuals: Vec<&Span> = spans.iter().filter(|s| s.name == "node").collect();
    assert!(!virtuals.is_empty());
    let nodes: Vec<&Span> = spans
        .iter()
        .filter(|s| string_attr(&s.attributes, "resource") == Some("nodes"))
        .collect();
    assert!(!nodes.is_empty());
    for n in nodes {
        assert!(
            virtuals.iter().any(|v| v.span_id == n.parent_span_id),
            "node {} hangs under a virtual 'node' span",
            n.name
        );
    }
}

#[tokio::test]
async fn a_trace_id_reloads_on_a_replica_without_the_cache() {
    let s = Arc::new(store("deployment").await);
    let a = Frontend::new(s.clone(), FrontendConfig::default());
    let b = Frontend::new(s.clone(), FrontendConfig::default());
    let original = hello_tree(&a).await;
    let reloaded = b
        .get(&original.id)
        .await
        .unwrap()
        .expect("decoded and rebuilt");
    assert_eq!(
        serde_json::to_string(&reloaded.resource_spans).unwrap(),
        serde_json::to_string(&original.resource_spans).unwrap()
    );
    assert!(
        b.get(&[9u8; 16]).await.unwrap().is_none(),
        "foreign ids are not found"
    );
}
