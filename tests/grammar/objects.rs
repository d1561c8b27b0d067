//! Objects addressed as kubectl names them, by every subcommand.

use super::*;

#[test]
fn trace_takes_the_object_as_kubectl_names_it_and_as_explain_does() {
    let log = fixture("deployment");
    let expected = stdout_of(&[
        "trace",
        &log,
        "--resource",
        "deployments",
        "--name",
        "hello",
        "--namespace",
        "default",
    ]);
    assert!(expected.contains("deployments default/hello"), "{expected}");
    for resource in [
        "deploy",
        "deployment",
        "Deployment",
        "DEPLOYMENTS",
        "deployments.apps",
        "deploy.apps",
    ] {
        let by_flags = stdout_of(&[
            "trace",
            &log,
            "--resource",
            resource,
            "--name",
            "hello",
            "-n",
            "default",
        ]);
        assert_eq!(by_flags, expected, "--resource {resource}");
        let object = format!("{resource}/hello");
        let by_object = stdout_of(&["trace", &log, "--object", &object, "-n", "default"]);
        assert_eq!(by_object, expected, "--object {object}");
    }
    // Without its namespace, the object is found where it is, as explain
    // finds it.
    assert_eq!(
        stdout_of(&["trace", &log, "--object", "deploy/hello"]),
        expected
    );
    // A name in several namespaces is the user's to choose.
    let e = error_of(&[
        "trace",
        &fixture("rollout-stuck"),
        &fixture("service"),
        "--object",
        "deploy/web",
    ]);
    assert!(
        e.contains("deployments web is in 2 namespaces (rollout-demo, svc-demo): pick one with -n"),
        "{e}"
    );
    // In the wrong namespace, the right one is one flag away.
    let e = error_of(&["trace", &log, "--object", "deploy/hello", "-n", "nothere"]);
    assert!(
        e.contains(
            "no deployments nothere/hello in the audit log (cluster default); there is one with -n default"
        ),
        "{e}"
    );
    // A ReplicaSet the fixture's Deployment created, by its short name.
    let rs = common::created("deployment", "replicasets")
        .into_iter()
        .next()
        .unwrap();
    for object in [
        format!("rs/{rs}"),
        format!("replicasets.apps/{rs}"),
        format!("ReplicaSet/{rs}"),
    ] {
        let text = stdout_of(&["trace", &log, "--object", &object, "-n", "default"]);
        assert!(
            text.contains(&format!("replicasets default/{rs}  [owner]  ◀ searched")),
            "{object}: {text}"
        );
    }
}

#[test]
fn a_resource_of_the_audit_log_resolves_by_its_plural_singular_and_kind() {
    // `ipaddresses.networking.k8s.io` is not among the built-in resources:
    // it resolves because the audit log holds it, as a custom resource would.
    let log = fixture("service");
    let name = common::created("service", "ipaddresses")
        .into_iter()
        .next()
        .unwrap();
    for resource in [
        "ipaddresses",
        "ipaddress",
        "IPAddress",
        "ipaddresses.networking.k8s.io",
    ] {
        let text = stdout_of(&["trace", &log, "--resource", resource, "--name", &name]);
        assert!(
            text.contains(&format!("ipaddresses {name}")),
            "--resource {resource}: {text}"
        );
    }
}

#[test]
fn an_unknown_resource_is_refused_with_the_close_names_by_every_subcommand() {
    let log = fixture("deployment");
    for args in [
        vec!["trace", &log, "--resource", "deplyo", "--name", "hello"],
        vec!["trace", &log, "--object", "deplyo/hello", "-n", "default"],
        vec!["explain", &log, "--object", "deplyo/hello", "-n", "default"],
        vec!["analyze", &log, "--object", "deplyo/hello", "-n", "default"],
    ] {
        let e = error_of(&args);
        assert!(e.contains("unknown resource \"deplyo\""), "{args:?}: {e}");
        assert!(e.contains("did you mean deployments.apps"), "{args:?}: {e}");
    }
    // Close names come from the audit log too.
    let e = error_of(&[
        "trace",
        &fixture("service"),
        "--resource",
        "ipadress",
        "--name",
        "x",
    ]);
    assert!(e.contains("ipaddresses.networking.k8s.io"), "{e}");
}

#[test]
fn analyze_counts_only_the_cascades_of_the_object_it_is_given() {
    let log = fixture("deployment");
    let all: Value =
        serde_json::from_str(&stdout_of(&["analyze", &log, "--format", "json"])).unwrap();
    let pods = common::created("deployment", "pods");
    let replicasets = common::created("deployment", "replicasets");
    assert!(replicasets.len() >= 2, "{replicasets:?}");
    // The rollout's ReplicaSet: its cascades (the rollout's) create its
    // Pods and not the first ReplicaSet's, which the first cascade made.
    let latest = common::audit_lines("deployment")
        .iter()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "replicasets"
                && e["responseStatus"]["code"] == 201
        })
        .map(|e| {
            e["responseObject"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .unwrap();
    for rs in &replicasets {
        let object = format!("rs/{rs}");
        let one: Value = serde_json::from_str(&stdout_of(&[
            "analyze", &log, "--format", "json", "-n", "default", "--object", &object,
        ]))
        .unwrap();
        if *rs == latest {
            let its_pods = pods
                .iter()
                .filter(|p| p.starts_with(&format!("{rs}-")))
                .count();
            assert_eq!(
                edge_count(&one, "replicasets → pods create"),
                its_pods as u64,
                "{object}"
            );
        }
        assert_eq!(edge_count(&one, "deployments → replicasets create"), 1);
        assert!(
            one["changes"].as_u64() < all["changes"].as_u64(),
            "{object}"
        );
        assert!(one["out_of_scope"].as_u64().unwrap() > 0, "{object}");
    }
    assert_eq!(
        edge_count(&all, "replicasets → pods create"),
        pods.len() as u64
    );
    let e = error_of(&["analyze", &log, "-n", "other", "--object", "deploy/hello"]);
    assert!(e.contains("--object"), "{e}");
}
