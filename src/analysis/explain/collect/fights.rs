//! Writers fighting over a field: a spec field set back and forth by two
//! or more writers (two controllers, an autoscaler and a GitOps sync, an
//! operator and a person) never settles, and each writer's write undoes
//! the other's. Kept per (object, field): who set it last, how often it
//! changed hands, and each writer's last value.

use std::collections::HashMap;
use std::time::SystemTime;

use super::{Idx, State};
use crate::aggregate::diff;
use crate::flow::{ChangeRecord, SpanRef};
use crate::judgement::FieldOwnership;

/// Fields followed at most (further ones are not).
const MAX_FIELDS: usize = 200_000;
/// A value is kept cut to this many characters.
const MAX_VALUE_CHARS: usize = 80;

/// One field's writes.
pub(in crate::analysis::explain) struct FieldWrites {
    pub ownership: FieldOwnership<u32>,
    /// (writer, the value it set last), for the writers it remembers.
    pub values: Vec<(u32, String)>,
    pub last_writer: u32,
    pub first: SystemTime,
    pub last: SystemTime,
    /// The cascade of the last write.
    pub root: SpanRef,
}

impl State {
    /// Notes the spec fields an update or patch changed, by writer.
    pub(super) fn record_fields(&mut self, c: &ChangeRecord, obj: Idx, user: u32) {
        if c.code >= 400
            || user == 0
            || !c.subresource.is_empty()
            || !matches!(c.verb.as_str(), "update" | "patch")
        {
            return;
        }
        let (Some(old), Some(new)) = (c.old.as_deref(), c.new.as_deref()) else {
            return;
        };
        for change in diff::diff_unless(old, new, |field| field != "spec") {
            if !change.path.starts_with("spec") {
                continue;
            }
            let key = (obj, Box::<str>::from(&*change.path));
            if !self.fields.contains_key(&key) && self.fields.len() >= MAX_FIELDS {
                self.fields_dropped += 1;
                continue;
            }
            let value = change.new.as_deref().unwrap_or("∅");
            let value = if value.chars().count() > MAX_VALUE_CHARS {
                format!(
                    "{}…",
                    value.chars().take(MAX_VALUE_CHARS).collect::<String>()
                )
            } else {
                value.to_string()
            };
            let f = self.fields.entry(key).or_insert_with(|| FieldWrites {
                ownership: FieldOwnership::default(),
                values: Vec::new(),
                last_writer: user,
                first: c.received,
                last: c.received,
                root: c.root,
            });
            f.ownership.set(&user);
            f.last_writer = user;
            f.last = f.last.max(c.received);
            f.root = c.root;
            match f.values.iter().position(|(w, _)| *w == user) {
                Some(i) => f.values[i].1 = value,
                None if f.values.len() < 8 => f.values.push((user, value)),
                None => {}
            }
        }
    }
}

/// Fields written by several writers, keyed by (object, path).
pub(in crate::analysis::explain) type Fields = HashMap<(Idx, Box<str>), FieldWrites>;
