//! How a rule file is written (`rules/*.yaml`) and how one rule is checked
//! and compiled; errors name the file, the rule and the field.

use std::collections::HashMap;

use regex::Regex;
use serde::Deserialize;

use super::finder::{Finder, parse_field_path};
use super::{Role, Rule, RuleError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleFile {
    #[serde(default)]
    pub(super) rules: Vec<RuleSpec>,
    /// Which relations carry changes (`propagation.rs`).
    #[serde(default)]
    pub(super) propagations: Vec<super::propagation::PropagationSpec>,
    /// Writes a clock makes (`timer.rs`).
    #[serde(default)]
    pub(super) timers: Vec<super::timer::TimerSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleSpec {
    pub(super) name: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "match")]
    matcher: MatchSpec,
    class: String,
    role: Role,
    target: TargetSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchSpec {
    #[serde(default)]
    group: String,
    /// Plural resource name, or `*` for every resource.
    resource: String,
    /// Regex the object's namespace must match.
    #[serde(default)]
    namespace: Option<String>,
    /// Label key → regex the label value must match.
    #[serde(default)]
    labels: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TargetSpec {
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    name_regex: Option<String>,
    #[serde(default)]
    annotation: Option<String>,
    /// Field path to a label selector (a `{key: value}` map, or a
    /// LabelSelector with matchLabels/matchExpressions) that picks targets.
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    /// Whether the target lives in the object's namespace (default) or is cluster-scoped.
    #[serde(default = "yes")]
    namespaced: bool,
    /// With `field`: the field path that names the target's namespace (a
    /// cluster-scoped object naming a namespaced one, e.g. a PV's claimRef).
    #[serde(default)]
    namespace_field: Option<String>,
}

fn yes() -> bool {
    true
}

impl Rule {
    pub(super) fn compile(spec: RuleSpec, source: &str) -> Result<Rule, RuleError> {
        let loc = |field: &str| format!("{source}: rule {:?}: {field}", spec.name);
        let err = |field: &str, message: String| RuleError {
            location: loc(field),
            message,
        };
        if spec.name.trim().is_empty() {
            return Err(RuleError {
                location: source.to_string(),
                message: "a rule has an empty name".into(),
            });
        }
        if spec.matcher.resource.is_empty() {
            return Err(err("match.resource", "must not be empty".into()));
        }
        if spec.class.trim().is_empty() {
            return Err(err("class", "must not be empty".into()));
        }
        let namespace = spec
            .matcher
            .namespace
            .as_deref()
            .map(|p| Regex::new(&format!("^(?:{p})$")))
            .transpose()
            .map_err(|e| err("match.namespace", e.to_string()))?;
        let mut labels = Vec::new();
        for (k, p) in &spec.matcher.labels {
            let re = Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| err(&format!("match.labels[{k:?}]"), e.to_string()))?;
            labels.push((k.clone(), re));
        }
        let t = &spec.target;
        let chosen = [
            t.field.is_some(),
            t.name_regex.is_some(),
            t.annotation.is_some(),
            t.selector.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if chosen != 1 {
            return Err(err(
                "target",
                "exactly one of field, nameRegex, annotation, selector must be set".into(),
            ));
        }
        let finder = if let Some(f) = &t.field {
            Finder::Field(parse_field_path(f).map_err(|e| err("target.field", e))?)
        } else if let Some(f) = &t.selector {
            if !t.namespaced {
                return Err(err(
                    "target.namespaced",
                    "selector targets are looked up in the object's namespace".into(),
                ));
            }
            Finder::Selector(parse_field_path(f).map_err(|e| err("target.selector", e))?)
        } else if let Some(r) = &t.name_regex {
            let re = Regex::new(r).map_err(|e| err("target.nameRegex", e.to_string()))?;
            if re.captures_len() < 2 {
                return Err(err(
                    "target.nameRegex",
                    "needs a capture group (named `name`, or the first group) for the target name"
                        .into(),
                ));
            }
            Finder::NameRegex(re)
        } else {
            let a = t.annotation.clone().unwrap_or_default();
            if a.is_empty() {
                return Err(err("target.annotation", "must not be empty".into()));
            }
            Finder::Annotation(a)
        };
        let (target_group, target_resource) = match &finder {
            Finder::Annotation(_) => (String::new(), String::new()),
            _ => {
                let res = t.resource.clone().unwrap_or_default();
                if res.is_empty() {
                    return Err(err(
                        "target.resource",
                        "must be set for field, nameRegex and selector targets".into(),
                    ));
                }
                (t.group.clone().unwrap_or_default(), res)
            }
        };
        let target_namespace_field = match (&t.namespace_field, &finder) {
            (None, _) => None,
            (Some(f), Finder::Field(_)) => {
                Some(parse_field_path(f).map_err(|e| err("target.namespaceField", e))?)
            }
            (Some(_), _) => {
                return Err(err(
                    "target.namespaceField",
                    "works only with target.field".into(),
                ));
            }
        };
        Ok(Rule {
            target_namespace_field,
            name: spec.name,
            description: spec.description,
            source: source.to_string(),
            group: spec.matcher.group,
            resource: spec.matcher.resource,
            namespace,
            labels,
            class: spec.class,
            role: spec.role,
            finder,
            target_group,
            target_resource,
            target_namespaced: t.namespaced,
        })
    }
}
