//! Admission requests made from audit events captured from the real control
//! plane: the audit event names the same user, operation and objects the
//! apiserver sends the webhook.

use serde_json::{Value, json};

use super::*;

fn fixture(scenario: &str) -> Vec<Value> {
    let path = format!(
        "{}/e2e/fixtures/{scenario}/audit.log",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The admission request of an audited write (`old` = the object before).
fn request(ev: &Value, old: Option<&Value>) -> AdmissionRequest<DynamicObject> {
    let operation = match ev["verb"].as_str().unwrap() {
        "create" => "CREATE",
        "delete" => "DELETE",
        _ => "UPDATE",
    };
    let r = &ev["objectRef"];
    let v = json!({
        "uid": ev["auditID"],
        "kind": {"group": r["apiGroup"].as_str().unwrap_or(""), "version": r["apiVersion"], "kind": "X"},
        "resource": {"group": r["apiGroup"].as_str().unwrap_or(""), "version": r["apiVersion"], "resource": r["resource"]},
        "subResource": r.get("subresource"),
        "name": r["name"].as_str().unwrap_or(""),
        "namespace": r["namespace"],
        "operation": operation,
        "userInfo": ev["user"],
        "object": ev.get("requestObject").filter(|o| o.is_object() && operation != "DELETE")
            .map(|_| ev["responseObject"].clone()),
        "oldObject": old,
        "dryRun": false,
    });
    serde_json::from_value(v).unwrap()
}

fn find<'a>(events: &'a [Value], user: &str, verb: &str, resource: &str) -> &'a Value {
    events
        .iter()
        .find(|e| {
            e["user"]["username"] == user
                && e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].is_null()
        })
        .unwrap_or_else(|| panic!("{user} {verb} {resource}"))
}

/// The object after the webhook's patch.
fn patched(req: &AdmissionRequest<DynamicObject>, resp: &AdmissionResponse) -> Value {
    let mut obj = serde_json::to_value(req.object.as_ref().unwrap()).unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(resp.patch.as_ref().unwrap()).unwrap();
    json_patch::patch(&mut obj, &patch).unwrap();
    obj
}

const ADMIN: &str = "kascade-e2e-admin";

#[test]
fn a_users_create_without_a_cpid_gets_a_fresh_one_and_a_warning_naming_it() {
    let events = fixture("deployment");
    let req = request(find(&events, ADMIN, "create", "deployments"), None);
    let (resp, stamp) = review(&StampPolicy::default(), &req);
    let Stamp::Stamped(cpid) = stamp else {
        panic!("{stamp:?}")
    };
    assert!(resp.allowed);
    let obj = patched(&req, &resp);
    assert_eq!(
        obj["metadata"]["annotations"][CPID_ANNOTATION],
        cpid.to_string()
    );
    assert!(resp.warnings.unwrap()[0].contains(&cpid.to_string()));
}

#[test]
fn a_cpid_the_request_set_is_kept() {
    let events = fixture("cpid-annotated");
    let create = find(&events, ADMIN, "create", "deployments");
    let (resp, stamp) = review(&StampPolicy::default(), &request(create, None));
    assert_eq!(stamp, Stamp::Kept);
    assert!(resp.allowed && resp.patch.is_none());
    // The patch that set the second CPID: differs from the stored one.
    let patch = find(&events, ADMIN, "patch", "deployments");
    let (_, stamp) = review(
        &StampPolicy::default(),
        &request(patch, Some(&create["responseObject"])),
    );
    assert_eq!(stamp, Stamp::Kept);
}

#[test]
fn an_edit_that_sends_the_stored_cpid_back_is_a_new_change() {
    let events = fixture("cpid-annotated");
    let create = find(&events, ADMIN, "create", "deployments");
    // `kubectl edit` sends the whole object back, annotation included; add
    // a stale ancestor list to see it go.
    let mut ev = create.clone();
    ev["verb"] = json!("update");
    ev["responseObject"]["metadata"]["annotations"][ANCESTORS_ANNOTATION] =
        json!(Cpid::new_random().to_string());
    let stored = ev["responseObject"].clone();
    let req = request(&ev, Some(&stored));
    let (resp, stamp) = review(&StampPolicy::default(), &req);
    let Stamp::Stamped(cpid) = stamp else {
        panic!("{stamp:?}")
    };
    let obj = patched(&req, &resp);
    let a = &obj["metadata"]["annotations"];
    assert_eq!(a[CPID_ANNOTATION], cpid.to_string());
    assert!(a.get(ANCESTORS_ANNOTATION).is_none());
    assert_ne!(
        a[CPID_ANNOTATION],
        create["responseObject"]["metadata"]["annotations"][CPID_ANNOTATION]
    );
}

#[test]
fn components_deletes_and_subresources_are_left_alone() {
    let events = fixture("deployment");
    let controller = find(
        &events,
        "system:serviceaccount:kube-system:deployment-controller",
        "create",
        "replicasets",
    );
    let p = StampPolicy::default();
    assert_eq!(review(&p, &request(controller, None)).1, Stamp::Skipped);
    let delete = find(&events, ADMIN, "delete", "deployments");
    assert_eq!(review(&p, &request(delete, None)).1, Stamp::Skipped);
    let status = events
        .iter()
        .find(|e| e["objectRef"]["subresource"] == "status" && e["responseObject"].is_object())
        .unwrap();
    assert_eq!(review(&p, &request(status, None)).1, Stamp::Skipped);
    // A policy that skips nobody stamps the controller's create too.
    let none = StampPolicy::new(&[] as &[&str], &[] as &[&str]).unwrap();
    assert!(matches!(
        review(&none, &request(controller, None)).1,
        Stamp::Stamped(_)
    ));
    let e = StampPolicy::new(&["("], &[] as &[&str]).unwrap_err();
    assert!(e.starts_with("--skip-users \"(\""), "{e}");
}
