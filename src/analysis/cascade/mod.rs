//! Cascades: a root write and the tree of writes it caused (each change's
//! `cause.span` is its parent), when the objects it touched settled, and
//! the chain that ended last (the critical path).
//!
//! [`build`] assembles cascades from a set of changes (offline, the
//! frontend); [`CascadeTracker`] follows them live as a `ChangeSink` and
//! observes `kascade_cascade_completion_seconds{kind}`.

mod completion;
mod retry;
mod serial;
mod text;
mod tracker;

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use crate::flow::{CascadeRole, Cause, ChangeRecord, SpanRef};

pub use completion::Completion;
pub(crate) use completion::Waiting;
pub(crate) use completion::{Settling, counts};
pub(crate) use retry::{Attempt, Retries};
pub(crate) use serial::SerialCreates;
pub use text::format_duration;
#[cfg(feature = "test-support")]
pub use text::render_text;
pub(crate) use text::{InPart, render_text_in_part};
pub(crate) use tracker::{CascadeTracker, TrackerConfig};

/// One cascade: its changes as a tree, root first.
#[derive(Clone, Debug)]
pub struct Cascade {
    /// Root at 0, then the other changes by request received (ties: by
    /// completion, then span id), so every change comes after its cause.
    pub changes: Vec<ChangeRecord>,
    /// The index of each change's cause (`None` for the root).
    pub parent: Vec<Option<usize>>,
    /// The changes each change caused, by request received.
    pub children: Vec<Vec<usize>>,
    /// The root's cause when it is not among the changes given: the
    /// cascade is partial (it started earlier).
    pub missing_cause: Option<Cause>,
    pub completion: Completion,
    /// Each change's place in its writer's attempts: retries of a refused
    /// write are one intent, the wait between them back-off.
    pub attempts: Vec<Attempt>,
    /// Each retry's index with the index of the first attempt it repeats.
    pub(crate) retried: Vec<(usize, usize)>,
    /// For each change, the earlier write of the same writer and cause
    /// whose answer it waited for (a controller's next batch of creates):
    /// its hop counts from that answer, and the critical path passes
    /// through that write.
    pub after_sibling: Vec<Option<usize>>,
    /// Indices from the root to the change that ended last, retries left
    /// out as its end (their wait is back-off, not propagation), through
    /// the siblings later batches waited for.
    pub critical_path: Vec<usize>,
}

impl Cascade {
    pub fn root(&self) -> &ChangeRecord {
        &self.changes[0]
    }

    /// Change `i`'s hop: from its cause's answer, or, for a create its
    /// writer sent once an earlier one was answered, from that answer.
    pub(crate) fn hop(&self, i: usize) -> Option<std::time::Duration> {
        let cause = self.changes[i].cause.as_ref()?;
        Some(match self.after_sibling[i] {
            Some(j) => self.changes[i]
                .received
                .duration_since(self.changes[j].completed)
                .unwrap_or_default(),
            None => cause.hop,
        })
    }

    /// Whether change `i` lies on the critical path.
    pub fn is_critical(&self, i: usize) -> bool {
        self.critical_path.contains(&i)
    }

    /// The changes in depth-first order with their depth (children by time).
    pub fn walk(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::with_capacity(self.changes.len());
        let mut stack = vec![(0usize, 0usize)];
        while let Some((i, d)) = stack.pop() {
            out.push((i, d));
            for &c in self.children[i].iter().rev() {
                stack.push((c, d + 1));
            }
        }
        out
    }

    /// Whether the cascade went wrong: waiting for an object, a write in
    /// it was refused in a way its writer does not expect, or its last
    /// write to an object left that object failed (a Pod whose container
    /// was OOM-killed under `restartPolicy: Never` ends the cascade
    /// complete, and failed). A completion that is not known
    /// ([`Completion::NotKnown`]) is not judged wrong.
    pub fn went_wrong(&self) -> bool {
        matches!(self.completion, Completion::Waiting(_))
            || self.changes.iter().any(write_failed)
            || self.left_failed().is_some()
    }

    /// The earliest write that was its object's last in the cascade and
    /// left it failed.
    pub fn left_failed(&self) -> Option<&ChangeRecord> {
        let mut last: std::collections::HashMap<&crate::model::ObjectRef, &ChangeRecord> =
            std::collections::HashMap::new();
        for c in &self.changes {
            let e = last.entry(&c.object).or_insert(c);
            if (c.completed, c.received) >= (e.completed, e.received) {
                *e = c;
            }
        }
        last.into_values()
            .filter(|c| !c.deleted && c.readiness.as_ref().is_some_and(|r| r.status == "Failed"))
            .min_by_key(|c| (c.completed, c.received))
    }

