//! Merge: the raw traces of one object (one per window) become one
//! [`ObjectHistory`] — its writes and Events in time order and the objects
//! it is linked to.

use std::collections::HashSet;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

use super::raw::string_attr;
use crate::model::ObjectRef;
use crate::span_model::{
    SPAN_KIND_AUDIT, SPAN_KIND_EVENT, SPAN_KIND_LINK, SPAN_KIND_OBJECT, SPAN_KIND_WATCH, attr,
};

/// What a history entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A write seen in the audit log.
    Audit,
    /// A Kubernetes Event about the object.
    Event,
    /// A change seen only by the list-watch.
    Watch,
    /// Anything else a collector recorded under the object span.
    Other,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Audit => "audit",
            Source::Event => "event",
            Source::Watch => "watch",
            Source::Other => "other",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub source: Source,
    /// The raw span, as the collector wrote it.
    pub span: Span,
}

impl Entry {
    /// Whether it starts within `[start, end]` (ns since the epoch).
    pub fn starts_within(&self, (start, end): (u64, u64)) -> bool {
        (start..=end).contains(&self.span.start_time_unix_nano)
    }
}

/// `acc` widened to cover `range`: folds many time ranges into one.
pub(crate) fn widen(acc: Option<(u64, u64)>, (start, end): (u64, u64)) -> Option<(u64, u64)> {
    Some(acc.map_or((start, end), |(a, b)| (a.min(start), b.max(end))))
}

/// Which side of a relation the *other* object is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Parent,
    Child,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Link {
    pub other: ObjectRef,
    pub role: Role,
    pub class: String,
}

#[derive(Clone, Debug)]
pub struct ObjectHistory {
    pub object: ObjectRef,
    pub uid: String,
    /// Attributes of the raw object span (identity, semantic conventions).
    pub attributes: Vec<KeyValue>,
    /// Raw windows merged here, as window starts in ns since the epoch.
    pub windows: Vec<u64>,
    /// Writes and Events, by start time.
    pub entries: Vec<Entry>,
    /// Distinct relations, in the order first recorded.
    pub links: Vec<Link>,
    /// Entries left out because they lie outside the trace's time range
    /// (activity of a shared Node or ConfigMap long before or after, a
    /// volume's set-up before its claim).
    pub hidden_entries: usize,
}

impl ObjectHistory {
    /// A node for an object known only from a link: nothing recorded in range.
    pub fn placeholder(object: ObjectRef) -> Self {
        Self {
            object,
            uid: String::new(),
            attributes: Vec::new(),
            windows: Vec::new(),
            entries: Vec::new(),
            links: Vec::new(),
            hidden_entries: 0,
        }
    }

    /// This history shown again under another object that uses it
    /// (`Node::copy_of`): all but its links. Copies are leaves, so nothing
    /// reads their links, and a shared object has one per user: a Node
    /// under each of 1,000 Pods was copied with all 1,000 links each time.
    /// Entries outside `range` (its user's activity) are left out and
    /// counted hidden.
    pub fn leaf_copy_within(&self, range: Option<(u64, u64)>) -> Self {
        let within = |e: &&Entry| range.is_none_or(|r| e.starts_within(r));
        let entries: Vec<Entry> = self.entries.iter().filter(within).cloned().collect();
        Self {
            object: self.object.clone(),
            uid: self.uid.clone(),
            attributes: self.attributes.clone(),
            windows: self.windows.clone(),
            hidden_entries: self.hidden_entries + (self.entries.len() - entries.len()),
            entries,
            links: Vec::new(),
        }
    }

    /// First and last instant covered by the entries.
    pub fn active_range(&self) -> Option<(u64, u64)> {
        self.entries.iter().fold(None, |acc, e| {
            let s = e.span.start_time_unix_nano;
            widen(acc, (s, e.span.end_time_unix_nano.max(s)))
        })
    }
}

pub(crate) fn object_of(attrs: &[KeyValue], prefix: &str) -> Option<ObjectRef> {
    let get = |k: &str| string_attr(attrs, &format!("{prefix}{k}")).map(str::to_string);
    Some(ObjectRef::new(
        get(attr::CLUSTER)?,
        get(attr::GROUP).unwrap_or_default(),
        get(attr::RESOURCE)?,
        get(attr::NAMESPACE).unwrap_or_default(),
        get(attr::NAME)?,
    ))
}

