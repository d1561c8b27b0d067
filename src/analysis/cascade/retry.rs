//! Retries: a controller whose write was refused tries again later, after
//! a back-off of its own (the ReplicaSet controller under a quota retries
//! its Pod creates for minutes). Those attempts are one intent: the cause
//! of every attempt is the first attempt's, the wait between attempts is
//! back-off — never a hop's latency, never on the critical path.
//!
//! A write is a retry when its writer's previous attempt at the same
//! target (the object; a create by `generateName`: the owner's prefix) was
//! refused, and its inferred cause is that attempt's cause or a write the
//! writer made itself since (its own status update noting the failure).
//! Any other cause is a new intent.
//!
//! A controller's write made after what it had made failed (a Job's next
//! Pod after one failed: edge `pods failed → pods create`) is a retry too:
//! attempt n of the writer's work on that target (the owner's name prefix),
//! its wait since the failure the controller's back-off.
//!
//! So is a writer's write caused by its own write that left the object
//! failed (a kubelet pulling an image again after `ErrImagePull`, each
//! pull after a longer back-off): attempt n of the work that failed, its
//! wait since the last attempt back-off, until a write leaves the object
//! not failed (that one is the last attempt).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::flow::{ChangeRecord, SpanRef, is_after_failure};

/// Open attempts followed at most (the oldest is forgotten beyond).
const MAX_OPEN: usize = 100_000;

/// What a write is in its writer's attempts at one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A write of its own intent (the first attempt, or no refusal before).
    First,
    /// Attempt `attempt` (2, 3, …) of the intent the refused first attempt
    /// began; `backoff` is the wait since the previous attempt's response,
    /// `waited` since the first attempt's request.
    Retry {
        attempt: u32,
        backoff: Duration,
        waited: Duration,
        /// The first attempt's hop from the cause: the propagation latency.
        first_hop: Duration,
    },
}

impl Attempt {
    pub fn is_retry(self) -> bool {
        matches!(self, Attempt::Retry { .. })
    }
}

/// Writer, verb, subresource, resource, namespace.
type Key = (String, String, String, String, String);

struct Open {
    /// The object's name, or a `generateName` prefix (ends with `-`).
    target: String,
    cause: Option<SpanRef>,
    first_received: SystemTime,
    last_completed: SystemTime,
    first_hop: Duration,
    attempts: u32,
    /// Order of opening, for eviction.
    seq: u64,
}

/// Follows writers' refused attempts through a stream of changes (in
/// request order) and tells each change whether it retries one.
#[derive(Default)]
pub(crate) struct Retries {
    open: HashMap<Key, Vec<Open>>,
    /// Accepted creates by generated name (writer, resource, namespace,
    /// name prefix): the first attempt of work a failure may make the
    /// writer do again.
    starts: HashMap<(Key, String), Start>,
    len: usize,
    seq: u64,
    /// Objects a writer left failed, by (writer, resource, namespace,
    /// name): the work its next write caused by that one attempts again.
    failing: HashMap<(String, String, String, String), Failing>,
    /// Attempts forgotten at the bound: their retries count as first
    /// attempts.
    pub forgotten: u64,
}

/// A writer's work on an object, failed so far.
struct Failing {
    /// The writer's last write on it (which left it failed).
    last: SpanRef,
    first_received: SystemTime,
    last_completed: SystemTime,
    first_hop: Duration,
    attempts: u32,
    seq: u64,
}

/// The first accepted create of a generated-name target, and how many
/// attempts followed a failure since.
struct Start {
    first_received: SystemTime,
    first_hop: Duration,
    attempts: u32,
    seq: u64,
}

/// The `generateName` prefix of a generated name (`migrate-5jtzf` →
/// `migrate-`), if it looks like one.
fn generated_prefix(name: &str) -> Option<&str> {
    let cut = name.rfind('-')? + 1;
    (cut > 1 && cut < name.len()).then(|| &name[..cut])
}

fn matches_target(open: &str, name: &str) -> bool {
    open == name || (open.ends_with('-') && name.starts_with(open))
}

