//! The audit log and the list-watch see the same writes: each is shown once.
//! A diff the watch computed waits (bounded) in a ledger, keyed by
//! `object key@resourceVersion`, for the audit event of the same write to
//! claim it; an audit write leaves a marker the watch's later copy finds.
//! Writes an audit event cannot name by version (a binding, the start of a
//! graceful deletion) are matched by aliases instead.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::json::Value;
use crate::model::KeyHasher;
use moka::policy::EvictionPolicy;

use super::super::diff::Change;
use crate::flow::{AuditEvent, WatchChange, WatchKind};
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::ObjectWindow;

use super::handoff::AppliedWrite;

/// How long the ledger keeps an entry.
const LEDGER_TTL: Duration = Duration::from_secs(600);

const CLAIM_NONE: u8 = 0;
const CLAIM_AUDIT: u8 = 1;
const CLAIM_WATCH: u8 = 2;

/// Ledger aliases of writes that an audit event cannot name by version.
const ALIAS_BINDING: &str = "binding";
const ALIAS_DELETING: &str = "deleting";

/// A diff between two versions of an object, and whether a write's audit
/// span already shows it.
pub(super) struct LedgerEntry {
    pub changes: Vec<Change>,
    /// The versions the watch saw the diff between (empty in an audit
    /// event's marker): the audit span of the same write reports them when
    /// the watch got ahead of it and the last state is already newer.
    old_rv: Box<str>,
    new_rv: Box<str>,
    /// CLAIM_NONE, CLAIM_AUDIT or CLAIM_WATCH: who showed the diff.
    claimed: AtomicU8,
}

impl LedgerEntry {
    fn pending(changes: Vec<Change>, old_rv: &str, new_rv: &str) -> Self {
        Self {
            changes,
            old_rv: old_rv.into(),
            new_rv: new_rv.into(),
            claimed: AtomicU8::new(CLAIM_NONE),
        }
    }

    /// Shown by the audit span already: only marks the write as shown.
    fn claimed() -> Self {
        Self {
            changes: Vec::new(),
            old_rv: "".into(),
            new_rv: "".into(),
            claimed: AtomicU8::new(CLAIM_AUDIT),
        }
    }

