//! Unit tests of `rules`.

use super::*;
use sonic_rs::json;

#[test]
fn propagations_are_read_with_their_classes_and_checked_field_by_field() {
    let mut set = RuleSet::default();
    set.add_yaml(
        "p.yaml",
        r#"
propagations:
  - name: owned
    relation: owner
    cause: parent
    on: [create, update]
    writes: [create, delete]
    writers: '^system:'
    match: {group: apps, resource: replicasets}
  - name: scheduled
    relation: self
    on: [create]
    writes: [binding]
"#,
    )
    .unwrap();
    let [owned, scheduled] = set.propagations() else {
        panic!("two propagations")
    };
    assert_eq!(
        owned.via,
        Via::Relation {
            class: "owner".into(),
            cause_role: Role::Parent
        }
    );
    assert!(owned.triggered_by(ChangeClass::Update));
    assert!(!owned.triggered_by(ChangeClass::Status));
    let rs = ObjectRef::new("c", "apps", "replicasets", "d", "r");
    let pod = ObjectRef::new("c", "", "pods", "d", "p");
    assert!(owned.explains(&rs, Some("system:x"), ChangeClass::Delete));
    assert!(!owned.explains(&rs, Some("alice"), ChangeClass::Delete));
    assert!(!owned.explains(&rs, Some("system:x"), ChangeClass::Update));
    assert!(!owned.explains(&pod, Some("system:x"), ChangeClass::Create));
    assert!(
        owned.explains(&rs, None, ChangeClass::Create),
        "writer unknown"
    );
    assert_eq!(scheduled.via, Via::SameObject);

    for (text, location, message) in [
        (
            "propagations:\n  - {name: x, relation: owner, on: [create], writes: [create]}",
            "p.yaml: propagation \"x\": cause",
            "parent, child or sibling",
        ),
        (
            "propagations:\n  - {name: x, relation: owner, cause: sibling, on: [create], writes: [create], finished_pods: true}",
            "p.yaml: propagation \"x\": finished_pods",
            "needs `status`",
        ),
        (
            "propagations:\n  - {name: x, relation: self, cause: child, on: [create], writes: [create]}",
            "p.yaml: propagation \"x\": cause",
            "must not be set",
        ),
        (
            "propagations:\n  - {name: x, relation: self, on: [], writes: [create]}",
            "p.yaml: propagation \"x\": on",
            "at least one",
        ),
        (
            "propagations:\n  - {name: x, relation: self, on: [create], writes: [create], writers: '('}",
            "p.yaml: propagation \"x\": writers",
            "regex",
        ),
        (
            "propagations:\n  - {name: owned, relation: self, on: [create], writes: [create]}",
            "p.yaml: propagation \"owned\"",
            "duplicate",
        ),
    ] {
        let errors = set.add_yaml("p.yaml", text).unwrap_err();
        assert_eq!(errors[0].location, location, "{text}");
        assert!(errors[0].message.contains(message), "{}", errors[0].message);
    }
    // An unknown change class names its line.
    let errors = RuleSet::default()
        .add_yaml(
            "q.yaml",
            "propagations:\n  - {name: y, relation: self, on: [created], writes: [create]}",
        )
        .unwrap_err();
    assert!(
        errors[0].location.starts_with("q.yaml:2:"),
        "{}",
        errors[0].location
    );
    assert!(
        errors[0].message.contains("created"),
        "{}",
        errors[0].message
    );
}

const POD_RULES: &str = r#"
rules:
  - name: pod-node
    match: {resource: pods}
    class: node
    role: child
    target: {field: spec.nodeName, resource: nodes, namespaced: false}
  - name: pod-configmap
    match: {resource: pods}
    class: configmap
    role: child
    target: {field: "spec.volumes[*].configMap.name", resource: configmaps}
  - name: slice-service
    match: {group: discovery.k8s.io, resource: endpointslices}
    class: service
    role: parent
    target: {field: 'metadata.labels["kubernetes.io/service-name"]', resource: services}
  - name: prefix
    match: {resource: pods, namespace: "kube-.*"}
    class: static
    role: parent
    target: {nameRegex: "^(?P<name>[a-z]+)-node-\\d+$", resource: nodes, namespaced: false}
  - name: link
    match: {resource: pods}
    class: annotated
    role: parent
    target: {annotation: kascade.io/link}
"#;

fn pod() -> ObjectRef {
    ObjectRef::new("c1", "", "pods", "default", "web-1")
}

