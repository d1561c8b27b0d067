//! Label selectors of objects (Service `spec.selector`, workload
//! `spec.selector`), parsed and matched by kube-core's [`Selector`].

use std::collections::BTreeMap;

use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiLabelSelector;
use kube::core::{Selector, SelectorExt};

use super::finder::Step;

/// A Kubernetes label selector: a plain `{key: value}` map (Service,
/// ReplicationController) or a LabelSelector (matchLabels, matchExpressions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Selector);

impl LabelSelector {
    pub(super) fn at(state: &Value, steps: &[Step]) -> Option<Self> {
        let mut cur = state;
        for s in steps {
            match s {
                Step::Field(f) => cur = cur.get(f)?,
                Step::Each => return None,
            }
        }
        Self::from_value(cur)
    }

    /// `None` for an empty or malformed selector: it selects nothing (an
    /// empty Service selector means "no managed endpoints", not "every Pod").
    pub fn from_value(v: &Value) -> Option<Self> {
        let obj = v.as_object()?;
        let selector = if obj.contains_key(&"matchLabels") || obj.contains_key(&"matchExpressions")
        {
            Selector::try_from(sonic_rs::from_value::<ApiLabelSelector>(v).ok()?).ok()?
        } else {
            obj.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.to_string(), v.to_string())))
                .collect()
        };
        (!selector.selects_all()).then_some(Self(selector))
    }

    /// A selector built elsewhere (e.g. parsed from a command line).
    pub fn from_selector(selector: Selector) -> Self {
        Self(selector)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }
}

/// An object's labels (`metadata.labels`; values that are not strings left
/// out); `None` when it has none.
pub(crate) fn labels_of(state: &Value) -> Option<BTreeMap<String, String>> {
    let m = crate::json::pointer(state, "/metadata/labels")?.as_object()?;
    Some(
        m.iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.to_string(), v.to_string())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plain_maps_and_label_selectors_match_like_the_apiserver() {
        let service = LabelSelector::from_value(&json!({"app": "web"})).unwrap();
        assert!(service.matches(&labels(&[("app", "web"), ("pod-template-hash", "x")])));
        assert!(!service.matches(&labels(&[("app", "db")])));

        let workload = LabelSelector::from_value(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        assert!(workload.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!workload.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(!workload.matches(&labels(&[
            ("app", "web"),
            ("tier", "front"),
            ("canary", "1")
        ])));
    }

    #[test]
    fn empty_or_malformed_selectors_select_nothing() {
        assert!(LabelSelector::from_value(&json!({})).is_none());
        assert!(LabelSelector::from_value(&json!({"matchLabels": {}})).is_none());
        assert!(LabelSelector::from_value(&json!("app=web")).is_none());
        let unknown_operator = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert!(LabelSelector::from_value(&unknown_operator).is_none());
        let in_without_values = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        assert!(LabelSelector::from_value(&in_without_values).is_none());
    }
}
