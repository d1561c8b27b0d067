//! Propagations: which relations carry a change from one object to another
//! (`propagations:` in a rule file). The cause inference
//! (`aggregate/causes/`) reads them; nothing about a relation's causality is
//! hard-coded.
//!
//! ```yaml
//! propagations:
//!   - name: owner-writes-owned
//!     relation: owner        # a link class (owner, owner-ref, a rule's class), `self` or `namespace`
//!     cause: parent          # the role the cause plays for the effect (not for `self`):
//!                            # parent, child, or sibling (owned by the same parent)
//!     on: [create, update]   # changes of the cause that trigger it
//!     finished_pods: false   # only a status write that finished a Pod (Succeeded, Failed)
//!     writes: [create, update, delete]   # writes of the effect it explains
//!     writers: '^system:serviceaccount:kube-system:'   # regex on the effect's writer
//!     match: {group: apps, resource: replicasets}      # optional: the effect's object
//! ```

use regex::Regex;
use serde::Deserialize;

use super::{Role, RuleError};
use crate::model::ObjectRef;

/// What a write did, as the propagations classify it (from its verb and
/// subresource, so it is known before the object is parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeClass {
    /// A create of the object itself.
    Create,
    /// An update or patch of the object (its spec or metadata), or of its
    /// `scale` subresource.
    Update,
    /// A write of the `status` subresource.
    Status,
    /// A delete (also one that only marks the object for deletion).
    Delete,
    /// A Pod's `binding` (the scheduler's choice of node).
    Binding,
}

impl ChangeClass {
    pub const ALL: [ChangeClass; 5] = [
        ChangeClass::Create,
        ChangeClass::Update,
        ChangeClass::Status,
        ChangeClass::Delete,
        ChangeClass::Binding,
    ];

    /// The class of a write by its verb and subresource; `None` for what
    /// changes nothing a controller reacts to (e.g. `eviction`, `token`).
    pub fn of(verb: &str, subresource: &str) -> Option<ChangeClass> {
        match (verb, subresource) {
            ("create", "") => Some(ChangeClass::Create),
            ("create", "binding") => Some(ChangeClass::Binding),
            ("update" | "patch", "" | "scale") => Some(ChangeClass::Update),
            ("update" | "patch", "status") => Some(ChangeClass::Status),
            ("delete" | "deletecollection", "") => Some(ChangeClass::Delete),
            _ => None,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            ChangeClass::Create => "create",
            ChangeClass::Update => "update",
            ChangeClass::Status => "status",
            ChangeClass::Delete => "delete",
            ChangeClass::Binding => "binding",
        }
    }

    /// The names of the classes in a bit set (`,`-separated).
    pub(super) fn names(bits: u8) -> String {
        ChangeClass::ALL
            .iter()
            .filter(|c| bits & (1 << c.index()) != 0)
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `group/resource`, `resource` for the core group, `*` for any.
pub(super) fn resource_name(group: Option<&str>, resource: Option<&str>) -> String {
    match (group.filter(|g| !g.is_empty()), resource) {
        (_, None) | (_, Some("*")) => "*".to_string(),
        (None, Some(r)) => r.to_string(),
        (Some(g), Some(r)) => format!("{r}.{g}"),
    }
}

/// The relation a propagation follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The object's own earlier change (e.g. a Pod's binding after its create).
    SameObject,
    /// The Namespace the object lives in (e.g. its default ServiceAccount).
    Namespace,
    /// A relation of this class; the cause plays `cause_role` for the effect.
    Relation { class: String, cause_role: Role },
    /// Another object with the same parent in a relation of this class
    /// (e.g. a Pod of the same Job).
    Sibling { class: String },
}

impl Via {
    /// The relation class it follows, if any.
    pub fn class(&self) -> Option<&str> {
        match self {
            Via::Relation { class, .. } | Via::Sibling { class } => Some(class),
            Via::SameObject | Via::Namespace => None,
        }
    }
}

/// The side of a relation the cause is on (`cause:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum CauseSide {
    Parent,
    Child,
    Sibling,
}

#[derive(Debug, Clone)]
pub struct Propagation {
    pub name: String,
    pub description: String,
    pub source: String,
    pub via: Via,
    /// Changes of the cause that trigger it (bit set of [`ChangeClass`]).
    on: u8,
    /// Only a status write that finished a Pod (`finished_pods:`).
    finished_pods: bool,
    /// Writes of the effect it explains.
    writes: u8,
    /// Shared by the propagations that give the same pattern (see
    /// [`Self::share_writers`]).
    writers: Option<std::sync::Arc<Regex>>,
    group: Option<String>,
    resource: Option<String>,
}

impl Propagation {
    /// One line: the relation, what triggers it and what it explains.
    pub fn summary(&self) -> String {
        let via = match &self.via {
            Via::SameObject => "self".to_string(),
            Via::Namespace => "namespace".to_string(),
            Via::Relation { class, cause_role } => format!("{class} ({cause_role} causes)"),
            Via::Sibling { class } => format!("{class} (sibling causes)"),
        };
        format!(
            "{via}: {} → {} {}",
            ChangeClass::names(self.on),
            ChangeClass::names(self.writes),
            resource_name(self.group.as_deref(), self.resource.as_deref())
        )
    }

    pub fn triggered_by(&self, class: ChangeClass) -> bool {
        self.on & (1 << class.index()) != 0
    }

    /// Only a status write that finished a Pod triggers it.
    pub fn finished_pods_only(&self) -> bool {
        self.finished_pods
    }

