//! Secret values never leave the process: they are replaced by a marker before
//! an object is cached, diffed or snapshotted.
//!
//! The marker carries a short keyed hash so a user can still see *that* a value
//! changed. The key is random per process, so the hash of a weak secret cannot
//! be brute-forced offline from exported spans.

use std::hash::{BuildHasher, Hasher};

use regex::Regex;
use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::diff::push_field;

pub const MARKER_PREFIX: &str = "<redacted:";

/// Annotation that holds a client-side applied copy of the whole object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Default extra redaction: env var values whose names look like credentials.
pub const DEFAULT_REDACT_PATHS: &str =
    r"(?i)\.env\[[^\]]*(password|passwd|secret|token|apikey|api_key|credential)[^\]]*\]\.value$";

#[derive(Clone)]
pub struct Redactor {
    paths: Option<Regex>,
    seed: u64,
}

impl Redactor {
    pub fn new(paths: Option<Regex>) -> Self {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self { paths, seed }
    }

    pub fn marker(&self, v: &Value) -> Value {
        let text = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let h = xxh3_64_with_seed(text.as_bytes(), self.seed);
        Value::String(format!("{MARKER_PREFIX}{:08x}>", h >> 32))
    }

    /// Redacts `obj` in place, an object of `group`/`resource`.
    pub fn redact(&self, group: &str, resource: &str, obj: &mut Value) {
        if group.is_empty() && resource == "secrets" {
            self.redact_secret(obj);
        }
        if let Some(re) = &self.paths {
            let mut path = String::new();
            self.redact_paths(re, obj, &mut path);
        }
    }

    fn redact_secret(&self, obj: &mut Value) {
        for field in ["data", "stringData"] {
            if let Some(Value::Object(map)) = obj.get_mut(field) {
                for v in map.values_mut() {
                    *v = self.marker(v);
                }
            }
        }
        if let Some(v) = obj
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            .and_then(|a| a.get_mut(LAST_APPLIED))
        {
            *v = self.marker(v);
        }
    }

    fn redact_paths(&self, re: &Regex, v: &mut Value, path: &mut String) {
        match v {
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    let len = path.len();
                    push_field(path, k);
                    self.redact_paths(re, child, path);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                // Same item naming as diffs, so patterns match diff paths.
                let key = super::diff::list_item_key(items);
                for (i, child) in items.iter_mut().enumerate() {
                    let len = path.len();
                    super::diff::push_item_label(path, child, key, i);
                    self.redact_paths(re, child, path);
                    path.truncate(len);
                }
            }
            Value::Null => {}
            leaf => {
                if re.is_match(path) {
                    *leaf = self.marker(leaf);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_data_and_last_applied_are_redacted() {
        let r = Redactor::new(None);
        let mut s = json!({
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{\"data\":{\"k\":\"c2VjcmV0\"}}"}},
            "data": {"k": "c2VjcmV0"},
            "stringData": {"p": "hunter2"}
        });
        r.redact("", "secrets", &mut s);
        let text = s.to_string();
        assert!(!text.contains("c2VjcmV0"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(s["data"]["k"].as_str().unwrap().starts_with(MARKER_PREFIX));
    }

    #[test]
    fn same_value_same_marker_different_value_different_marker() {
        let r = Redactor::new(None);
        assert_eq!(r.marker(&json!("a")), r.marker(&json!("a")));
        assert_ne!(r.marker(&json!("a")), r.marker(&json!("b")));
    }

    #[test]
    fn path_pattern_redacts_credential_env_values_only() {
        let r = Redactor::new(Some(Regex::new(DEFAULT_REDACT_PATHS).unwrap()));
        let mut pod = json!({"spec": {"containers": [{"name": "app", "env": [
            {"name": "DB_PASSWORD", "value": "pw"}, {"name": "MODE", "value": "fast"}]}]}});
        r.redact("", "pods", &mut pod);
        let env = &pod["spec"]["containers"][0]["env"];
        assert!(env[0]["value"].as_str().unwrap().starts_with(MARKER_PREFIX));
        assert_eq!(env[1]["value"], "fast");
        // ConfigMaps are not Secrets: data stays.
        let mut cm = json!({"data": {"k": "v"}});
        r.redact("", "configmaps", &mut cm);
        assert_eq!(cm["data"]["k"], "v");
    }
}
