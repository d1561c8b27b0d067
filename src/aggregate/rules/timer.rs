//! Timers: writes a controller makes because a clock says so, not because
//! something changed (`timers:` in a rule file) — a CronJob's schedule, a
//! Deployment's progress deadline, a finished Job's TTL. Such a write roots
//! a cascade of its own, named by its timer, rather than hanging under the
//! last change before it (which happened minutes earlier and did not cause
//! it): the wait is the timer's, never a hop's latency.
//!
//! ```yaml
//! timers:
//!   - name: cronjob-schedule
//!     writes: [create]                     # writes of the object it fires
//!     match: {group: batch, resource: jobs}
//!     writers: '^system:serviceaccount:kube-system:cronjob-controller$'
//!   - name: progress-deadline
//!     writes: [status]
//!     match: {group: apps, resource: deployments}
//!     writers: ':deployment-controller$'
//!     sets_condition: {type: Progressing, reason: ProgressDeadlineExceeded}
//! ```

use regex::Regex;
use serde::Deserialize;

use super::RuleError;
use super::propagation::{ChangeClass, EffectMatch};
use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};
use crate::model::ObjectRef;

/// A clock that makes a controller write.
#[derive(Debug, Clone)]
pub struct Timer {
    pub name: String,
    pub description: String,
    pub source: String,
    /// Writes it makes (bit set of [`ChangeClass`]).
    writes: u8,
    writers: Option<Regex>,
    group: Option<String>,
    resource: Option<String>,
    /// The write sets this condition's reason (`type`, `reason`), which the
    /// object did not have before.
    sets_condition: Option<(String, String)>,
}

impl Timer {
    /// One line: the writes it makes and to what.
    pub fn summary(&self) -> String {
        format!(
            "{} {}",
            ChangeClass::names(self.writes),
            super::propagation::resource_name(self.group.as_deref(), self.resource.as_deref())
        )
    }

    /// Whether the write of `class` by `writer` to `obj`, from `old` to
    /// `new`, is this timer firing.
    pub fn fires(
        &self,
        obj: &ObjectRef,
        writer: Option<&str>,
        class: ChangeClass,
        old: Option<&Value>,
        new: Option<&Value>,
    ) -> bool {
        self.writes & (1 << class.index()) != 0
            && self.group.as_ref().is_none_or(|g| *g == obj.group)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| r == "*" || *r == obj.resource)
            && self
                .writers
                .as_ref()
                .is_none_or(|re| writer.is_some_and(|w| re.is_match(w)))
            && self.sets_condition.as_ref().is_none_or(|(kind, reason)| {
                new.is_some_and(|n| condition_reason(n, kind) == Some(reason.as_str()))
                    && old.is_none_or(|o| condition_reason(o, kind) != Some(reason.as_str()))
            })
    }
}

/// The reason of `status.conditions[type == kind]` in `state`.
fn condition_reason<'a>(state: &'a Value, kind: &str) -> Option<&'a str> {
    state
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?
        .get("reason")
        .and_then(Value::as_str)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimerSpec {
    name: String,
    #[serde(default)]
    description: String,
    writes: Vec<ChangeClass>,
    #[serde(default)]
    writers: Option<String>,
    #[serde(default, rename = "match")]
    matcher: Option<EffectMatch>,
    #[serde(default)]
    sets_condition: Option<ConditionSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionSpec {
    #[serde(rename = "type")]
    kind: String,
    reason: String,
}

impl TimerSpec {
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn compile(self, source: &str) -> Result<Timer, RuleError> {
        let err = |field: &str, message: &str| RuleError {
            location: format!("{source}: timer {:?}: {field}", self.name),
            message: message.into(),
        };
        if self.name.trim().is_empty() {
            return Err(RuleError {
                location: source.into(),
                message: "a timer has an empty name".into(),
            });
        }
        if self.writes.is_empty() {
            return Err(err("writes", "must name at least one change class"));
        }
        if self
            .sets_condition
            .as_ref()
            .is_some_and(|c| c.kind.trim().is_empty() || c.reason.trim().is_empty())
        {
            return Err(err("sets_condition", "needs a type and a reason"));
        }
        let writers = self
            .writers
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| err("writers", &e.to_string()))?;
        let (group, resource) = match self.matcher {
            Some(m) => (m.group, m.resource),
            None => (None, None),
        };
        Ok(Timer {
            writes: self.writes.iter().fold(0u8, |b, c| b | 1 << c.index()),
            name: self.name,
            description: self.description,
            source: source.to_string(),
            writers,
            group,
            resource,
            sets_condition: self.sets_condition.map(|c| (c.kind, c.reason)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::RuleSet;
    use super::*;

    fn set() -> RuleSet {
        let mut set = RuleSet::default();
        set.add_yaml(
            "t.yaml",
            r#"
timers:
  - {name: schedule, writes: [create], match: {group: batch, resource: jobs}, writers: ':cronjob-controller$'}
  - name: deadline
    writes: [status]
    match: {group: apps, resource: deployments}
    sets_condition: {type: Progressing, reason: ProgressDeadlineExceeded}
"#,
        )
        .unwrap();
        set
    }

    fn progressing(reason: &str) -> Value {
        crate::json::parse(&format!(
            r#"{{"status":{{"conditions":[{{"type":"Available","reason":"x"}},{{"type":"Progressing","reason":"{reason}"}}]}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_timer_fires_on_its_writer_and_object_and_the_condition_it_sets() {
        let set = set();
        let [schedule, deadline] = set.timers() else {
            panic!("two timers")
        };
        let job = ObjectRef::new("c", "batch", "jobs", "ns", "report-1".to_string());
        let cron = Some("system:serviceaccount:kube-system:cronjob-controller");
        assert!(schedule.fires(&job, cron, ChangeClass::Create, None, None));
        assert!(!schedule.fires(&job, Some("alice"), ChangeClass::Create, None, None));
        assert!(!schedule.fires(&job, cron, ChangeClass::Status, None, None));
        let web = ObjectRef::new("c", "apps", "deployments", "ns", "web".to_string());
        let (before, after) = (
            progressing("ReplicaSetUpdated"),
            progressing("ProgressDeadlineExceeded"),
        );
        assert!(deadline.fires(&web, None, ChangeClass::Status, Some(&before), Some(&after)));
        // Only the write that sets it: a later status write that keeps it is
        // the controller reacting to something else.
        assert!(!deadline.fires(&web, None, ChangeClass::Status, Some(&after), Some(&after)));
    }

    #[test]
    fn a_timer_without_writes_or_with_a_bad_pattern_is_named_in_the_error() {
        for (yaml, field) in [
            ("timers:\n  - {name: x, writes: []}", "writes"),
            (
                "timers:\n  - {name: x, writes: [create], writers: '('}",
                "writers",
            ),
            (
                "timers:\n  - {name: x, writes: [status], sets_condition: {type: A, reason: ''}}",
                "sets_condition",
            ),
        ] {
            let errors = RuleSet::default().add_yaml("t.yaml", yaml).unwrap_err();
            assert!(
                errors[0]
                    .location
                    .ends_with(&format!("timer \"x\": {field}")),
                "{errors:?}"
            );
        }
    }
}