    /// Whether this propagation can explain a write of `class` by `writer`
    /// (`None`: not known, e.g. seen only by the list-watch) to `obj`.
    pub fn explains(&self, obj: &ObjectRef, writer: Option<&str>, class: ChangeClass) -> bool {
        self.explains_given(obj, class, |re| writer.is_none_or(|w| re.is_match(w)))
    }

    /// The compiled `writers:` regex, shared with the propagations giving
    /// the same pattern.
    pub fn writers(&self) -> Option<&std::sync::Arc<Regex>> {
        self.writers.as_ref()
    }

    /// Takes the compiled `writers:` regex of an earlier propagation with the
    /// same pattern, so that one match per writer serves both.
    pub fn share_writers(&mut self, earlier: &[Propagation]) {
        let Some(mine) = &self.writers else { return };
        if let Some(same) = earlier
            .iter()
            .filter_map(|p| p.writers.as_ref())
            .find(|re| re.as_str() == mine.as_str())
        {
            self.writers = Some(same.clone());
        }
    }

    /// [`Self::explains`], whether the writer matches the `writers:` regex
    /// told by `writer_matches` (asked only when there is one): a caller
    /// checking every propagation against one writer asks each distinct
    /// pattern once (the built-in rules share one).
    pub fn explains_given(
        &self,
        obj: &ObjectRef,
        class: ChangeClass,
        writer_matches: impl FnOnce(&Regex) -> bool,
    ) -> bool {
        self.writes & (1 << class.index()) != 0
            && self.group.as_ref().is_none_or(|g| *g == obj.group)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| r == "*" || *r == obj.resource)
            && self.writers.as_deref().is_none_or(writer_matches)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PropagationSpec {
    name: String,
    #[serde(default)]
    description: String,
    relation: String,
    #[serde(default)]
    cause: Option<CauseSide>,
    on: Vec<ChangeClass>,
    #[serde(default)]
    finished_pods: bool,
    writes: Vec<ChangeClass>,
    #[serde(default)]
    writers: Option<String>,
    #[serde(default, rename = "match")]
    matcher: Option<EffectMatch>,
}

/// `match:` of a propagation or a timer: the group and resource of the
/// object written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EffectMatch {
    #[serde(default)]
    pub(super) group: Option<String>,
    #[serde(default)]
    pub(super) resource: Option<String>,
}

const SAME_OBJECT: &str = "self";
const NAMESPACE: &str = "namespace";

impl PropagationSpec {
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn compile(self, source: &str) -> Result<Propagation, RuleError> {
        let err = |field: &str, message: &str| RuleError {
            location: format!("{source}: propagation {:?}: {field}", self.name),
            message: message.into(),
        };
        if self.name.trim().is_empty() {
            return Err(RuleError {
                location: source.into(),
                message: "a propagation has an empty name".into(),
            });
        }
        let via = match (self.relation.trim(), self.cause) {
            ("", _) => return Err(err("relation", "must not be empty")),
            (SAME_OBJECT, None) => Via::SameObject,
            (NAMESPACE, None) => Via::Namespace,
            (SAME_OBJECT | NAMESPACE, Some(_)) => {
                return Err(err(
                    "cause",
                    "must not be set for relations `self` and `namespace`",
                ));
            }
            (_, None) => {
                return Err(err(
                    "cause",
                    "must say which side causes: parent, child or sibling",
                ));
            }
            (class, Some(CauseSide::Sibling)) => Via::Sibling {
                class: class.to_string(),
            },
            (class, Some(side)) => Via::Relation {
                class: class.to_string(),
                cause_role: if side == CauseSide::Parent {
                    Role::Parent
                } else {
                    Role::Child
                },
            },
        };
        if self.on.is_empty() {
            return Err(err("on", "must name at least one change class"));
        }
        if self.writes.is_empty() {
            return Err(err("writes", "must name at least one change class"));
        }
        let bits = |classes: &[ChangeClass]| classes.iter().fold(0u8, |b, c| b | 1 << c.index());
        let writers = self
            .writers
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| err("writers", &e.to_string()))?
            .map(std::sync::Arc::new);
        let (group, resource) = match self.matcher {
            Some(m) => (m.group, m.resource),
            None => (None, None),
        };
        if self.finished_pods && !self.on.contains(&ChangeClass::Status) {
            return Err(err(
                "finished_pods",
                "needs `status` in `on:` (a Pod finishes by a status write)",
            ));
        }
        Ok(Propagation {
            on: bits(&self.on),
            finished_pods: self.finished_pods,
            writes: bits(&self.writes),
            name: self.name,
            description: self.description,
            source: source.to_string(),
            via,
            writers,
            group,
            resource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::RuleSet;

    #[test]
    fn propagations_with_the_same_writers_pattern_share_one_regex() {
        let mut set = RuleSet::default();
        set.add_yaml(
            "p.yaml",
            r#"
propagations:
  - {name: a, relation: owner, cause: parent, on: [create], writes: [create], writers: '^system:'}
  - {name: b, relation: owner, cause: parent, on: [update], writes: [update], writers: '^other:'}
  - {name: c, relation: owner, cause: parent, on: [delete], writes: [delete], writers: '^system:'}
  - {name: d, relation: owner, cause: parent, on: [delete], writes: [delete]}
"#,
        )
        .unwrap();
        let [a, b, c, d] = set.propagations() else {
            panic!("four propagations")
        };
        let (a, b, c) = (
            a.writers.as_ref().unwrap(),
            b.writers.as_ref().unwrap(),
            c.writers.as_ref().unwrap(),
        );
        assert!(std::sync::Arc::ptr_eq(a, c));
        assert!(!std::sync::Arc::ptr_eq(a, b));
        assert!(d.writers.is_none());
    }
}
