//! Declarative relation rules (`rules/*.yaml`): which objects an object points
//! at, found by a field path, a regex over its name, or a link annotation.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::model::ObjectRef;

/// The role the *target* plays for the object that points at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Parent,
    Child,
}

impl Role {
    pub fn reverse(self) -> Role {
        match self {
            Role::Parent => Role::Child,
            Role::Child => Role::Parent,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Parent => "parent",
            Role::Child => "child",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One relation of an object: `target` plays `role` for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Relation {
    pub target: ObjectRef,
    pub role: Role,
    pub class: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: String,
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
}

fn yes() -> bool {
    true
}

/// A step of a field path: `spec.volumes[*].configMap.name`.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Each,
}

#[derive(Debug, Clone)]
enum Finder {
    Field(Vec<Step>),
    NameRegex(Regex),
    Annotation(String),
    /// Targets are the objects whose labels the selector at this path matches
    /// (resolved by the processor's label index, not here).
    Selector(Vec<Step>),
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub description: String,
    pub source: String,
    group: String,
    resource: String,
    namespace: Option<Regex>,
    labels: Vec<(String, Regex)>,
    class: String,
    role: Role,
    finder: Finder,
    target_group: String,
    target_resource: String,
    target_namespaced: bool,
}

/// What the processor needs of a selector rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SelectorRule {
    pub name: String,
    pub class: String,
    pub role: Role,
    pub target_group: String,
    pub target_resource: String,
}

/// A Kubernetes label selector: a plain `{key: value}` map (Service,
/// ReplicationController) or a LabelSelector (matchLabels, matchExpressions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    match_labels: Vec<(String, String)>,
    /// (key, operator, values)
    expressions: Vec<(String, String, Vec<String>)>,
}

impl LabelSelector {
    fn at(state: &Value, steps: &[Step]) -> Option<Self> {
        let mut cur = state;
        for s in steps {
            match s {
                Step::Field(f) => cur = cur.get(f)?,
                Step::Each => return None,
            }
        }
        Self::from_value(cur)
    }

    /// `None` for an empty or malformed selector: it selects nothing.
    pub fn from_value(v: &Value) -> Option<Self> {
        let obj = v.as_object()?;
        let structured = obj.contains_key("matchLabels") || obj.contains_key("matchExpressions");
        let labels_map = if structured {
            obj.get("matchLabels").and_then(Value::as_object)
        } else {
            Some(obj)
        };
        let mut match_labels: Vec<(String, String)> = labels_map
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect();
        match_labels.sort();
        let mut expressions = Vec::new();
        if structured {
            for e in obj
                .get("matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let key = e.get("key").and_then(Value::as_str)?;
                let op = e.get("operator").and_then(Value::as_str)?;
                let values = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                expressions.push((key.to_string(), op.to_string(), values));
            }
        }
        (!match_labels.is_empty() || !expressions.is_empty()).then_some(Self {
            match_labels,
            expressions,
        })
    }

    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|(k, op, values)| {
                let have = labels.get(k);
                match op.as_str() {
                    "In" => have.is_some_and(|v| values.contains(v)),
                    "NotIn" => have.is_none_or(|v| !values.contains(v)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    _ => false,
                }
            })
    }
}

/// A rule-file error naming the file, the rule and the field.
#[derive(Debug, thiserror::Error)]
#[error("{location}: {message}")]
pub struct RuleError {
    pub location: String,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    by_resource: HashMap<(String, String), Vec<Rule>>,
    count: usize,
}

/// The JSON carried by a link annotation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnnotationLink {
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    group: String,
    resource: String,
    #[serde(default)]
    namespace: Option<String>,
    name: String,
    #[serde(default)]
    role: Option<Role>,
    #[serde(default)]
    class: Option<String>,
}

