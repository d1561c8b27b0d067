//! What the readiness rules are tested on: the states the real control
//! plane wrote (e2e/fixtures), and small objects for what no scenario reaches.

use crate::json::{JsonContainerTrait as _, JsonValueMutTrait as _, JsonValueTrait as _, Value};
use sonic_rs::json;

use super::{Status, object_status};

pub(super) fn fixture(scenario: &str, file: &str) -> String {
    let path = format!(
        "{}/e2e/fixtures/{scenario}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The states the apiserver answered writes of one object with, in
/// order (a `Scale` or `Status` answer is not the object).
pub(super) fn responses(scenario: &str, resource: &str, name: &str) -> Vec<Value> {
    fixture(scenario, "audit.log")
        .lines()
        .map(|l| crate::json::parse(l).unwrap())
        .filter(|ev| ev["objectRef"]["resource"] == resource)
        .filter_map(|mut ev| ev.get_mut("responseObject").map(Value::take))
        .filter(|o| o["metadata"]["name"] == name && o["kind"] != "Scale" && o["kind"] != "Status")
        .collect()
}

/// `(watch event type, object)` of one object in a captured watch stream.
pub(super) fn watched(scenario: &str, stream: &str, name: &str) -> Vec<(String, Value)> {
    fixture(scenario, &format!("watch/{stream}.jsonl"))
        .lines()
        .map(|l| crate::json::parse(l).unwrap())
        .filter(|ev| ev["object"]["metadata"]["name"] == name)
        .map(|mut ev| {
            (
                ev["type"].as_str().unwrap().to_string(),
                ev["object"].take(),
            )
        })
        .collect()
}

pub(super) fn status_of(group: &str, resource: &str, state: &Value) -> (Status, String) {
    let s = object_status(group, resource, state)
        .unwrap_or_else(|| panic!("no status for {resource} {state}"));
    (s.status, s.message)
}

pub(super) fn ip(message: &str) -> (Status, String) {
    (Status::InProgress, message.to_string())
}

pub(super) fn cur(message: &str) -> (Status, String) {
    (Status::Current, message.to_string())
}

pub(super) fn int(v: &Value, pointer: &str) -> i64 {
    crate::json::pointer(v, pointer)
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The message of `kind` condition in `state`, as the controller wrote it.
pub(super) fn condition_message(state: &Value, kind: &str) -> String {
    state["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {}", state["status"]))["message"]
        .as_str()
        .unwrap()
        .to_string()
}

// States the captured scenarios do not reach, on small hand-made objects
// (only the fields the rules read, shaped as the controllers write them).

pub(super) fn pod_with(status: Value) -> Value {
    json!({"metadata": {"name": "p", "generation": 1}, "spec": {"nodeName": "n1"}, "status": status})
}