    /// Takes the diff for `by` unless someone showed it already.
    fn claim(&self, by: u8) -> bool {
        self.claimed
            .compare_exchange(CLAIM_NONE, by, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn claimed_by(&self) -> u8 {
        self.claimed.load(Ordering::Acquire)
    }
}

/// A watch change waiting for its audit event.
pub(super) struct PendingWatch {
    pub due: Instant,
    /// The diff itself, not only its ledger key: the ledger may have evicted
    /// it by the time the wait is over, and the change must still be shown.
    pub entry: Arc<LedgerEntry>,
    /// Where an audit event of the same write claims it, or leaves a marker
    /// when the entry was evicted: the version key, then the aliases.
    pub ledger_keys: Vec<u128>,
    pub ow: ObjectWindow,
    pub change: WatchChange,
    pub old_rv: String,
    pub snapshot: Option<Value>,
}

/// The ledger of diffs seen by the watch, and the watch changes waiting for
/// their audit event.
pub(super) struct Ledger {
    entries: moka::sync::Cache<u128, Arc<LedgerEntry>>,
    pending: std::sync::Mutex<VecDeque<PendingWatch>>,
    /// How long a watch change waits for its audit event.
    pub wait: Duration,
}

impl Ledger {
    pub(super) fn new(max_entries: u64, wait: Duration, metrics: &Arc<Metrics>) -> Self {
        let evictions = CacheEvictions::new(
            metrics,
            Cache::Ledger,
            "a write seen by both the watch and the audit log may be shown twice; raise --watch-ledger-entries",
        );
        Self {
            // LRU, not moka's default TinyLFU, which may refuse a new entry
            // outright when full: here the newest entries matter most.
            entries: moka::sync::Cache::builder()
                .max_capacity(max_entries)
                .time_to_live(LEDGER_TTL)
                .eviction_policy(EvictionPolicy::lru())
                .eviction_listener(move |_, _, cause| evictions.record(cause))
                .build(),
            pending: Default::default(),
            wait,
        }
    }

    /// Watch changes waiting for their audit event.
    pub(super) fn pending(&self) -> usize {
        self.pending.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// The ledger stage of an audited write that succeeded: `w` with the
    /// diff and versions the watch saw of the same write, if it saw it
    /// first; else a marker is left for the watch's copy.
    pub(super) fn reconcile_audit(&self, ev: &AuditEvent, mut w: AppliedWrite) -> AppliedWrite {
        let keys = audit_claim_keys(
            &w.key,
            &ev.verb,
            ev.subresource(),
            &w.new_rv,
            w.outcome.state.is_some(),
            w.outcome.snapshot.is_some(),
        );
        let mut watch_old_rv = String::new();
        if let Some(changes) = self.claim_for_audit(&keys, &mut watch_old_rv, &mut w.new_rv) {
            w.outcome.changes = changes;
        }
        w.settle_versions(ev, &watch_old_rv);
        w
    }

    /// The audit side of a successful write: takes what the watch saw of it
    /// under `keys` (see [`audit_claim_keys`]), or leaves a marker there so
    /// the watch's copy, coming later, is not shown again. Returns the
    /// watch's diff between consecutive versions, when it had one; sets
    /// `watch_old_rv` to the version the watch saw before the write, and an
    /// empty `new_rv` to the one it saw the write make.
    fn claim_for_audit(
        &self,
        keys: &[u128],
        watch_old_rv: &mut String,
        new_rv: &mut String,
    ) -> Option<Vec<Change>> {
        let mut changes = None;
        for &lk in keys {
            match self.entries.get(&lk) {
                // The watch saw this write first: its diff between consecutive
                // versions is the write's diff, shown here rather than alone.
                Some(entry) if entry.claim(CLAIM_AUDIT) => {
                    if changes.is_none() && !entry.changes.is_empty() {
                        changes = Some(entry.changes.clone());
                    }
                    if watch_old_rv.is_empty() && !entry.new_rv.is_empty() {
                        *watch_old_rv = entry.old_rv.to_string();
                        if new_rv.is_empty() {
                            *new_rv = entry.new_rv.to_string();
                        }
                    }
                }
                Some(_) => {}
                // A marker for the watch's copy of this write: claimed entries'
                // changes are never read, so none are kept (they were most of
                // the ledger's memory).
                None => self.entries.insert(lk, Arc::new(LedgerEntry::claimed())),
            }
        }
        changes
    }

    /// Files the watch's diff of a write under its version key and its
    /// aliases, to wait for the audit event; `None` when that event showed
    /// the write already.
    pub(super) fn file(
        &self,
        object_key: &str,
        version_key: u128,
        kind: WatchKind,
        changes: Vec<Change>,
        old_rv: &str,
        new_rv: &str,
    ) -> Option<(Arc<LedgerEntry>, Vec<u128>)> {
        let entry = self.entries.get_with(version_key, || {
            Arc::new(LedgerEntry::pending(changes, old_rv, new_rv))
        });
        if entry.claimed_by() != CLAIM_NONE {
            return None;
        }
        // Writes whose audit event carries no resourceVersion of this version
        // (a binding answers with a Status; one delete request can write two
        // versions) are matched by what they did instead.
        let mut ledger_keys = vec![version_key];
        for alias in watch_aliases(kind, &entry.changes) {
            let alias_key = ledger_key(object_key, alias);
            match self.entries.get(&alias_key) {
                Some(shown) if shown.claimed_by() == CLAIM_AUDIT => {
                    entry.claim(CLAIM_AUDIT);
                    return None;
                }
                _ => self.entries.insert(alias_key, entry.clone()),
            }
            ledger_keys.push(alias_key);
        }
        Some((entry, ledger_keys))
    }

    pub(super) fn wait(&self, p: PendingWatch) {
        self.pending
            .lock()
            .expect("pending watch changes")
            .push_back(p);
    }

    /// The next change whose wait is over (any when `all`) that no audit
    /// event has shown; it is then the watch's to show.
    pub(super) fn next_due(&self, now: Instant, all: bool) -> Option<PendingWatch> {
        loop {
            let p = {
                let mut q = self.pending.lock().expect("pending watch changes");
                match q.front() {
                    Some(p) if all || p.due <= now => q.pop_front(),
                    _ => None,
                }
            }?;
            let entry = &p.entry;
            // An audit event of this write that came after the ledger had
            // evicted the entry left a marker of its own under these keys.
            let marked = p.ledger_keys.iter().any(|k| {
                self.entries.get(k).is_some_and(|other| {
                    !Arc::ptr_eq(&other, entry) && other.claimed_by() == CLAIM_AUDIT
                })
            });
            if marked {
                entry.claim(CLAIM_AUDIT);
            }
            if !entry.claim(CLAIM_WATCH) {
                continue; // the audit span shows it
            }
            // Shown now: an audit event arriving later shows its own diff
            // either way, so the entry (and its diff) need not be kept.
            self.entries.invalidate(&p.ledger_keys[0]);
            return Some(p);
        }
    }
}

/// The ledger keys under which the watch may hold the copy of a successful
/// audited write of `object_key`: by its new version, or by alias.
pub(super) fn audit_claim_keys(
    object_key: &str,
    verb: &str,
    subresource: &str,
    new_rv: &str,
    has_state: bool,
    has_snapshot: bool,
) -> Vec<u128> {
    let mut keys = Vec::new();
    if subresource == "binding" {
        // Answered with a Status: no resourceVersion to match by.
        if has_state {
            keys.push(ledger_key(object_key, ALIAS_BINDING));
        }
    } else if verb == "delete" || verb == "deletecollection" {
        keys.push(ledger_key(object_key, "deleted"));
        if !new_rv.is_empty() {
            keys.push(ledger_key(object_key, new_rv));
        }
        if has_snapshot {
            keys.push(ledger_key(object_key, ALIAS_DELETING));
        }
    } else if !new_rv.is_empty() {
        keys.push(ledger_key(object_key, new_rv));
    }
    keys
}

/// The aliases a watch change is also filed under: the scheduler's binding
/// (`spec.nodeName` set), or the start of a graceful deletion (only the
/// deletion fields changed).
fn watch_aliases(kind: WatchKind, changes: &[Change]) -> Vec<&'static str> {
    if kind == WatchKind::Deleted || changes.is_empty() {
        return Vec::new();
    }
    let mut aliases = Vec::new();
    if changes
        .iter()
        .any(|c| &*c.path == "spec.nodeName" && c.old.is_none() && c.new.is_some())
    {
        aliases.push(ALIAS_BINDING);
    }
    if changes.iter().all(|c| {
        matches!(
            &*c.path,
            "metadata.deletionTimestamp"
                | "metadata.deletionGracePeriodSeconds"
                | "metadata.generation"
        )
    }) {
        aliases.push(ALIAS_DELETING);
    }
    aliases
}

/// The ledger's key of an object's version (`deleted` for its deletion).
pub(super) fn ledger_key(object_key: &str, version: &str) -> u128 {
    let mut h = KeyHasher::new();
    for part in [object_key, "@", version] {
        h.update(part.as_bytes());
    }
    h.digest128()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, old: Option<&str>, new: Option<&str>) -> Change {
        Change {
            path: path.into(),
            old: old.map(Into::into),
            new: new.map(Into::into),
        }
    }

    fn ledger() -> Ledger {
        Ledger::new(1000, Duration::ZERO, &Arc::new(Metrics::default()))
    }

    const POD: &str = "c/core/pods/ns/p";

    #[test]
    fn the_audit_event_takes_the_diff_the_watch_saw_first() {
        let l = ledger();
        let diff = vec![change("spec.replicas", Some("1"), Some("3"))];
        let filed = l.file(
            POD,
            ledger_key(POD, "12"),
            WatchKind::Modified,
            diff.clone(),
            "10",
            "12",
        );
        assert!(filed.is_some());
        let keys = audit_claim_keys(POD, "update", "", "12", true, false);
        let (mut old_rv, mut new_rv) = (String::new(), String::new());
        let changes = l.claim_for_audit(&keys, &mut old_rv, &mut new_rv);
        assert_eq!(changes, Some(diff));
        assert_eq!((&*old_rv, &*new_rv), ("10", "12"));
        // The watch no longer shows it.
        let (entry, keys) = filed.unwrap();
        l.wait(pending(entry, keys));
        assert!(l.next_due(Instant::now(), true).is_none());
    }

    #[test]
    fn the_watch_copy_of_a_write_already_shown_is_not_filed() {
        let l = ledger();
        let keys = audit_claim_keys(POD, "patch", "", "12", true, false);
        let (mut old_rv, mut new_rv) = (String::new(), String::new());
        assert_eq!(l.claim_for_audit(&keys, &mut old_rv, &mut new_rv), None);
        assert!(old_rv.is_empty() && new_rv.is_empty());
        let diff = vec![change("metadata.labels.a", None, Some("\"b\""))];
        assert!(
            l.file(
                POD,
                ledger_key(POD, "12"),
                WatchKind::Modified,
                diff,
                "10",
                "12"
            )
            .is_none()
        );
    }

    #[test]
    fn an_unclaimed_change_is_the_watchs_once_due() {
        let l = ledger();
        let diff = vec![change(
            "status.phase",
            Some("\"Pending\""),
            Some("\"Running\""),
        )];
        let (entry, keys) = l
            .file(
                POD,
                ledger_key(POD, "12"),
                WatchKind::Modified,
                diff,
                "10",
                "12",
            )
            .unwrap();
        l.wait(pending(entry, keys));
        assert_eq!(l.pending(), 1);
        let p = l.next_due(Instant::now(), false).expect("due at once");
        assert_eq!(p.entry.claimed_by(), CLAIM_WATCH);
        // An audit event arriving later shows its own diff: nothing to take.
        let keys = audit_claim_keys(POD, "update", "status", "12", true, false);
        assert_eq!(
            l.claim_for_audit(&keys, &mut String::new(), &mut String::new()),
            None
        );
    }

    #[test]
    fn a_binding_and_a_graceful_deletion_are_matched_by_alias() {
        let l = ledger();
        let bound = vec![change("spec.nodeName", None, Some("\"n1\""))];
        let (entry, keys) = l
            .file(
                POD,
                ledger_key(POD, "13"),
                WatchKind::Modified,
                bound.clone(),
                "12",
                "13",
            )
            .unwrap();
        assert_eq!(
            keys.len(),
            2,
            "filed under its version and the binding alias"
        );
        // The binding's audit event has no version: it claims by alias.
        let (mut old_rv, mut new_rv) = (String::new(), String::new());
        let keys_of_binding = audit_claim_keys(POD, "create", "binding", "", true, false);
        let changes = l.claim_for_audit(&keys_of_binding, &mut old_rv, &mut new_rv);
        assert_eq!(changes, Some(bound));
        // Its versions are the ones the watch saw.
        assert_eq!((&*old_rv, &*new_rv), ("12", "13"));
        l.wait(pending(entry, keys));
        assert!(l.next_due(Instant::now(), true).is_none());

        // The delete's audit event came first: the watch's deletion fields
        // change finds the marker it left.
        let l = ledger();
        let keys_of_delete = audit_claim_keys(POD, "delete", "", "", true, true);
        l.claim_for_audit(&keys_of_delete, &mut String::new(), &mut String::new());
        let deleting = vec![
            change("metadata.deletionTimestamp", None, Some("\"t\"")),
            change("metadata.deletionGracePeriodSeconds", None, Some("30")),
        ];
        assert!(
            l.file(
                POD,
                ledger_key(POD, "14"),
                WatchKind::Modified,
                deleting,
                "13",
                "14"
            )
            .is_none()
        );
    }

    #[test]
    fn an_audit_marker_left_after_the_entry_was_evicted_still_counts() {
        let l = ledger();
        let diff = vec![change("data.a", Some("1"), Some("2"))];
        let (entry, keys) = l
            .file(
                POD,
                ledger_key(POD, "12"),
                WatchKind::Modified,
                diff,
                "10",
                "12",
            )
            .unwrap();
        l.entries.invalidate(&keys[0]);
        let keys_of_update = audit_claim_keys(POD, "update", "", "12", true, false);
        l.claim_for_audit(&keys_of_update, &mut String::new(), &mut String::new());
        l.wait(pending(entry, keys));
        assert!(l.next_due(Instant::now(), true).is_none());
    }

    #[test]
    fn aliases_only_for_what_an_audit_event_cannot_name_by_version() {
        let del = [change("metadata.deletionTimestamp", None, Some("\"t\""))];
        assert_eq!(
            watch_aliases(WatchKind::Modified, &del),
            vec![ALIAS_DELETING]
        );
        assert!(watch_aliases(WatchKind::Deleted, &del).is_empty());
        let rebind = [change("spec.nodeName", Some("\"a\""), Some("\"b\""))];
        assert!(watch_aliases(WatchKind::Modified, &rebind).is_empty());
        assert!(watch_aliases(WatchKind::Modified, &[]).is_empty());
        assert_ne!(ledger_key(POD, "1"), ledger_key(POD, "11"));
        assert_ne!(ledger_key("c/core/pods/ns/p1", "1"), ledger_key(POD, "11"));
    }

    fn pending(entry: Arc<LedgerEntry>, ledger_keys: Vec<u128>) -> PendingWatch {
        let object = crate::model::ObjectRef::new("c", "", "pods", "ns", "p".to_string());
        PendingWatch {
            due: Instant::now(),
            entry,
            ledger_keys,
            ow: ObjectWindow {
                object: object.clone(),
                window_start: 0,
            },
            change: WatchChange {
                object,
                kind: WatchKind::Modified,
                state: Value::new_null(),
                observed: std::time::UNIX_EPOCH,
            },
            old_rv: String::new(),
            snapshot: None,
        }
    }
}
