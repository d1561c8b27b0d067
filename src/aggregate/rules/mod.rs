//! Declarative relation rules (`rules/*.yaml`): which objects an object points
//! at, found by a field path, a regex over its name, or a link annotation.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

mod finder;
mod propagation;
mod selector;
mod spec;
mod timer;

pub(crate) use propagation::{ChangeClass, Propagation, Via};
pub(crate) use selector::{LabelSelector, labels_of};
pub(crate) use timer::Timer;

use finder::Finder;
use spec::RuleFile;

use crate::json::Value;
use regex::Regex;
use serde::Deserialize;

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
    /// Where the target's namespace is read from (`target.namespaceField`).
    target_namespace_field: Option<Vec<finder::Step>>,
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

/// A rule-file error naming the file, the rule and the field.
#[derive(Debug, thiserror::Error)]
#[error("{location}: {message}")]
pub struct RuleError {
    pub location: String,
    pub message: String,
}

/// The rules of one resource, their field paths also as one tree.
#[derive(Debug, Clone, Default)]
struct ResourceRules {
    rules: Vec<Rule>,
    fields: finder::FieldTree,
}

impl Rule {
    /// One line: what it matches, the target it finds and how.
    pub fn summary(&self) -> String {
        let how = match &self.finder {
            Finder::Field(_) => "field",
            Finder::NameRegex(_) => "name",
            Finder::Annotation(_) => "annotation",
            Finder::Selector(_) => "selector",
        };
        let target = match self.target_resource.as_str() {
            "" => "(annotated)".to_string(),
            r => propagation::resource_name(Some(&self.target_group), Some(r)),
        };
        format!(
            "{} → {target} by {how}, class {}, target is {}",
            propagation::resource_name(Some(&self.group), Some(&self.resource)),
            self.class,
            self.role
        )
    }
}

impl ResourceRules {
    fn push(&mut self, rule: Rule) {
        if let Finder::Field(steps) = &rule.finder {
            self.fields.insert(steps, self.rules.len());
        }
        self.rules.push(rule);
    }
}

#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Rules by the group and resource they match (looked up per write
    /// without building a key), and those matching any resource.
    by_resource:
        crate::model::FastHashMap<String, crate::model::FastHashMap<String, ResourceRules>>,
    any_resource: Vec<Rule>,
    count: usize,
    propagations: Vec<Propagation>,
    timers: Vec<Timer>,
    overrides: Vec<Override>,
}

/// The three parts of a rule file, each with its own names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Rule,
    Propagation,
    Timer,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Rule => "rule",
            Part::Propagation => "propagation",
            Part::Timer => "timer",
        })
    }
}

/// A rule, propagation or timer of a later layer that replaced an earlier
/// one of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub part: Part,
    pub name: String,
    /// The file it now comes from.
    pub source: String,
    /// The file of the one it replaced.
    pub replaced: String,
}

/// One named item of a rule file, with the file it came from.
enum Entry {
    Rule(String, spec::RuleSpec),
    Propagation(String, propagation::PropagationSpec),
    Timer(String, timer::TimerSpec),
}

impl Entry {
    fn of_file(source: &str, file: RuleFile) -> impl Iterator<Item = Entry> {
        let rules = file
            .rules
            .into_iter()
            .map(|s| Entry::Rule(source.to_string(), s));
        let propagations = file
            .propagations
            .into_iter()
            .map(|s| Entry::Propagation(source.to_string(), s));
        let timers = file
            .timers
            .into_iter()
            .map(|s| Entry::Timer(source.to_string(), s));
        rules.chain(propagations).chain(timers)
    }

    fn part(&self) -> Part {
        match self {
            Entry::Rule(..) => Part::Rule,
            Entry::Propagation(..) => Part::Propagation,
            Entry::Timer(..) => Part::Timer,
        }
    }

    fn name(&self) -> &str {
        match self {
            Entry::Rule(_, s) => &s.name,
            Entry::Propagation(_, s) => s.name(),
            Entry::Timer(_, s) => s.name(),
        }
    }

    fn source(&self) -> &str {
        match self {
            Entry::Rule(source, _) | Entry::Propagation(source, _) | Entry::Timer(source, _) => {
                source
            }
        }
    }
}

fn parse_file(source: &str, text: &str) -> Result<RuleFile, RuleError> {
    serde_yaml_ng::from_str(text).map_err(|e| {
        let location = match e.location() {
            Some(l) => format!("{source}:{}:{}", l.line(), l.column()),
            None => source.to_string(),
        };
        RuleError {
            location,
            message: e.to_string(),
        }
    })
}