fn parse_field_path(path: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = path;
    if rest.is_empty() {
        return Err("empty field path".into());
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[*]") {
            steps.push(Step::Each);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("[\"") {
            let end = r
                .find("\"]")
                .ok_or_else(|| format!("unclosed [\"...\"] in {path:?}"))?;
            steps.push(Step::Field(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if rest.starts_with('[') {
            return Err(format!(
                "in {path:?}: only [*] and [\"key\"] may follow a field"
            ));
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err(format!("empty field name in {path:?}"));
            }
            steps.push(Step::Field(name.to_string()));
            rest = &r[end..];
        }
    }
    Ok(steps)
}

fn collect_strings(v: &Value, steps: &[Step], out: &mut Vec<String>) {
    match steps.split_first() {
        None => {
            if let Value::String(s) = v
                && !s.is_empty()
            {
                out.push(s.clone());
            }
        }
        Some((Step::Field(f), rest)) => {
            if let Some(child) = v.get(f) {
                collect_strings(child, rest, out);
            }
        }
        Some((Step::Each, rest)) => match v {
            Value::Array(items) => items.iter().for_each(|i| collect_strings(i, rest, out)),
            Value::Object(map) => map.values().for_each(|i| collect_strings(i, rest, out)),
            _ => {}
        },
    }
}

impl Rule {
    fn compile(spec: RuleSpec, source: &str) -> Result<Rule, RuleError> {
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
        Ok(Rule {
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

    fn matches(&self, obj: &ObjectRef, state: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && !ns.is_match(&obj.namespace)
        {
            return false;
        }
        self.labels.iter().all(|(k, re)| {
            state
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .is_some_and(|v| re.is_match(v))
        })
    }

    fn target(&self, obj: &ObjectRef, name: String) -> ObjectRef {
        ObjectRef::new(
            &obj.cluster,
            &self.target_group,
            &self.target_resource,
            if self.target_namespaced {
                obj.namespace.as_str()
            } else {
                ""
            },
            name,
        )
    }

    fn apply(&self, obj: &ObjectRef, state: &Value, out: &mut Vec<Relation>) {
        if !self.matches(obj, state) {
            return;
        }
        match &self.finder {
            Finder::Field(steps) => {
                let mut names = Vec::new();
                collect_strings(state, steps, &mut names);
                names.sort();
                names.dedup();
                for n in names {
                    out.push(Relation {
                        target: self.target(obj, n),
                        role: self.role,
                        class: self.class.clone(),
                    });
                }
            }
            Finder::Selector(_) => {}
            Finder::NameRegex(re) => {
                if let Some(c) = re.captures(&obj.name) {
                    let m = c.name("name").or_else(|| c.get(1));
                    if let Some(m) = m.filter(|m| !m.as_str().is_empty()) {
                        out.push(Relation {
                            target: self.target(obj, m.as_str().to_string()),
                            role: self.role,
                            class: self.class.clone(),
                        });
                    }
                }
            }
            Finder::Annotation(key) => {
                let Some(text) = state
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(key))
                    .and_then(Value::as_str)
                else {
                    return;
                };
                let links: Vec<AnnotationLink> = match serde_json::from_str::<Value>(text) {
                    Ok(Value::Array(items)) => items
                        .into_iter()
                        .filter_map(|i| serde_json::from_value(i).ok())
                        .collect(),
                    Ok(v) => serde_json::from_value(v).ok().into_iter().collect(),
                    Err(_) => Vec::new(),
                };
                if links.is_empty() {
                    tracing::debug!(object = %obj, annotation = key, "link annotation is not a JSON object reference; ignored");
                }
                for l in links {
                    out.push(Relation {
                        target: ObjectRef::new(
                            l.cluster.unwrap_or_else(|| obj.cluster.clone()),
                            l.group,
                            l.resource,
                            l.namespace.unwrap_or_default(),
                            l.name,
                        ),
                        role: l.role.unwrap_or(self.role),
                        class: l.class.unwrap_or_else(|| self.class.clone()),
                    });
                }
            }
        }
    }
}

impl RuleSet {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.by_resource.values().flatten()
    }

    /// Parses one rule file's text; `source` names it in errors.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> Result<(), Vec<RuleError>> {
        let file: RuleFile = serde_yaml_ng::from_str(text).map_err(|e| {
            let location = match e.location() {
                Some(l) => format!("{source}:{}:{}", l.line(), l.column()),
                None => source.to_string(),
            };
            vec![RuleError {
                location,
                message: e.to_string(),
            }]
        })?;
        let mut errors = Vec::new();
        let mut names = std::collections::HashSet::new();
        for existing in self.rules() {
            names.insert(existing.name.clone());
        }
        for spec in file.rules {
            if !names.insert(spec.name.clone()) {
                errors.push(RuleError {
                    location: format!("{source}: rule {:?}", spec.name),
                    message: "duplicate rule name".into(),
                });
                continue;
            }
            match Rule::compile(spec, source) {
                Ok(rule) => {
                    self.count += 1;
                    let key = if rule.resource == "*" {
                        ("*".to_string(), "*".to_string())
                    } else {
                        (rule.group.clone(), rule.resource.clone())
                    };
                    self.by_resource.entry(key).or_default().push(rule);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Loads every `*.yaml`/`*.yml` file of `dir`, in name order.
    pub fn load_dir(dir: &Path) -> Result<RuleSet, Vec<RuleError>> {
        let mut set = RuleSet::default();
        let entries = std::fs::read_dir(dir).map_err(|e| {
            vec![RuleError {
                location: dir.display().to_string(),
                message: format!("cannot read rules directory: {e}"),
            }]
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
            .collect();
        files.sort();
        let mut errors = Vec::new();
        for f in files {
            let source = f.display().to_string();
            match std::fs::read_to_string(&f) {
                Ok(text) => {
                    if let Err(mut e) = set.add_yaml(&source, &text) {
                        errors.append(&mut e);
                    }
                }
                Err(e) => errors.push(RuleError {
                    location: source,
                    message: format!("cannot read: {e}"),
                }),
            }
        }
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    /// Selector rules that apply to `obj`: (rule, the selector in `state`).
    pub fn selectors(&self, obj: &ObjectRef, state: &Value) -> Vec<(SelectorRule, LabelSelector)> {
        let specific = self
            .by_resource
            .get(&(obj.group.clone(), obj.resource.clone()));
        let any = self.by_resource.get(&("*".to_string(), "*".to_string()));
        let mut out = Vec::new();
        for r in specific.into_iter().chain(any).flatten() {
            if let Finder::Selector(steps) = &r.finder
                && r.matches(obj, state)
                && let Some(sel) = LabelSelector::at(state, steps)
            {
                out.push((
                    SelectorRule {
                        name: r.name.clone(),
                        class: r.class.clone(),
                        role: r.role,
                        target_group: r.target_group.clone(),
                        target_resource: r.target_resource.clone(),
                    },
                    sel,
                ));
            }
        }
        out
    }

    /// `(group, resource)` of every selector rule's targets: what the label
    /// index must hold.
    pub fn selector_targets(&self) -> HashSet<(String, String)> {
        self.by_resource
            .values()
            .flatten()
            .filter(|r| matches!(r.finder, Finder::Selector(_)))
            .map(|r| (r.target_group.clone(), r.target_resource.clone()))
            .collect()
    }

    /// Relations of `obj` (whose latest known state is `state`) found by rules.
    pub fn relations(&self, obj: &ObjectRef, state: &Value, out: &mut Vec<Relation>) {
        let specific = self
            .by_resource
            .get(&(obj.group.clone(), obj.resource.clone()));
        let any = self.by_resource.get(&("*".to_string(), "*".to_string()));
        for r in specific.into_iter().chain(any).flatten() {
            r.apply(obj, state, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
