//! `kascade trace --format json`: the object tree as plain JSON.

use super::*;

#[test]
fn trace_json_is_the_object_tree_with_the_audit_logs_writes_and_events() {
    let log = fixture("deployment");
    let doc: Value = serde_json::from_str(&stdout_of(&[
        "trace",
        &log,
        "--object",
        "deploy/hello",
        "-n",
        "default",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(doc["schema"], "kascade.trace/v1");
    assert!(doc["notes"].is_array());
    let root = &doc["root"];
    assert_eq!(
        (
            &root["group"],
            &root["resource"],
            &root["namespace"],
            &root["name"]
        ),
        (
            &"apps".into(),
            &"deployments".into(),
            &"default".into(),
            &"hello".into()
        )
    );
    assert_eq!(root["searched"], true);
    assert!(root["link_class"].is_null());
    assert_eq!(
        json_writes(root),
        audit_writes("deployment", "deployments", "hello")
    );
    // The created Deployment's uid, as the apiserver answered.
    let uid = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "deployments"
                && e["responseStatus"]["code"] == 201
        })
        .map(|e| e["responseObject"]["metadata"]["uid"].clone())
        .unwrap();
    assert_eq!(root["uid"], uid);
    // Its ReplicaSets below it, owned, each with the Pods it created.
    let children: BTreeSet<String> = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|c| assert_eq!(c["link_class"], "owner"))
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(children, common::created("deployment", "replicasets"));
    let pods = common::created("deployment", "pods");
    for rs in root["children"].as_array().unwrap() {
        let name = rs["name"].as_str().unwrap();
        assert_eq!(rs["searched"], false);
        assert_eq!(
            json_writes(rs),
            audit_writes("deployment", "replicasets", name)
        );
        let its_pods: BTreeSet<&str> = rs["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["resource"] == "pods")
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        let created: BTreeSet<&str> = pods
            .iter()
            .map(String::as_str)
            .filter(|p| p.starts_with(&format!("{name}-")))
            .collect();
        assert_eq!(its_pods, created, "{name}");
        // The controller's Events about it: one SuccessfulCreate per Pod.
        let said: BTreeSet<String> = rs["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["reason"] == "SuccessfulCreate")
            .inspect(|e| {
                assert_eq!(e["type"], "Normal");
                assert_eq!(e["component"], "replicaset-controller");
            })
            .map(|e| e["message"].as_str().unwrap().to_string())
            .collect();
        let expected: BTreeSet<String> = created
            .iter()
            .map(|p| format!("Created pod: {p}"))
            .collect();
        assert_eq!(said, expected, "{name}");
    }
    // Diffs: the ReplicaSets' status.replicas as their controller counted.
    let scaled = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rs| rs["writes"].as_array().unwrap())
        .flat_map(|w| w["diff"].as_array().unwrap())
        .any(|d| d["path"] == "status.replicas" && d["op"].is_string());
    assert!(scaled, "no status.replicas change in {root}");
    // Times are RFC 3339.
    for w in root["writes"].as_array().unwrap() {
        let t = w["time"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(t).is_ok(), "{t}");
    }
}