/// `(source, text)` of every `*.yaml`/`*.yml` file of `dir`, in name order.
pub(crate) fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, Vec<RuleError>> {
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
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let source = f.display().to_string();
        match std::fs::read_to_string(&f) {
            Ok(text) => out.push((source, text)),
            Err(e) => errors.push(RuleError {
                location: source,
                message: format!("cannot read: {e}"),
            }),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
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
        self.by_resource
            .values()
            .flat_map(|by_name| by_name.values().flat_map(|r| &r.rules))
            .chain(&self.any_resource)
    }

    /// The rules that may match `obj`: its resource's, then any resource's.
    fn rules_for<'s>(&'s self, obj: &ObjectRef) -> impl Iterator<Item = &'s Rule> {
        self.resource_rules(obj)
            .into_iter()
            .flat_map(|r| &r.rules)
            .chain(&self.any_resource)
    }

    fn resource_rules(&self, obj: &ObjectRef) -> Option<&ResourceRules> {
        self.by_resource
            .get(obj.group.as_str())
            .and_then(|by_name| by_name.get(obj.resource.as_str()))
    }

    /// The declared propagations, in file order.
    pub fn propagations(&self) -> &[Propagation] {
        &self.propagations
    }

    /// The declared timers, in file order.
    pub fn timers(&self) -> &[Timer] {
        &self.timers
    }

    /// Parses one rule file's text; `source` names it in errors. A name
    /// already in the set is an error (see [`Self::from_layers`] for
    /// overriding).
    pub fn add_yaml(&mut self, source: &str, text: &str) -> Result<(), Vec<RuleError>> {
        let file = parse_file(source, text).map_err(|e| vec![e])?;
        let mut errors = Vec::new();
        let mut taken: std::collections::HashSet<(Part, String)> = self
            .rules()
            .map(|r| (Part::Rule, r.name.clone()))
            .chain(
                self.propagations
                    .iter()
                    .map(|p| (Part::Propagation, p.name.clone())),
            )
            .chain(self.timers.iter().map(|t| (Part::Timer, t.name.clone())))
            .collect();
        for entry in Entry::of_file(source, file) {
            if !taken.insert((entry.part(), entry.name().to_string())) {
                errors.push(RuleError {
                    location: format!("{source}: {} {:?}", entry.part(), entry.name()),
                    message: format!("duplicate {} name", entry.part()),
                });
                continue;
            }
            if let Err(e) = self.insert(entry) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The set built from layers of rule files (`(source, text)`), in order:
    /// a rule, propagation or timer of a later layer replaces the one of an
    /// earlier layer with the same name, in its place (the built-in rules
    /// are the first layer, a user's directory the second); a name given
    /// twice within one layer is an error.
    pub fn from_layers(layers: &[Vec<(String, String)>]) -> Result<RuleSet, Vec<RuleError>> {
        let mut entries: Vec<Entry> = Vec::new();
        // (part, name) → (index in `entries`, layer it came from).
        let mut by_name: std::collections::HashMap<(Part, String), (usize, usize)> =
            std::collections::HashMap::new();
        let mut overrides = Vec::new();
        let mut errors = Vec::new();
        for (layer, files) in layers.iter().enumerate() {
            for (source, text) in files {
                let file = match parse_file(source, text) {
                    Ok(file) => file,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                for entry in Entry::of_file(source, file) {
                    let key = (entry.part(), entry.name().to_string());
                    match by_name.get(&key) {
                        Some(&(i, earlier)) if earlier == layer => errors.push(RuleError {
                            location: format!("{source}: {} {:?}", entry.part(), entry.name()),
                            message: format!(
                                "duplicate {} name (also in {})",
                                entry.part(),
                                entries[i].source()
                            ),
                        }),
                        Some(&(i, _)) => {
                            overrides.push(Override {
                                part: entry.part(),
                                name: key.1.clone(),
                                source: source.clone(),
                                replaced: entries[i].source().to_string(),
                            });
                            by_name.insert(key, (i, layer));
                            entries[i] = entry;
                        }
                        None => {
                            by_name.insert(key, (entries.len(), layer));
                            entries.push(entry);
                        }
                    }
                }
            }
        }
        let mut set = RuleSet::default();
        for entry in entries {
            if let Err(e) = set.insert(entry) {
                errors.push(e);
            }
        }
        set.overrides = overrides;
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    /// What a later layer replaced (see [`Self::from_layers`]).
    pub fn overrides(&self) -> &[Override] {
        &self.overrides
    }

    /// Compiles one entry into the set.
    fn insert(&mut self, entry: Entry) -> Result<(), RuleError> {
        match entry {
            Entry::Rule(source, spec) => {
                let rule = Rule::compile(spec, &source)?;
                self.count += 1;
                if rule.resource == "*" {
                    self.any_resource.push(rule);
                } else {
                    self.by_resource
                        .entry(rule.group.clone())
                        .or_default()
                        .entry(rule.resource.clone())
                        .or_default()
                        .push(rule);
                }
            }
            Entry::Propagation(source, spec) => {
                let mut p = spec.compile(&source)?;
                p.share_writers(&self.propagations);
                self.propagations.push(p);
            }
            Entry::Timer(source, spec) => self.timers.push(spec.compile(&source)?),
        }
        Ok(())
    }

    /// Loads every `*.yaml`/`*.yml` file of `dir`, in name order.
    pub fn load_dir(dir: &Path) -> Result<RuleSet, Vec<RuleError>> {
        RuleSet::from_layers(&[read_dir(dir)?])
    }

    /// Selector rules that apply to `obj`: (rule, the selector in `state`).
    pub fn selectors(&self, obj: &ObjectRef, state: &Value) -> Vec<(SelectorRule, LabelSelector)> {
        let mut out = Vec::new();
        for r in self.rules_for(obj) {
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
        self.rules()
            .filter(|r| matches!(r.finder, Finder::Selector(_)))
            .map(|r| (r.target_group.clone(), r.target_resource.clone()))
            .collect()
    }

    /// `(group, resource)` of the objects selector rules match (the holders
    /// of selectors; `("*", "*")` for a rule matching any resource).
    pub fn selector_holders(&self) -> HashSet<(String, String)> {
        self.rules()
            .filter(|r| matches!(r.finder, Finder::Selector(_)))
            .map(|r| match r.resource.as_str() {
                "*" => ("*".to_string(), "*".to_string()),
                _ => (r.group.clone(), r.resource.clone()),
            })
            .collect()
    }

    /// Relations of `obj` (whose latest known state is `state`) found by rules.
    pub fn relations(&self, obj: &ObjectRef, state: &Value, out: &mut Vec<Relation>) {
        if let Some(resource) = self.resource_rules(obj) {
            // The field rules' strings in one walk, ordered by rule and then
            // string, distinct: what each rule's own walk, sorted, gave.
            let mut found = Vec::new();
            resource.fields.collect(state, &mut found);
            found.sort_unstable();
            found.dedup();
            let mut found = found.into_iter().peekable();
            for (i, r) in resource.rules.iter().enumerate() {
                if matches!(r.finder, Finder::Field(_)) {
                    let mut names = Vec::new();
                    while let Some((_, name)) = found.next_if(|(rule, _)| *rule == i) {
                        names.push(name);
                    }
                    r.apply_names(obj, state, names, out);
                } else {
                    r.apply_other(obj, state, out);
                }
            }
        }
        for r in &self.any_resource {
            r.apply(obj, state, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::json;

    #[test]
    fn propagations_are_read_with_their_classes_and_checked_field_by_field() {
        let mut set = RuleSet::default();
        set.add_yaml(
            "p.yaml",
            r#"
propagations:
  - name: owned
    relation: owner
    cause: parent
    on: [create, update]
    writes: [create, delete]
    writers: '^system:'
    match: {group: apps, resource: replicasets}
  - name: scheduled
    relation: self
    on: [create]
    writes: [binding]
"#,
        )
        .unwrap();
        let [owned, scheduled] = set.propagations() else {
            panic!("two propagations")
        };
        assert_eq!(
            owned.via,
            Via::Relation {
                class: "owner".into(),
                cause_role: Role::Parent
            }
        );
        assert!(owned.triggered_by(ChangeClass::Update));
        assert!(!owned.triggered_by(ChangeClass::Status));
        let rs = ObjectRef::new("c", "apps", "replicasets", "d", "r");
        let pod = ObjectRef::new("c", "", "pods", "d", "p");
        assert!(owned.explains(&rs, Some("system:x"), ChangeClass::Delete));
        assert!(!owned.explains(&rs, Some("alice"), ChangeClass::Delete));
        assert!(!owned.explains(&rs, Some("system:x"), ChangeClass::Update));
        assert!(!owned.explains(&pod, Some("system:x"), ChangeClass::Create));
        assert!(
            owned.explains(&rs, None, ChangeClass::Create),
            "writer unknown"
        );
        assert_eq!(scheduled.via, Via::SameObject);

        for (text, location, message) in [
            (
                "propagations:\n  - {name: x, relation: owner, on: [create], writes: [create]}",
                "p.yaml: propagation \"x\": cause",
                "parent, child or sibling",
            ),
            (
                "propagations:\n  - {name: x, relation: owner, cause: sibling, on: [create], writes: [create], finished_pods: true}",
                "p.yaml: propagation \"x\": finished_pods",
                "needs `status`",
            ),
            (
                "propagations:\n  - {name: x, relation: self, cause: child, on: [create], writes: [create]}",
                "p.yaml: propagation \"x\": cause",
                "must not be set",
            ),
            (
                "propagations:\n  - {name: x, relation: self, on: [], writes: [create]}",
                "p.yaml: propagation \"x\": on",
                "at least one",
            ),
            (
                "propagations:\n  - {name: x, relation: self, on: [create], writes: [create], writers: '('}",
                "p.yaml: propagation \"x\": writers",
                "regex",
            ),
            (
                "propagations:\n  - {name: owned, relation: self, on: [create], writes: [create]}",
                "p.yaml: propagation \"owned\"",
                "duplicate",
            ),
        ] {
            let errors = set.add_yaml("p.yaml", text).unwrap_err();
            assert_eq!(errors[0].location, location, "{text}");
            assert!(errors[0].message.contains(message), "{}", errors[0].message);
        }
        // An unknown change class names its line.
        let errors = RuleSet::default()
            .add_yaml(
                "q.yaml",
                "propagations:\n  - {name: y, relation: self, on: [created], writes: [create]}",
            )
            .unwrap_err();
        assert!(
            errors[0].location.starts_with("q.yaml:2:"),
            "{}",
            errors[0].location
        );
        assert!(
            errors[0].message.contains("created"),
            "{}",
            errors[0].message
        );
    }

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

    /// The one walk of a resource's field paths finds, rule by rule, what
    /// each rule's own walk finds: every object the fixtures captured, the
    /// bundled rules.
    #[test]
    fn one_walk_of_shared_paths_finds_what_each_rule_finds_alone() {
        let rules =
            RuleSet::load_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))).unwrap();
        let fixtures = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures"));
        let (mut objects, mut relations, mut several) = (0, 0, 0);
        for dir in std::fs::read_dir(fixtures).unwrap() {
            let log = dir.unwrap().path().join("audit.log");
            let Ok(text) = std::fs::read_to_string(&log) else {
                continue;
            };
            for line in text.lines() {
                let ev: serde_json::Value = serde_json::from_str(line).unwrap();
                let (Some(r), Some(object)) = (ev.get("objectRef"), ev.get("responseObject"))
                else {
                    continue;
                };
                let field = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or("");
                let obj = ObjectRef::new(
                    "c",
                    field("apiGroup"),
                    field("resource"),
                    field("namespace"),
                    field("name"),
                );
                let state = crate::json::parse(&object.to_string()).unwrap();
                let mut one_walk = Vec::new();
                rules.relations(&obj, &state, &mut one_walk);
                let mut rule_by_rule = Vec::new();
                let mut rules_finding = 0;
                for rule in rules.rules_for(&obj) {
                    let before = rule_by_rule.len();
                    rule.apply(&obj, &state, &mut rule_by_rule);
                    rules_finding += usize::from(rule_by_rule.len() > before);
                }
                assert_eq!(one_walk, rule_by_rule, "{} in {}", obj, log.display());
                objects += 1;
                relations += one_walk.len();
                several += usize::from(rules_finding > 1);
            }
        }
        assert!(objects > 500 && relations > 500, "{objects} {relations}");
        assert!(several > 100, "objects several rules relate: {several}");
    }

    /// A key written twice (never by an apiserver, but a webhook body may
    /// say anything): the one walk takes the first, as each rule's lookup
    /// does, at every level.
    #[test]
    fn one_walk_takes_the_first_of_a_repeated_key_as_a_lookup_does() {
        let rules =
            RuleSet::load_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))).unwrap();
        let pod = ObjectRef::new("c", "", "pods", "default", "p");
        let state = crate::json::parse(
            r#"{"spec":{"nodeName":"n1","volumes":[{"configMap":{"name":"a","name":"b"}}],
                "nodeName":"n2","volumes":[{"configMap":{"name":"c"}}]},
               "spec":{"nodeName":"n3"}}"#,
        )
        .unwrap();
        let mut one_walk = Vec::new();
        rules.relations(&pod, &state, &mut one_walk);
        let mut rule_by_rule = Vec::new();
        for rule in rules.rules_for(&pod) {
            rule.apply(&pod, &state, &mut rule_by_rule);
        }
        assert_eq!(one_walk, rule_by_rule);
        let mut targets: Vec<&str> = one_walk.iter().map(|r| r.target.name.as_str()).collect();
        targets.sort_unstable();
        assert_eq!(targets, ["a", "n1"]);
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