    /// From the root's request received to completion, when complete.
    #[cfg(feature = "test-support")]
    pub fn duration(&self) -> Option<std::time::Duration> {
        match &self.completion {
            Completion::Complete { at } => {
                Some(at.duration_since(self.root().received).unwrap_or_default())
            }
            Completion::Waiting(_) | Completion::NotKnown(_) => None,
        }
    }
}

/// Whether a write was refused in a way its writer does not expect (as
/// `crate::judgement` judges refusals): shown in error.
pub(crate) fn write_failed(ch: &ChangeRecord) -> bool {
    let message = ch.failure.as_deref().unwrap_or_default();
    ch.code >= 400 && crate::judgement::Refusal::of(ch.code, &ch.verb, message, false).is_error()
}

/// `<user> <verb>[ <subresource>] <resource> <ns>/<name>` (`watch <type>`
/// for a change only the list-watch saw), as `cascade.cause.name` names a
/// cause.
pub fn change_name(c: &ChangeRecord) -> String {
    let who = if c.user.is_empty() {
        "watch".to_string()
    } else {
        c.user.clone()
    };
    let mut s = format!("{who} {}", c.verb);
    if !c.subresource.is_empty() {
        s.push(' ');
        s.push_str(&c.subresource);
    }
    s.push(' ');
    let o = &c.object;
    if o.name.ends_with('-') {
        // A create refused before the apiserver made up a name: the
        // object is its generateName prefix (no stored object's name ends
        // with `-`), named as the tree modes name it.
        let prefix = match o.namespace.as_str() {
            "" => o.name.clone(),
            ns => format!("{ns}/{}", o.name),
        };
        s.push_str(&format!("{} (generateName {prefix})", o.resource));
    } else {
        s.push_str(&object_name(o));
    }
    s
}

/// A writer's name as a column of names shows it: a kube-system service
/// account by its own name (`deployment-controller`), another namespace's as
/// `namespace/name`, other `system:` identities without the prefix
/// (`kube-scheduler`, `node:worker-1`); anyone else as is. The full name
/// stays in the `audit.user` tag.
pub(crate) fn short_writer(user: &str) -> &str {
    if let Some(sa) = user.strip_prefix("system:serviceaccount:") {
        return match sa.split_once(':') {
            Some(("kube-system", name)) => name,
            _ => sa,
        };
    }
    if user == "system:admin" {
        return user;
    }
    user.strip_prefix("system:").unwrap_or(user)
}

/// `name` with its leading writer `user` shortened ([`short_writer`]).
pub(crate) fn with_short_writer(name: &str, user: &str) -> String {
    match name.strip_prefix(user) {
        Some(rest) if !user.is_empty() && rest.starts_with(' ') => {
            format!("{}{rest}", short_writer(user))
        }
        _ => name.to_string(),
    }
}

/// [`change_name`] with its writer shortened ([`short_writer`]), as the
/// UI's names show it.
pub(crate) fn short_change_name(c: &ChangeRecord) -> String {
    with_short_writer(&change_name(c), &c.user)
}

/// What a create waited for, after its edge: `hop 3.1ms after its
/// writer's previous create pods ns/a was answered, 860ms after the cause`
/// (`None` when it waited for no sibling).
pub(crate) fn after_sibling_text(c: &Cascade, i: usize) -> Option<String> {
    let j = c.after_sibling.get(i).copied().flatten()?;
    let (ch, sibling) = (&c.changes[i], &c.changes[j]);
    let gap = c.hop(i)?;
    let since_cause = ch.cause.as_ref().map_or(gap, |k| k.hop);
    Some(format!(
        "hop {} after its writer's previous create {} was answered, {} after the cause",
        format_duration(gap),
        object_name(&sibling.object),
        format_duration(since_cause)
    ))
}

/// `<resource> <ns>/<name>` (`<resource> <name>` when cluster-scoped).
pub(crate) fn object_name(o: &crate::model::ObjectRef) -> String {
    if o.namespace.is_empty() {
        format!("{} {}", o.resource, o.name)
    } else {
        format!("{} {}/{}", o.resource, o.namespace, o.name)
    }
}

fn order_key(c: &ChangeRecord) -> (SystemTime, SystemTime, SpanRef) {
    (c.received, c.completed, c.span)
}