impl Retries {
    /// Judges `c`, then remembers it: a refused write opens (or continues)
    /// an attempt; an accepted one closes it.
    pub(crate) fn observe(&mut self, c: &ChangeRecord) -> Attempt {
        if c.user.is_empty() {
            return Attempt::First;
        }
        if let Some(verdict) = self.again_after_failing(c) {
            return verdict;
        }
        let key: Key = (
            c.user.clone(),
            c.verb.clone(),
            c.subresource.clone(),
            c.object.resource.clone(),
            c.object.namespace.clone(),
        );
        let refused = c.code >= 400;
        let name = &c.object.name;
        let cause = c.cause.as_ref();
        if !refused
            && c.verb == "create"
            && let Some(prefix) = generated_prefix(name)
        {
            let after_failure = cause.is_some_and(|k| is_after_failure(&k.edge));
            let target = (key.clone(), prefix.to_string());
            if !self.starts.contains_key(&target) {
                self.seq += 1;
                self.starts.insert(
                    target.clone(),
                    Start {
                        first_received: c.received,
                        first_hop: cause.map_or(Duration::ZERO, |k| k.hop),
                        attempts: 1,
                        seq: self.seq,
                    },
                );
                if self.starts.len() > MAX_OPEN {
                    self.forget_oldest_start();
                }
            }
            if let Some(k) = cause.filter(|_| after_failure)
                && let Some(start) = self.starts.get_mut(&target)
            {
                start.attempts += 1;
                return Attempt::Retry {
                    attempt: start.attempts,
                    backoff: k.hop,
                    waited: c
                        .received
                        .duration_since(start.first_received)
                        .unwrap_or_default(),
                    first_hop: start.first_hop,
                };
            }
        }
        let own_write = cause.is_some_and(|k| {
            k.name
                .strip_prefix(c.user.as_str())
                .is_some_and(|rest| rest.starts_with(' '))
        });
        let list = self.open.entry(key.clone()).or_default();
        let found = list.iter().position(|o| matches_target(&o.target, name));
        let mut opens = refused;
        let verdict = match found {
            // Sent before the previous attempt's answer: one of several
            // writes of the same pass (a ReplicaSet creating two Pods), not
            // a retry.
            Some(i) if c.received < list[i].last_completed => {
                list[i].last_completed = list[i].last_completed.max(c.completed);
                opens = false;
                Attempt::First
            }
            Some(i) if cause.map(|k| k.span) == list[i].cause || own_write => {
                let o = &mut list[i];
                o.attempts += 1;
                let verdict = Attempt::Retry {
                    attempt: o.attempts,
                    backoff: c
                        .received
                        .duration_since(o.last_completed)
                        .unwrap_or_default(),
                    waited: c
                        .received
                        .duration_since(o.first_received)
                        .unwrap_or_default(),
                    first_hop: o.first_hop,
                };
                o.last_completed = o.last_completed.max(c.completed);
                if !refused {
                    list.swap_remove(i);
                    self.len -= 1;
                }
                opens = false;
                verdict
            }
            Some(i) => {
                // A new intent: the old attempt is over.
                list.swap_remove(i);
                self.len -= 1;
                Attempt::First
            }
            None => Attempt::First,
        };
        if opens {
            self.seq += 1;
            list.push(Open {
                target: name.clone(),
                cause: cause.map(|k| k.span),
                first_received: c.received,
                last_completed: c.completed,
                first_hop: cause.map_or(Duration::ZERO, |k| k.hop),
                attempts: 1,
                seq: self.seq,
            });
            self.len += 1;
        }
        if list.is_empty() {
            self.open.remove(&key);
        }
        if self.len > MAX_OPEN {
            self.forget_oldest();
        }
        verdict
    }

    /// A write by the writer that left the object failed, caused by that
    /// very write: an attempt of the failed work again (`None`: the rules
    /// below judge it). Follows which writers left which objects failed.
    fn again_after_failing(&mut self, c: &ChangeRecord) -> Option<Attempt> {
        if c.code >= 400 {
            return None;
        }
        let failed = !c.deleted && c.readiness.as_ref().is_some_and(|r| r.status == "Failed");
        // Most writes of most logs: nothing failed to follow, no key to build.
        if !failed && self.failing.is_empty() {
            return None;
        }
        let key = (
            c.user.clone(),
            c.object.resource.clone(),
            c.object.namespace.clone(),
            c.object.name.clone(),
        );
        let cause = c.cause.as_ref();
        let verdict = match self.failing.get_mut(&key) {
            Some(f) if cause.is_some_and(|k| k.span == f.last) => {
                f.attempts += 1;
                let verdict = Attempt::Retry {
                    attempt: f.attempts,
                    backoff: c
                        .received
                        .duration_since(f.last_completed)
                        .unwrap_or_default(),
                    waited: c
                        .received
                        .duration_since(f.first_received)
                        .unwrap_or_default(),
                    first_hop: f.first_hop,
                };
                f.last = c.span;
                f.last_completed = c.completed;
                Some(verdict)
            }
            _ => None,
        };
        match (failed, verdict.is_some()) {
            // Failed again: the next attempt may follow.
            (true, true) => {}
            // Failed first: the work a later write may attempt again.
            (true, false) => {
                self.seq += 1;
                self.failing.insert(
                    key,
                    Failing {
                        last: c.span,
                        first_received: c.received,
                        last_completed: c.completed,
                        first_hop: cause.map_or(Duration::ZERO, |k| k.hop),
                        attempts: 1,
                        seq: self.seq,
                    },
                );
                if self.failing.len() > MAX_OPEN {
                    self.forget_oldest_failing();
                }
            }
            // Not failed (any more): the work is over.
            (false, _) => {
                self.failing.remove(&key);
            }
        }
        verdict
    }

