//! Where each object stands after a change: settled or not (and since
//! when), being deleted (with its finalizers), gone; and a uid that changes
//! under a live name (logs of two clusters mixed).

use std::sync::Arc;

use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};

use super::{Idx, Problem, State};
use crate::analysis::cascade::counts;
use crate::flow::ChangeRecord;

impl State {
    pub(super) fn apply_state(&mut self, c: &ChangeRecord, obj: Idx) {
        if !counts(c) {
            return;
        }
        let (status, message) = match &c.readiness {
            Some(r) => (self.strings.id(&r.status), self.strings.id(&r.message)),
            None => (0, 0),
        };
        let deleting = c.new.as_deref().and_then(deletion_of);
        self.check_uid(c, obj);
        let o = &mut self.objects[obj as usize];
        o.last_root = Some(c.root);
        if c.verb == "create" {
            o.gone = false;
        }
        o.gone |= c.deleted;
        if c.deleted {
            o.deleting = None;
        } else if let Some(d) = deleting {
            if o.deleting.is_none() {
                o.delete_root = Some(c.root);
            }
            let at = o.deleting.as_ref().map_or(c.completed, |(t, _)| *t);
            o.deleting = Some((at, d));
        }
        let settled = o.settling.apply(c);
        if c.readiness.is_some() || c.deleted {
            o.last_status = (status, message);
        }
        let failed = c.readiness.as_ref().is_some_and(|r| r.status == "Failed");
        let had_problem = o.problem.is_some();
        o.problem = if o.gone || (settled && !failed) {
            None
        } else {
            // Since when it has had this status (a later write that keeps it
            // does not move the start).
            let since = match &o.problem {
                Some(p) if p.status == status => p.since,
                _ => c.completed,
            };
            Some(Problem {
                status,
                message,
                since,
            })
        };
        o.settled_at = match (&o.problem, o.settled_at) {
            (Some(_), _) => None,
            (None, Some(at)) if !had_problem => Some(at),
            (None, _) => Some(c.completed),
        };
    }

    fn check_uid(&mut self, c: &ChangeRecord, obj: Idx) {
        if c.uid.is_empty() {
            return;
        }
        if c.code < 400
            && (c.verb == "deletecollection"
                || c.object.resource == "namespaces" && c.verb == "delete")
        {
            // Objects removed without a write of their own each.
            let ns = if c.object.resource == "namespaces" {
                &c.object.name
            } else {
                &c.object.namespace
            };
            self.wiped.insert(ns.clone());
        }
        let wiped = self.wiped.contains(&c.object.namespace);
        let o = &mut self.objects[obj as usize];
        match &o.uid {
            Some(u) if **u != *c.uid && !o.gone && !wiped => {
                self.uid_conflicts += 1;
                if self.uid_conflict_example.is_none() {
                    self.uid_conflict_example = Some(format!(
                        "{} changed as uid {} at {} while uid {u} exists",
                        crate::analysis::cascade::object_name(&c.object),
                        c.uid,
                        humantime::format_rfc3339_micros(c.received)
                    ));
                }
            }
            Some(u) if **u == *c.uid => {}
            _ => o.uid = Some(Arc::from(c.uid.as_str())),
        }
    }
}

/// The finalizers of an object whose deletion was requested.
fn deletion_of(v: &Value) -> Option<Vec<String>> {
    crate::json::pointer(v, "/metadata/deletionTimestamp")?.as_str()?;
    Some(
        crate::json::pointer(v, "/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    )
}