/// Builds the cascades of `changes`: a change whose role is root or
/// unexplained, or whose cause is not among them, roots a cascade; every
/// other change goes under its cause. A change given twice (same span) is
/// taken once. Cascades come by their root's request received.
pub fn build(changes: impl IntoIterator<Item = ChangeRecord>) -> Vec<Cascade> {
    build_with_early_writes(changes, &HashSet::new())
}

/// [`build`], told also of `early`: objects written, in cascades out of
/// range, by writes logged before the changes they react to
/// ([`ChangeRecord::cause_logged_after`]) or by the writes those caused.
/// A cascade whose every unsettled object is such an object (or one of
/// `changes`' own) is [`Completion::NotKnown`], not waiting: what settled
/// it sits in a cascade of its own, whose place in time is not known.
pub(crate) fn build_with_early_writes(
    changes: impl IntoIterator<Item = ChangeRecord>,
    early: &HashSet<crate::model::ObjectRef>,
) -> Vec<Cascade> {
    let mut seen = HashSet::new();
    let mut all: Vec<ChangeRecord> = changes
        .into_iter()
        .filter(|c| seen.insert(c.span))
        .collect();
    let mut early = early.clone();
    early.extend(early_objects(&all));
    all.sort_by_key(order_key);
    let index: HashMap<SpanRef, usize> = all.iter().enumerate().map(|(i, c)| (c.span, i)).collect();
    let cause_of = |c: &ChangeRecord| -> Option<usize> {
        if c.role != CascadeRole::Effect {
            return None;
        }
        c.cause.as_ref().and_then(|k| index.get(&k.span).copied())
    };
    let mut parent: Vec<Option<usize>> = all.iter().map(cause_of).collect();
    // A cause chain that loops (inconsistent input) is cut where it closes:
    // the change that closes it roots its own cascade.
    for start in 0..all.len() {
        let mut on_path = HashSet::from([start]);
        let mut cur = start;
        while let Some(p) = parent[cur] {
            if !on_path.insert(p) {
                parent[cur] = None;
                break;
            }
            cur = p;
        }
    }
    let top = |mut i: usize| {
        while let Some(p) = parent[i] {
            i = p;
        }
        i
    };
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..all.len() {
        members.entry(top(i)).or_default().push(i);
    }
    // When each object was removed, by whichever cascade removed it.
    let mut removed: HashMap<&crate::model::ObjectRef, SystemTime> = HashMap::new();
    for c in all.iter().filter(|c| c.deleted) {
        let t = removed.entry(&c.object).or_insert(c.completed);
        *t = (*t).max(c.completed);
    }
    let removed: HashMap<crate::model::ObjectRef, SystemTime> =
        removed.into_iter().map(|(o, t)| (o.clone(), t)).collect();
    let mut roots: Vec<usize> = members.keys().copied().collect();
    roots.sort_unstable();
    let mut slots: Vec<Option<ChangeRecord>> = all.into_iter().map(Some).collect();
    let mut cascades = roots
        .into_iter()
        .map(|r| {
            let mut ids = members.remove(&r).unwrap_or_default();
            // Root first; the rest keep the time order of `all`.
            ids.retain(|&i| i != r);
            ids.insert(0, r);
            let local: HashMap<usize, usize> =
                ids.iter().enumerate().map(|(l, &g)| (g, l)).collect();
            let local_parent: Vec<Option<usize>> = ids
                .iter()
                .map(|&g| parent[g].and_then(|p| local.get(&p).copied()))
                .collect();
            let changes: Vec<ChangeRecord> = ids.iter().filter_map(|&g| slots[g].take()).collect();
            let mut c = assemble(changes, local_parent);
            settle_removed(&mut c, &removed);
            not_known_for_early_writes(&mut c, &early);
            c
        })
        .collect::<Vec<_>>();
    completion::settle_unchanged(&mut cascades);
    cascades
}

/// An object a cascade left unsettled that another cascade removed later
/// (the write that took away a deleted object's last finalizer; a Pod a
/// later scale-down deleted before it was scheduled): its wait ended then.
fn settle_removed(c: &mut Cascade, removed: &HashMap<crate::model::ObjectRef, SystemTime>) {
    let Completion::Waiting(waiting) = &mut c.completion else {
        return;
    };
    let mut at = c.changes.iter().map(|ch| ch.completed).max();
    waiting.retain(|w| match removed.get(&w.object) {
        Some(&t) if t >= w.since => {
            at = at.max(Some(t));
            false
        }
        _ => true,
    });
    if waiting.is_empty()
        && let Some(at) = at
    {
        c.completion = Completion::Complete { at };
    }
}

