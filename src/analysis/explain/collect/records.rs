//! What the collection keeps of each object, refused write, Warning Event,
//! slow hop, edge, cascade root and change, and the strings it interns.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use super::Idx;
use crate::analysis::cascade::{Attempt, Settling};
use crate::analysis::stats::Latencies;
use crate::flow::{CascadeRole, SpanRef};
use crate::model::ObjectRef;

/// Strings seen many times (users, verbs, readiness messages), stored once.
#[derive(Default)]
pub(in crate::analysis::explain) struct Interner {
    ids: HashMap<Arc<str>, u32>,
    all: Vec<Arc<str>>,
}

impl Interner {
    pub(in crate::analysis::explain) fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.all.len() as u32;
        let s: Arc<str> = Arc::from(s);
        self.all.push(s.clone());
        self.ids.insert(s, id);
        id
    }

    pub(in crate::analysis::explain) fn get(&self, id: u32) -> &str {
        self.all.get(id as usize).map_or("", |s| s)
    }
}

/// An object's readiness problem at the end (or when last seen).
#[derive(Clone, Debug)]
pub(in crate::analysis::explain) struct Problem {
    pub status: u32,
    pub message: u32,
    /// The write after which it had it.
    pub since: SystemTime,
}

/// What is known of one object.
pub(in crate::analysis::explain) struct Obj {
    pub object: ObjectRef,
    /// (parent, link class); owners first.
    pub parents: Vec<(Idx, u32)>,
    pub children: Vec<(Idx, u32)>,
    /// Kept only when the scope selects by label.
    pub labels: Option<BTreeMap<String, String>>,
    pub(super) settling: Settling,
    /// Not settled (or ended Failed) after its last counted write.
    pub problem: Option<Problem>,
    /// When it last became settled (and stayed so since); `None` while it
    /// has a problem.
    pub settled_at: Option<SystemTime>,
    /// The last readiness it had (status, message ids; 0 = none).
    pub last_status: (u32, u32),
    pub gone: bool,
    /// The cascade of its last write.
    pub last_root: Option<SpanRef>,
    /// When its deletion was requested, and the finalizers holding it.
    pub deleting: Option<(SystemTime, Vec<String>)>,
    /// The cascade of the write that requested its deletion.
    pub delete_root: Option<SpanRef>,
    /// The uid of the object that exists under this name now.
    pub(super) uid: Option<Arc<str>>,
    /// A cascade a user started changed it (or tried to).
    pub user_touched: bool,
}

/// A refused write.
pub(in crate::analysis::explain) struct Failed {
    /// Where it shows: the object, or for a create refused before it had
    /// a name, the owner its request names.
    pub obj: Idx,
    pub attempted: ObjectRef,
    pub user: u32,
    /// `verb[ subresource]`.
    pub verb: u32,
    pub code: i32,
    pub message: String,
    pub received: SystemTime,
    pub root: SpanRef,
    /// A 409 conflict that its writer retried successfully.
    pub retried: bool,
    /// Its place in its writer's attempts at the target.
    pub attempt: Attempt,
}

/// Warning Events, merged by object, reason and message.
pub(in crate::analysis::explain) struct EventAgg {
    pub obj: Idx,
    pub reason: u32,
    pub message: String,
    pub component: u32,
    pub first: SystemTime,
    pub last: SystemTime,
    pub count: u64,
}

/// A hop that was among the slowest of its edge.
#[derive(Clone, Debug)]
pub(in crate::analysis::explain) struct SlowHop {
    pub hop_us: u64,
    pub obj: Idx,
    pub write: String,
    pub cause: String,
    pub received: SystemTime,
    pub root: SpanRef,
}

/// Hops of one edge class.
#[derive(Default)]
pub(in crate::analysis::explain) struct Edge {
    pub latencies: Latencies,
    /// Retries of refused writes along the edge (not hops), and their
    /// writers' back-off in all.
    pub retries: u64,
    pub backoff: std::time::Duration,
    /// Slowest first.
    pub slowest: Vec<SlowHop>,
}

/// An external write that started a cascade.
pub(in crate::analysis::explain) struct RootInfo {
    pub name: String,
    pub received: SystemTime,
    pub changes: Vec<String>,
}

/// One change, for the cascade timelines.
pub(in crate::analysis::explain) struct Row {
    pub obj: Idx,
    pub user: u32,
    pub verb: u32,
    pub subresource: u32,
    pub code: i32,
    pub received: SystemTime,
    pub completed: SystemTime,
    pub span: SpanRef,
    /// The resourceVersion after the change (0: not known).
    pub version: u64,
    pub cause: Option<SpanRef>,
    pub edge: u32,
    pub role: CascadeRole,
    pub depth: u32,
    pub status: u32,
    pub message: u32,
    pub deleted: bool,
}
