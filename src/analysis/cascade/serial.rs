//! Serial writes: a controller that makes several writes for one cause in
//! batches, each batch sent once the previous one was answered (the
//! ReplicaSet and Job controllers' slow start: one Pod, then two, then
//! four). A write of a later batch was held back by the batch before, not
//! by a slow reaction to the cause: its hop is measured from the response
//! it waited for, and the critical path passes through that write (a slow
//! first create — an admission webhook taking 800 ms — is what made the
//! second Pod late).
//!
//! A create follows a sibling when the same writer made both (same
//! resource and namespace) for the same cause, and the
//! sibling's response completed at most [`SERIAL_GAP`] before this
//! write's request arrived, later than the cause completed.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use crate::flow::{ChangeRecord, SpanRef};

/// How soon after a sibling's response a write must arrive to have waited
/// for it: a controller sends its next batch as soon as the last answer of
/// the previous one is in (a few ms on a busy control plane); a write that
/// comes later was held by something else.
pub(crate) const SERIAL_GAP: Duration = Duration::from_millis(50);

/// Siblings remembered per (writer, work, cause): the newest. A batch
/// larger than this may find a sibling of its batch before that is not the
/// last answered; then the gap is usually over [`SERIAL_GAP`] and the write
/// keeps its hop from the cause.
const SIBLINGS_KEPT: usize = 64;

/// (writer, work, cause) keys followed at most; the oldest is forgotten.
const MAX_KEYS: usize = 100_000;

/// The earlier write of the same writer and cause whose answer a write
/// waited for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AfterSibling {
    pub span: SpanRef,
    /// From it to this write's request: the writer's own part of the wait.
    pub gap: Duration,
}

/// Writer, subresource, resource, namespace, cause.
type Key = (String, String, String, String, SpanRef);

struct Siblings {
    /// (response completed, span), newest request last.
    writes: VecDeque<(SystemTime, SpanRef)>,
    seq: u64,
}

/// Follows writes in request order and tells each create whether it
/// waited for a sibling's answer.
#[derive(Default)]
pub(crate) struct SerialCreates {
    by_key: HashMap<Key, Siblings>,
    seq: u64,
    /// Keys forgotten at the bound.
    pub forgotten: u64,
}

impl SerialCreates {
    /// Judges `c`, then remembers it as a sibling of the writes to come.
    pub(crate) fn observe(&mut self, c: &ChangeRecord) -> Option<AfterSibling> {
        let cause = c.cause.as_ref()?;
        // Creates only: a writer's next write to the same object is its
        // next pass over it (another reconcile), not the next batch.
        if c.user.is_empty() || c.verb != "create" {
            return None;
        }
        let key: Key = (
            c.user.clone(),
            c.subresource.clone(),
            c.object.resource.clone(),
            c.object.namespace.clone(),
            cause.span,
        );
        self.seq += 1;
        let seq = self.seq;
        let siblings = self.by_key.entry(key).or_insert_with(|| Siblings {
            writes: VecDeque::new(),
            seq,
        });
        siblings.seq = seq;
        let after = siblings
            .writes
            .iter()
            .filter(|(completed, _)| *completed <= c.received)
            .max_by_key(|(completed, _)| *completed)
            .and_then(|&(completed, span)| {
                let gap = c.received.duration_since(completed).ok()?;
                // Answered after the cause: the wait it explains is part of
                // the hop (a sibling answered before the cause completed
                // explains none of it).
                (gap <= SERIAL_GAP && gap < cause.hop).then_some(AfterSibling { span, gap })
            });
        siblings.writes.push_back((c.completed, c.span));
        if siblings.writes.len() > SIBLINGS_KEPT {
            siblings.writes.pop_front();
        }
        if self.by_key.len() > MAX_KEYS {
            let oldest = self
                .by_key
                .iter()
                .min_by_key(|(_, s)| s.seq)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_key.remove(&k);
                self.forgotten += 1;
            }
        }
        after
    }
}

/// For each change (in request order), the index of the sibling whose
/// answer it waited for.
pub(crate) fn after_siblings(changes: &[ChangeRecord]) -> Vec<Option<usize>> {
    let index: HashMap<SpanRef, usize> = changes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.span, i))
        .collect();
    let mut serial = SerialCreates::default();
    changes
        .iter()
        .map(|c| serial.observe(c).and_then(|a| index.get(&a.span).copied()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cascade::testing::{caused_by, change, obj};

    fn pod_create(
        n: u8,
        name: &str,
        received: u64,
        completed: u64,
        rs: &ChangeRecord,
    ) -> ChangeRecord {
        let mut c = change(n, obj("pods", name), "create", received, completed, None);
        c.user = "system:serviceaccount:kube-system:replicaset-controller".into();
        caused_by(c, rs, "replicasets → pods create")
    }

    #[test]
    fn a_batch_sent_when_the_one_before_was_answered_follows_it() {
        let rs = change(1, obj("replicasets", "web-1"), "create", 0, 5, None);
        let first = pod_create(2, "web-1-a", 6, 866, &rs);
        let second = pod_create(3, "web-1-b", 869, 1_700, &rs);
        let third = pod_create(4, "web-1-c", 869, 1_650, &rs);
        let after = after_siblings(&[rs, first, second, third]);
        assert_eq!(after, [None, None, Some(1), Some(1)]);
    }

    #[test]
    fn writes_of_one_pass_or_long_after_or_of_another_cause_follow_nothing() {
        let rs = change(1, obj("replicasets", "web-1"), "create", 0, 5, None);
        // Sent together: neither waited for the other's answer.
        let a = pod_create(2, "web-1-a", 6, 10, &rs);
        let b = pod_create(3, "web-1-b", 7, 11, &rs);
        // Seconds later: something else held it.
        let late = pod_create(4, "web-1-c", 2_000, 2_004, &rs);
        // Right after, but for another cause.
        let other_rs = change(5, obj("replicasets", "web-2"), "create", 2_000, 2_001, None);
        let other = pod_create(6, "web-2-a", 2_005, 2_008, &other_rs);
        let after = after_siblings(&[rs, a, b, late, other_rs, other]);
        assert_eq!(after, [None; 6]);
    }
}
