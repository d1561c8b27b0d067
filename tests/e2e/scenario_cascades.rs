//! Cascades of the scenarios without fixtures (bigobject's megabyte
//! values, crosscluster's second control plane), read through the UI tier.

use super::*;

/// The cascade-mode trace of one object, polled until `ok` holds.
async fn cascade_trace(tags: Value, ok: impl Fn(&[&Value]) -> bool) -> Vec<Value> {
    let roots_ok = |t: &[Value]| {
        t.len() == 1 && {
            let roots: Vec<&Value> = t[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| is_cascade_root(s))
                .collect();
            ok(&roots)
        }
    };
    ui_search("cascade", tags, roots_ok).await
}

#[tokio::test]
#[ignore]
async fn each_write_of_the_big_configmap_is_a_complete_cascade_of_its_own() {
    // No controller reacts to a ConfigMap: its create and three replacements
    // (each a megabyte) are four roots with nothing under them, each
    // complete as soon as written.
    let named = |s: &Value, verb: &str| {
        s["operationName"]
            .as_str()
            .unwrap()
            .ends_with(&format!(" {verb} configmaps big-demo/big"))
    };
    let four = |roots: &[&Value]| {
        roots.iter().filter(|s| named(s, "create")).count() == 1
            && roots.iter().filter(|s| named(s, "update")).count() == 3
    };
    let traces = cascade_trace(
        serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "configmaps", "namespace": "big-demo", "name": "big"}),
        four,
    )
    .await;
    let spans = traces[0]["spans"].as_array().unwrap();
    // The writes (not the span above the four cascades, named by the latest).
    for s in spans
        .iter()
        .filter(|s| tag_str(s, "cascade.count").is_none())
        .filter(|s| named(s, "create") || named(s, "update"))
    {
        assert!(is_cascade_root(s), "{}", s["operationName"]);
        assert_eq!(
            tag_str(s, "cascade.complete"),
            Some("true"),
            "{}",
            s["tags"]
        );
        let id = s["spanID"].as_str().unwrap();
        assert!(
            spans
                .iter()
                .filter(|c| is_kascade_span(&traces[0], c))
                .all(|c| parent_of(c) != Some(id)),
            "nothing is caused by a ConfigMap write: {}",
            s["operationName"]
        );
    }
}

#[tokio::test]
#[ignore]
async fn the_second_clusters_pod_is_a_cascade_of_scheduling_and_kubelet_writes() {
    let create = |s: &&Value| {
        s["operationName"]
            .as_str()
            .unwrap()
            .ends_with(" create pods remote-demo/labeled")
    };
    let complete_create = |roots: &[&Value]| {
        roots
            .iter()
            .any(|s| create(s) && tag_str(s, "cascade.complete") == Some("true"))
    };
    let traces = cascade_trace(
        serde_json::json!({"cluster": env("CLUSTER_B_NAME"), "resource": "pods", "namespace": "remote-demo", "name": "labeled"}),
        complete_create,
    )
    .await;
    let spans = traces[0]["spans"].as_array().unwrap();
    let root = spans
        .iter()
        .find(|s| is_cascade_root(s) && create(s))
        .unwrap();
    let root_id = root["spanID"].as_str().unwrap();
    let under: Vec<&str> = spans
        .iter()
        .filter(|s| {
            parent_of(s) == Some(root_id) || {
                let p = parent_of(s);
                spans.iter().any(|q| {
                    Some(q["spanID"].as_str().unwrap()) == p && parent_of(q) == Some(root_id)
                })
            }
        })
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    assert!(
        under
            .iter()
            .any(|n| n.contains("kube-scheduler create binding pods remote-demo/labeled")),
        "{under:#?}"
    );
    assert!(
        under
            .iter()
            .any(|n| n.contains(" patch status pods remote-demo/labeled")),
        "{under:#?}"
    );
    // The relabel is a user's write: a root of its own, not under the create.
    assert!(
        spans.iter().any(|s| is_cascade_root(s)
            && s["operationName"]
                .as_str()
                .unwrap()
                .ends_with(" patch pods remote-demo/labeled")),
        "{:#?}",
        spans
            .iter()
            .map(|s| s["operationName"].as_str().unwrap())
            .collect::<Vec<_>>()
    );
}