/// Merges raw spans of one object (any number of windows). `None` when there
/// is no object span among them.
pub(crate) fn merge(spans: impl IntoIterator<Item = Span>) -> Option<ObjectHistory> {
    merge_until(spans, u64::MAX)
}

/// Like [`merge`], leaving out entries and links recorded after `until`
/// (ns since the epoch): a trace shows what was stored when it was searched.
pub(crate) fn merge_until(
    spans: impl IntoIterator<Item = Span>,
    until: u64,
) -> Option<ObjectHistory> {
    let mut history: Option<ObjectHistory> = None;
    let mut entries = Vec::new();
    let mut links = Vec::new();
    let mut seen_entries = HashSet::new();
    let mut described: Option<(bool, u64, Vec<u8>)> = None;
    for span in spans {
        match string_attr(&span.attributes, attr::SPAN_KIND) {
            Some(SPAN_KIND_OBJECT) => {
                let Some(object) = object_of(&span.attributes, "") else {
                    continue;
                };
                let h = history.get_or_insert_with(|| ObjectHistory {
                    object,
                    uid: String::new(),
                    attributes: span.attributes.clone(),
                    windows: Vec::new(),
                    entries: Vec::new(),
                    links: Vec::new(),
                    hidden_entries: 0,
                });
                // The earliest object span with the uid describes the object
                // (one sent before the uid was known lacks its `*.uid`s),
                // whatever order the store returned them in.
                let uid = string_attr(&span.attributes, attr::UID);
                let order = (
                    uid.is_none(),
                    span.start_time_unix_nano,
                    span.span_id.clone(),
                );
                if described.as_ref().is_none_or(|d| order < *d) {
                    h.uid = uid.unwrap_or_default().to_string();
                    h.attributes = span.attributes.clone();
                    described = Some(order);
                }
                h.windows.push(span.start_time_unix_nano);
            }
            Some(SPAN_KIND_LINK) => {
                if span.start_time_unix_nano > until {
                    continue;
                }
                let role = match string_attr(&span.attributes, attr::LINK_ROLE) {
                    Some("parent") => Role::Parent,
                    Some("child") => Role::Child,
                    _ => continue,
                };
                let (Some(other), Some(class)) = (
                    object_of(&span.attributes, "link."),
                    string_attr(&span.attributes, attr::LINK_CLASS),
                ) else {
                    continue;
                };
                links.push((
                    span.start_time_unix_nano,
                    Link {
                        other,
                        role,
                        class: class.to_string(),
                    },
                ));
            }
            kind => {
                if span.start_time_unix_nano > until {
                    continue;
                }
                if !seen_entries.insert(span.span_id.clone()) {
                    continue; // the same span read twice (overlapping reads)
                }
                let source = match kind {
                    Some(SPAN_KIND_AUDIT) => Source::Audit,
                    Some(SPAN_KIND_EVENT) => Source::Event,
                    Some(SPAN_KIND_WATCH) => Source::Watch,
                    _ => Source::Other,
                };
                entries.push(Entry { source, span });
            }
        }
    }
    let mut h = history?;
    // Ties broken by what the spans are, not by the order the raw store
    // returned them in (which a store does not keep): the same trace loaded
    // twice is laid out the same.
    entries.sort_by(|a, b| {
        (
            a.span.start_time_unix_nano,
            a.span.end_time_unix_nano,
            &a.span.name,
            &a.span.span_id,
        )
            .cmp(&(
                b.span.start_time_unix_nano,
                b.span.end_time_unix_nano,
                &b.span.name,
                &b.span.span_id,
            ))
    });
    h.entries = entries;
    links.sort_by(|(ta, a), (tb, b)| {
        let key = |l: &Link| (l.role == Role::Child, l.other.key(), l.class.clone());
        (ta, key(a)).cmp(&(tb, key(b)))
    });
    let mut seen_links = HashSet::new();
    h.links = links
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| seen_links.insert(l.clone()))
        .collect();
    h.windows.sort_unstable();
    h.windows.dedup();
    Some(h)
}