#[test]
fn field_rules_find_targets() {
    let mut set = RuleSet::default();
    set.add_yaml("test.yaml", POD_RULES).unwrap();
    let state = json!({"spec": {"nodeName": "n1", "volumes": [
        {"name": "a", "configMap": {"name": "cm1"}}, {"name": "b", "secret": {"secretName": "s"}}]}});
    let mut out = Vec::new();
    set.relations(&pod(), &state, &mut out);
    out.sort();
    let targets: Vec<_> = out
        .iter()
        .map(|r| {
            (
                r.target.resource.as_str(),
                r.target.namespace.as_str(),
                r.target.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        targets,
        vec![("configmaps", "default", "cm1"), ("nodes", "", "n1")]
    );
    assert!(out.iter().all(|r| r.role == Role::Child));
}

/// The one walk of a resource's field paths finds, rule by rule, what
/// each rule's own walk finds: every object the fixtures captured, the
/// bundled rules.
#[test]
fn one_walk_of_shared_paths_finds_what_each_rule_finds_alone() {
    let rules =
        RuleSet::load_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))).unwrap();
    let fixtures = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures"));
    let (mut objects, mut relations, mut several) = (0, 0, 0);
    for dir in std::fs::read_dir(fixtures).unwrap() {
        let log = dir.unwrap().path().join("audit.log");
        let Ok(text) = std::fs::read_to_string(&log) else {
            continue;
        };
        for line in text.lines() {
            let ev: serde_json::Value = serde_json::from_str(line).unwrap();
            let (Some(r), Some(object)) = (ev.get("objectRef"), ev.get("responseObject")) else {
                continue;
            };
            let field = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let obj = ObjectRef::new(
                "c",
                field("apiGroup"),
                field("resource"),
                field("namespace"),
                field("name"),
            );
            let state = crate::json::parse(&object.to_string()).unwrap();
            let mut one_walk = Vec::new();
            rules.relations(&obj, &state, &mut one_walk);
            let mut rule_by_rule = Vec::new();
            let mut rules_finding = 0;
            for rule in rules.rules_for(&obj) {
                let before = rule_by_rule.len();
                rule.apply(&obj, &state, &mut rule_by_rule);
                rules_finding += usize::from(rule_by_rule.len() > before);
            }
            assert_eq!(one_walk, rule_by_rule, "{} in {}", obj, log.display());
            objects += 1;
            relations += one_walk.len();
            several += usize::from(rules_finding > 1);
        }
    }
    assert!(objects > 500 && relations > 500, "{objects} {relations}");
    assert!(several > 100, "objects several rules relate: {several}");
}

/// A key written twice (never by an apiserver, but a webhook body may
/// say anything): the one walk takes the first, as each rule's lookup
/// does, at every level.
#[test]
fn one_walk_takes_the_first_of_a_repeated_key_as_a_lookup_does() {
    let rules =
        RuleSet::load_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))).unwrap();
    let pod = ObjectRef::new("c", "", "pods", "default", "p");
    let state = crate::json::parse(
        r#"{"spec":{"nodeName":"n1","volumes":[{"configMap":{"name":"a","name":"b"}}],
                "nodeName":"n2","volumes":[{"configMap":{"name":"c"}}]},
               "spec":{"nodeName":"n3"}}"#,
    )
    .unwrap();
    let mut one_walk = Vec::new();
    rules.relations(&pod, &state, &mut one_walk);
    let mut rule_by_rule = Vec::new();
    for rule in rules.rules_for(&pod) {
        rule.apply(&pod, &state, &mut rule_by_rule);
    }
    assert_eq!(one_walk, rule_by_rule);
    let mut targets: Vec<&str> = one_walk.iter().map(|r| r.target.name.as_str()).collect();
    targets.sort_unstable();
    assert_eq!(targets, ["a", "n1"]);
}

#[test]
fn quoted_label_keys_name_regex_and_annotations() {
    let mut set = RuleSet::default();
    set.add_yaml("test.yaml", POD_RULES).unwrap();
    let slice = ObjectRef::new(
        "c1",
        "discovery.k8s.io",
        "endpointslices",
        "default",
        "web-abcde",
    );
    let mut out = Vec::new();
    set.relations(
        &slice,
        &json!({"metadata": {"labels": {"kubernetes.io/service-name": "web"}}}),
        &mut out,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].target.resource, "services");
    assert_eq!(out[0].target.name, "web");

    let mut out = Vec::new();
    let sp = ObjectRef::new("c1", "", "pods", "kube-system", "etcd-node-3");
    set.relations(&sp, &json!({}), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].target.name, "etcd");

    let mut out = Vec::new();
    let ann = json!({"metadata": {"annotations": {"kascade.io/link":
        "{\"cluster\":\"a\",\"group\":\"apps\",\"resource\":\"deployments\",\"namespace\":\"x\",\"name\":\"y\"}"}}});
    set.relations(&pod(), &ann, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].target,
        ObjectRef::new("a", "apps", "deployments", "x", "y")
    );
    assert_eq!(out[0].role, Role::Parent);
}

#[test]
fn errors_name_file_rule_and_field() {
    let mut set = RuleSet::default();
    let bad = "rules:\n  - name: r1\n    match: {resource: pods}\n    class: c\n    role: child\n    target: {field: 'spec[0]', resource: nodes}\n";
    let e = set.add_yaml("bad.yaml", bad).unwrap_err();
    let msg = e[0].to_string();
    assert!(
        msg.contains("bad.yaml") && msg.contains("r1") && msg.contains("target.field"),
        "{msg}"
    );

    let typo = "rules:\n  - name: r1\n    match: {resource: pods}\n    clas: c\n";
    let e = set.add_yaml("typo.yaml", typo).unwrap_err();
    let msg = e[0].to_string();
    assert!(msg.starts_with("typo.yaml:4:"), "{msg}");
    assert!(msg.contains("clas"), "{msg}");

    let two = "rules:\n  - name: r1\n    match: {resource: pods}\n    class: c\n    role: child\n    target: {field: a, nameRegex: '(x)', resource: nodes}\n";
    let e = set.add_yaml("two.yaml", two).unwrap_err();
    assert!(e[0].to_string().contains("exactly one"), "{}", e[0]);
}
