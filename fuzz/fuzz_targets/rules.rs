//! Rule files (`rules/*.yaml`, `--rules DIR`): parsed, and when valid applied
//! to real objects from the fixtures (relations and selectors).
#![no_main]

use std::sync::LazyLock;

use kascade::test_support::aggregate::rules::RuleSet;
use kascade::test_support::model::ObjectRef;
use libfuzzer_sys::fuzz_target;
use kascade::test_support::json::Value;

/// Objects the real control plane wrote (responses in the fixtures' audit logs).
static OBJECTS: LazyLock<Vec<(ObjectRef, Value)>> = LazyLock::new(|| {
    let logs = [
        include_str!("../../e2e/fixtures/config/audit.log"),
        include_str!("../../e2e/fixtures/service/audit.log"),
    ];
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for line in logs.iter().flat_map(|l| l.lines()) {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let r = &ev["objectRef"];
        let state = &ev["responseObject"];
        let (Some(resource), Some(name)) =
            (r["resource"].as_str(), state["metadata"]["name"].as_str())
        else {
            continue;
        };
        let obj = ObjectRef::new(
            "fuzz",
            r["apiGroup"].as_str().unwrap_or(""),
            resource,
            r["namespace"].as_str().unwrap_or(""),
            name,
        );
        if seen.insert(obj.clone()) {
            let Ok(state) = kascade::test_support::json::parse(&state.to_string()) else {
                continue;
            };
            out.push((obj, state));
        }
    }
    out
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut set = RuleSet::default();
    match set.add_yaml("fuzz.yaml", text) {
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in errors {
                let _ = e.to_string();
            }
        }
        Ok(()) => {
            for (obj, state) in OBJECTS.iter() {
                let mut out = Vec::new();
                set.relations(obj, state, &mut out);
                let _ = set.selectors(obj, state);
            }
            let _ = set.selector_targets();
        }
    }
});