/// The objects written by writes logged before the changes they react to
/// ([`ChangeRecord::cause_logged_after`]: two apiservers' clocks disagree,
/// or the input is out of order), and every object written in a cascade
/// such a write roots.
pub(crate) fn early_objects(changes: &[ChangeRecord]) -> HashSet<crate::model::ObjectRef> {
    let roots: HashSet<SpanRef> = changes
        .iter()
        .filter(|c| c.cause_logged_after)
        .map(|c| c.span)
        .collect();
    changes
        .iter()
        .filter(|c| roots.contains(&c.span) || roots.contains(&c.root))
        .map(|c| c.object.clone())
        .collect()
}

/// Of several cascades, the one that matters, for every view's title: of
/// those that wrote `searched` (all, if none did: the other objects of its
/// scope), the latest that went wrong (`went_wrong`) a change started,
/// else the latest that went wrong a timer started, else the latest.
/// Returns its index and whether it went wrong; `None` for no cascade.
pub(crate) fn the_one_that_matters(
    cascades: &[Cascade],
    searched: Option<&crate::model::ObjectRef>,
    went_wrong: impl Fn(&Cascade) -> bool,
) -> Option<(usize, bool)> {
    // A CronJob's suspend patch is not the story of the Job searched for.
    let wrote_searched =
        |c: &Cascade| searched.is_some_and(|o| c.changes.iter().any(|ch| &ch.object == o));
    let about_searched = cascades.iter().any(wrote_searched);
    let latest = |wrong_only: bool, changes_only: bool| {
        cascades
            .iter()
            .enumerate()
            .filter(|(_, c)| !about_searched || wrote_searched(c))
            .filter(|(_, c)| !wrong_only || went_wrong(c))
            .filter(|(_, c)| !changes_only || c.root().timer.is_none())
            .max_by_key(|(i, c)| (c.root().received, *i))
            .map(|(i, _)| i)
    };
    match latest(true, true).or_else(|| latest(true, false)) {
        Some(i) => Some((i, true)),
        None => latest(false, false).map(|i| (i, false)),
    }
}

/// What a [`Completion::NotKnown`] says, for people.
pub(crate) fn not_known_text(w: &[Waiting]) -> String {
    let names: Vec<String> = w.iter().take(3).map(ToString::to_string).collect();
    let more = match w.len() {
        0..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    format!(
        "completion not known: {}{more} also written by writes logged before the changes they react to (the apiservers' clocks disagree, or the logs are out of order), which have no cause",
        names.join("; ")
    )
}

/// A cascade waiting only for objects that writes logged before their
/// causes also wrote: whether those writes settled them in this cascade is
/// not known (their times are not comparable: two apiservers' clocks).
fn not_known_for_early_writes(c: &mut Cascade, early: &HashSet<crate::model::ObjectRef>) {
    if let Completion::Waiting(waiting) = &mut c.completion
        && !waiting.is_empty()
        && waiting.iter().all(|w| early.contains(&w.object))
    {
        c.completion = Completion::NotKnown(std::mem::take(waiting));
    }
}

/// A cascade from its changes (root first, the rest in time order) and
/// the index of each one's cause.
fn assemble(changes: Vec<ChangeRecord>, parent: Vec<Option<usize>>) -> Cascade {
    let mut children = vec![Vec::new(); changes.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(i);
        }
    }
    let missing_cause = match changes[0].role {
        CascadeRole::Effect => changes[0].cause.clone(),
        _ => None,
    };
    let completion = completion::completion(&changes);
    let attempts = retry::attempts(&changes);
    // A first attempt lasts until its last retry: the work ends then, and
    // the critical path reaches it (not the retries, whose waits are
    // back-off).
    let mut ends: Vec<SystemTime> = changes.iter().map(|c| c.completed).collect();
    let retried = retry::first_attempts(&changes, &attempts);
    for &(i, first) in &retried {
        ends[first] = ends[first].max(changes[i].completed);
    }
    let last = (0..changes.len())
        .filter(|&i| !attempts[i].is_retry())
        .max_by_key(|&i| (ends[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    let after_sibling: Vec<Option<usize>> = serial::after_siblings(&changes)
        .into_iter()
        .zip(&attempts)
        .map(|(after, attempt)| after.filter(|_| !attempt.is_retry()))
        .collect();
    let mut critical_path = vec![last];
    let mut cur = last;
    while let Some(p) = after_sibling[cur].or(parent[cur]) {
        critical_path.push(p);
        cur = p;
    }
    critical_path.reverse();
    Cascade {
        changes,
        parent,
        children,
        missing_cause,
        completion,
        attempts,
        retried,
        after_sibling,
        critical_path,
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tracker_tests;
