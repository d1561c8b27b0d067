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
mod tests;