    fn forget_oldest_failing(&mut self) {
        self.forgotten += forget_oldest_of(&mut self.failing, |f| f.seq);
    }

    fn forget_oldest_start(&mut self) {
        self.forgotten += forget_oldest_of(&mut self.starts, |s| s.seq);
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .open
            .iter()
            .flat_map(|(k, v)| v.iter().map(move |o| (o.seq, k)))
            .min_by_key(|(seq, _)| *seq)
            .map(|(seq, k)| (seq, k.clone()));
        if let Some((seq, key)) = oldest
            && let Some(list) = self.open.get_mut(&key)
        {
            list.retain(|o| o.seq != seq);
            if list.is_empty() {
                self.open.remove(&key);
            }
            self.len -= 1;
            self.forgotten += 1;
        }
    }
}

/// For each retry among `changes` (in request order, `attempts` theirs),
/// the index of the first attempt it repeats: the latest earlier first
/// attempt by the same writer, verb and subresource at the same target
/// (the object; a create by `generateName`: its prefix).
pub(crate) fn first_attempts(
    changes: &[ChangeRecord],
    attempts: &[Attempt],
) -> Vec<(usize, usize)> {
    let same_work = |a: &ChangeRecord, b: &ChangeRecord| {
        a.user == b.user
            && a.verb == b.verb
            && a.subresource == b.subresource
            && a.object.resource == b.object.resource
            && a.object.namespace == b.object.namespace
    };
    let target = |c: &ChangeRecord| -> String {
        match (c.verb.as_str(), generated_prefix(&c.object.name)) {
            ("create", Some(prefix)) => prefix.to_string(),
            _ => c.object.name.clone(),
        }
    };
    (0..changes.len())
        .filter(|&i| attempts[i].is_retry())
        .filter_map(|i| {
            let first = (0..i).rev().find(|&j| {
                !attempts[j].is_retry()
                    && same_work(&changes[j], &changes[i])
                    && target(&changes[j]) == target(&changes[i])
            })?;
            Some((i, first))
        })
        .collect()
}

/// Removes the entry of `map` opened first (lowest `seq`); 1 if one was.
fn forget_oldest_of<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    seq: impl Fn(&V) -> u64,
) -> u64 {
    let oldest = map
        .iter()
        .min_by_key(|(_, v)| seq(v))
        .map(|(k, _)| k.clone());
    oldest.map_or(0, |k| u64::from(map.remove(&k).is_some()))
}

