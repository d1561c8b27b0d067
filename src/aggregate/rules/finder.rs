//! How a rule finds its targets in an object: a field path, a regex over the
//! name, a link annotation, or a label selector (resolved by the label index).

use crate::json::{JsonValueTrait as _, Value, ValueRef};
use regex::Regex;
use serde::Deserialize;

use super::{Relation, Role, Rule};
use crate::model::ObjectRef;

/// A step of a field path: `spec.volumes[*].configMap.name`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    Field(String),
    Each,
}

#[derive(Debug, Clone)]
pub(super) enum Finder {
    Field(Vec<Step>),
    NameRegex(Regex),
    Annotation(String),
    /// Targets are the objects whose labels the selector at this path matches
    /// (resolved by the processor's label index, not here).
    Selector(Vec<Step>),
}

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

pub(super) fn parse_field_path(path: &str) -> Result<Vec<Step>, String> {
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
            if let Some(s) = v.as_str()
                && !s.is_empty()
            {
                out.push(s.to_string());
            }
        }
        Some((Step::Field(f), rest)) => {
            if let Some(child) = v.get(f) {
                collect_strings(child, rest, out);
            }
        }
        Some((Step::Each, rest)) => match v.as_ref() {
            ValueRef::Array(items) => items.iter().for_each(|i| collect_strings(i, rest, out)),
            ValueRef::Object(map) => map.iter().for_each(|(_, i)| collect_strings(i, rest, out)),
            _ => {}
        },
    }
}

/// The field paths of one resource's rules as one tree: the steps they
/// share (`spec`, `spec.volumes[*]`, …) are walked once per object, not once
/// per rule (a Pod's eleven rules looked `spec` up eleven times).
#[derive(Debug, Clone, Default)]
pub(super) struct FieldTree {
    /// The rules (by index) whose path ends here.
    ends: Vec<usize>,
    children: Vec<(Step, FieldTree)>,
}

impl FieldTree {
    pub(super) fn insert(&mut self, steps: &[Step], rule: usize) {
        let Some((step, rest)) = steps.split_first() else {
            self.ends.push(rule);
            return;
        };
        let at = match self.children.iter().position(|(s, _)| s == step) {
            Some(at) => at,
            None => {
                self.children.push((step.clone(), FieldTree::default()));
                self.children.len() - 1
            }
        };
        self.children[at].1.insert(rest, rule);
    }

    /// `(rule, string)` for each non-empty string at a rule's path in `v`,
    /// as [`collect_strings`] finds them for each rule (in another order:
    /// the caller sorts them).
    pub(super) fn collect(&self, v: &Value, out: &mut Vec<(usize, String)>) {
        if !self.ends.is_empty()
            && let Some(s) = v.as_str()
            && !s.is_empty()
        {
            out.extend(self.ends.iter().map(|&rule| (rule, s.to_string())));
        }
        if self.children.is_empty() {
            return;
        }
        match v.as_ref() {
            // One pass over the object's keys, each matched against the
            // steps wanted here: a lookup per field scanned the keys once
            // per field (a Pod's spec: five lookups among twenty keys). The
            // first of a repeated key is taken, as a lookup takes it. (A
            // lookup for a level of one step measured no better.)
            ValueRef::Object(map) if self.children.len() <= 64 => {
                let mut taken = 0u64;
                for (key, c) in map.iter() {
                    for (i, (step, child)) in self.children.iter().enumerate() {
                        match step {
                            Step::Field(f) if f == key && taken & (1 << i) == 0 => {
                                taken |= 1 << i;
                                child.collect(c, out);
                            }
                            Step::Field(_) => {}
                            Step::Each => child.collect(c, out),
                        }
                    }
                }
            }
            ValueRef::Object(map) => {
                for (step, child) in &self.children {
                    match step {
                        Step::Field(f) => {
                            if let Some(c) = map.get(f) {
                                child.collect(c, out);
                            }
                        }
                        Step::Each => map.iter().for_each(|(_, i)| child.collect(i, out)),
                    }
                }
            }
            ValueRef::Array(items) => {
                for (step, child) in &self.children {
                    if *step == Step::Each {
                        items.iter().for_each(|i| child.collect(i, out));
                    }
                }
            }
            _ => {}
        }
    }
}

impl Rule {
    pub(super) fn matches(&self, obj: &ObjectRef, state: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && !ns.is_match(&obj.namespace)
        {
            return false;
        }
        self.labels.iter().all(|(k, re)| {
            crate::json::pointer(state, "/metadata/labels")
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

    pub(super) fn apply(&self, obj: &ObjectRef, state: &Value, out: &mut Vec<Relation>) {
        match &self.finder {
            Finder::Field(steps) => {
                let mut names = Vec::new();
                collect_strings(state, steps, &mut names);
                names.sort();
                names.dedup();
                self.apply_names(obj, state, names, out);
            }
            _ => self.apply_other(obj, state, out),
        }
    }

    /// A field rule's relations to `names` (sorted, distinct), the strings
    /// its path found in `state`.
    pub(super) fn apply_names(
        &self,
        obj: &ObjectRef,
        state: &Value,
        names: Vec<String>,
        out: &mut Vec<Relation>,
    ) {
        if names.is_empty() || !self.matches(obj, state) {
            return;
        }
        let namespace = match &self.target_namespace_field {
            Some(path) => {
                let mut found = Vec::new();
                collect_strings(state, path, &mut found);
                match found.into_iter().next() {
                    Some(ns) => Some(ns),
                    None => return, // names no namespace: no target
                }
            }
            None => None,
        };
        for n in names {
            let mut target = self.target(obj, n);
            if let Some(ns) = &namespace {
                target.namespace = ns.clone();
            }
            out.push(Relation {
                target,
                role: self.role,
                class: self.class.clone(),
            });
        }
    }

    /// The relations of a rule that is not a field rule.
    pub(super) fn apply_other(&self, obj: &ObjectRef, state: &Value, out: &mut Vec<Relation>) {
        if !self.matches(obj, state) {
            return;
        }
        match &self.finder {
            // Field rules: `apply_names`; selectors: the label index.
            Finder::Field(_) | Finder::Selector(_) => {}
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
                let Some(text) = crate::json::pointer(state, "/metadata/annotations")
                    .and_then(|a| a.get(key))
                    .and_then(Value::as_str)
                else {
                    return;
                };
                // The annotation's own JSON, read with serde_json (rare).
                let links: Vec<AnnotationLink> = match serde_json::from_str(text) {
                    Ok(serde_json::Value::Array(items)) => items
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