/// Each change's place in its writer's attempts, for changes in request
/// order.
pub(crate) fn attempts<'a>(changes: impl IntoIterator<Item = &'a ChangeRecord>) -> Vec<Attempt> {
    let mut r = Retries::default();
    changes.into_iter().map(|c| r.observe(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cascade::testing::{caused_by, change, obj};

    fn refused(mut c: ChangeRecord) -> ChangeRecord {
        c.code = 403;
        c
    }

    #[test]
    fn refused_creates_retried_later_are_one_intent_with_back_off() {
        let rs = change(1, obj("replicasets", "web-1"), "create", 0, 5, None);
        let mut tries = Vec::new();
        // Attempts at 10 ms, 1 s, 3 s; the last one accepted.
        for (i, (at, ok)) in [(10u64, false), (1_000, false), (3_000, true)]
            .into_iter()
            .enumerate()
        {
            let name = if ok { "web-1-abcde" } else { "web-1-" };
            let mut c = change(10 + i as u8, obj("pods", name), "create", at, at + 2, None);
            c.user = "system:serviceaccount:kube-system:replicaset-controller".into();
            let c = caused_by(c, &rs, "replicasets → pods create");
            tries.push(if ok { c } else { refused(c) });
        }
        let a = attempts(&tries);
        assert_eq!(a[0], Attempt::First);
        let Attempt::Retry {
            attempt,
            backoff,
            waited,
            first_hop,
        } = a[1]
        else {
            panic!("{:?}", a[1]);
        };
        assert_eq!(attempt, 2);
        assert_eq!(backoff, Duration::from_millis(1_000 - 12));
        assert_eq!(waited, Duration::from_millis(1_000 - 10));
        assert_eq!(first_hop, Duration::from_millis(5));
        assert!(
            a[2].is_retry(),
            "the accepted create ends the attempts: {:?}",
            a[2]
        );
        // After the accepted one, the next refusal starts anew.
        let mut again = refused(change(
            20,
            obj("pods", "web-1-"),
            "create",
            9_000,
            9_001,
            None,
        ));
        again.user = tries[0].user.clone();
        let again = caused_by(again, &rs, "replicasets → pods create");
        let mut all = tries.clone();
        all.push(again);
        assert_eq!(attempts(&all)[3], Attempt::First);
    }

    #[test]
    fn a_writers_work_it_left_failed_and_does_again_is_retried_until_it_is_not() {
        // A kubelet's pulls of a missing image: ErrImagePull, a back-off of
        // 2 s, ImagePullBackOff, 20 s, ErrImagePull; then the image is there.
        let binding = change(1, obj("pods", "web-1-abcde"), "create", 0, 5, None);
        let failed = Some(("Failed", "ErrImagePull"));
        let mut chain = Vec::new();
        let mut prev = binding.clone();
        for (i, (at, status)) in [
            (10u64, failed),
            (2_010, Some(("Failed", "ImagePullBackOff"))),
            (22_010, failed),
            (24_000, Some(("Current", "Running"))),
        ]
        .into_iter()
        .enumerate()
        {
            let mut c = change(
                10 + i as u8,
                obj("pods", "web-1-abcde"),
                "patch",
                at,
                at + 2,
                status,
            );
            c.user = "kwok-kubelet".into();
            c.subresource = "status".into();
            let c = caused_by(c, &prev, "pods status");
            prev = c.clone();
            chain.push(c);
        }
        let mut all = vec![binding];
        all.extend(chain);
        let a = attempts(&all);
        assert_eq!(
            a[1],
            Attempt::First,
            "the first pull is caused by the binding"
        );
        let backoffs: Vec<(u32, Duration)> = a[2..]
            .iter()
            .map(|a| match a {
                Attempt::Retry {
                    attempt, backoff, ..
                } => (*attempt, *backoff),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            backoffs,
            vec![
                (2, Duration::from_millis(1_998)),
                (3, Duration::from_millis(19_998)),
                (4, Duration::from_millis(1_988)),
            ],
            "each pull after the first is an attempt of it; the one that succeeded the last"
        );
        // A healthy Pod's status writes are no retries.
        let ok = Some(("Current", "Running"));
        let mut first = change(30, obj("pods", "web-2"), "patch", 0, 1, ok);
        first.user = "kwok-kubelet".into();
        let mut second = change(31, obj("pods", "web-2"), "patch", 100, 101, ok);
        second.user = "kwok-kubelet".into();
        let second = caused_by(second, &first, "pods status");
        assert_eq!(attempts(&[first, second]), vec![Attempt::First; 2]);
    }

    #[test]
    fn a_write_with_a_new_cause_is_a_new_intent() {
        let rs = change(1, obj("replicasets", "web-1"), "create", 0, 5, None);
        let scaled = change(2, obj("replicasets", "web-1"), "update", 500, 505, None);
        let user = "system:serviceaccount:kube-system:replicaset-controller";
        let mut first = refused(change(10, obj("pods", "web-1-"), "create", 10, 12, None));
        first.user = user.into();
        let first = caused_by(first, &rs, "replicasets → pods create");
        let mut next = change(11, obj("pods", "web-1-x"), "create", 600, 602, None);
        next.user = user.into();
        let next = caused_by(next, &scaled, "replicasets → pods create");
        assert_eq!(
            attempts([&first, &next]),
            vec![Attempt::First, Attempt::First]
        );
        // Another writer, or a write nothing refused before: first attempts.
        let mut other = next.clone();
        other.user = "someone-else".into();
        assert_eq!(attempts([&first, &other])[1], Attempt::First);
    }
}
