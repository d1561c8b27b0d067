//! Cascades followed live: a [`ChangeSink`] that keeps, per open cascade,
//! which objects have settled, and observes the completion time under the
//! root's resource once the cascade is complete and has stayed quiet (no
//! further change of it) for [`TrackerConfig::quiet`], measured on the
//! changes' own clock. One still incomplete after [`TrackerConfig::stall`]
//! without a change is closed and counted as stalled (a rollout stuck, a
//! Pod never scheduled), so stuck cascades do not fill the bound. Open
//! cascades are bounded: past the bound, the complete one quiet longest is
//! observed early; only when none is complete does the incomplete one quiet
//! longest go (counted and logged). An object one cascade waits for that
//! another removes has settled for both (as [`super::build`] judges
//! them offline): the finalizer removed by a second actor completes the
//! delete, a Pod a scale-down removed completes the rollout that made it.
//! A change recorded before its cause (the cause's response finished after
//! the effect's: a Pod's create answered after the scheduler bound it)
//! names that cause as its root, as do the effects that follow it, until
//! the cause is recorded: they wait for it (at most the quiet time, and
//! bounded, counted) and then join the cause's cascade.

use std::collections::{BTreeSet, VecDeque};

use crate::model::FastHashMap as HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::completion::{Settling, counts, readiness_key, settles};
use crate::flow::{CascadeRole, ChangeRecord, ChangeSink, SpanRef};
use crate::metrics::CascadeMetrics;

#[derive(Clone, Debug)]
pub(crate) struct TrackerConfig {
    /// Open cascades kept at most.
    pub max_open: usize,
    /// A complete cascade is observed once no change of it came for this
    /// long (a later write would have reopened it).
    pub quiet: Duration,
    /// An incomplete cascade is closed as stalled once no change of it
    /// came for this long.
    pub stall: Duration,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            max_open: 10_000,
            quiet: Duration::from_secs(30),
            stall: Duration::from_secs(600),
        }
    }
}

struct Open {
    kind: String,
    /// The root write's `verb[ subresource]`.
    verb: String,
    root_received: SystemTime,
    /// By object hash (a key copy per change would cost more than the rest).
    objects: HashMap<u64, Settling>,
    /// Objects not settled now: completion is only looked at when none is.
    unsettled: usize,
    /// Latest change of it (completed).
    last: SystemTime,
    /// When every object had settled, if they all have.
    done_at: Option<SystemTime>,
}

#[derive(Default)]
struct State {
    open: HashMap<SpanRef, Open>,
    /// (last change, root) of every open cascade.
    by_activity: BTreeSet<(SystemTime, SpanRef)>,
    /// (last change, root) of the complete ones.
    done: BTreeSet<(SystemTime, SpanRef)>,
    /// Latest change seen of any cascade.
    watermark: Option<SystemTime>,
    /// By object hash: the open cascades waiting for it (not settled in
    /// them), so that its removal settles it in each.
    waiting_for: HashMap<u64, Vec<SpanRef>>,
    /// By object hash: the readiness ([`readiness_key`]) the latest write
    /// of any cascade left an unsettled object in, at most
    /// [`MAX_UNSETTLED`] (the oldest forgotten).
    unsettled_objects: HashMap<u64, u64>,
    unsettled_order: VecDeque<u64>,
    /// Effects recorded before the change they name as root, by its span.
    early: HashMap<SpanRef, Vec<ChangeRecord>>,
    /// Such a change once recorded: its span → its cascade's root, for the
    /// effects naming it that are still to come (its effects' effects).
    rerooted: HashMap<SpanRef, SpanRef>,
    /// The causes waited for, with when the first effect waiting for each
    /// completed, oldest first (the bound and the quiet time drop from here).
    early_order: VecDeque<(SystemTime, SpanRef)>,
    early_len: usize,
    last_warning: Option<Instant>,
    last_unsettled_warning: Option<Instant>,
    unreported_evictions: u64,
}

/// Told of each cascade closed: the root's resource and `verb[
/// subresource]`, and how long it took to complete, or `None` when it did
/// not (stalled, or still incomplete at the end of the input).
pub(super) type CompletionListener = Arc<dyn Fn(&str, &str, Option<Duration>) + Send + Sync>;

pub(crate) struct CascadeTracker {
    cfg: TrackerConfig,
    metrics: Arc<CascadeMetrics>,
    state: Mutex<State>,
    listener: Option<CompletionListener>,
}

impl CascadeTracker {
    pub(crate) fn new(cfg: TrackerConfig, metrics: Arc<CascadeMetrics>) -> Self {
        Self {
            cfg,
            metrics,
            state: Mutex::new(State::default()),
            listener: None,
        }
    }

    /// Also tells `listener` of every cascade closed, complete or not
    /// (`kascade analyze` counts completion times, and the cascades that
    /// did not complete, by root kind and verb).
    pub(crate) fn with_completion_listener(mut self, listener: CompletionListener) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Cascades open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Closes every open cascade (end of input): the complete ones are
    /// observed, quiet or not; the listener hears of the others as not
    /// complete (they are not stalled: the input ended first).
    pub(crate) fn flush(&self) {
        let mut st = self.lock();
        let open: Vec<SpanRef> = st.by_activity.iter().map(|(_, r)| *r).collect();
        for root in open {
            self.finish(&mut st, root);
        }
        // Effects of cascades not followed, or whose root never came.
        st.early.clear();
        st.rerooted.clear();
        st.early_order.clear();
        st.early_len = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Observes a cascade closed: its completion time when complete; else
    /// it is counted as stalled when `stalled`. The listener hears of both.
    fn observe(&self, open: &Open, stalled: bool) {
        let took = open
            .done_at
            .map(|at| at.duration_since(open.root_received).unwrap_or_default());
        match took {
            Some(took) => self
                .metrics
                .completion_seconds
                .get_or_create(&self.metrics.kind(&open.kind))
                .observe(took.as_secs_f64()),
            None if stalled => {
                self.metrics
                    .stalled
                    .get_or_create(&self.metrics.kind(&open.kind))
                    .inc();
            }
            None => {}
        }
        if let Some(listener) = &self.listener {
            listener(&open.kind, &open.verb, took);
        }
    }

    /// Removes an open cascade, observing it (see [`Self::observe`]).
    fn finish(&self, st: &mut State, root: SpanRef) {
        self.close(st, root, false);
    }

    fn close(&self, st: &mut State, root: SpanRef, stalled: bool) {
        if let Some(open) = st.open.remove(&root) {
            st.by_activity.remove(&(open.last, root));
            st.done.remove(&(open.last, root));
            forget_waits(&mut st.waiting_for, &open, root);
            self.observe(&open, stalled);
        }
        self.metrics.open.set(st.open.len() as i64);
    }

    /// Makes room: the complete cascade quiet longest is observed before
    /// its quiet time has passed (it is only waiting to be sure), and only
    /// when none is complete is the incomplete one quiet longest dropped.
    fn evict_oldest(&self, st: &mut State) {
        if let Some(&(_, root)) = st.done.iter().next() {
            self.finish(st, root);
            return;
        }
        let Some(&(_, root)) = st.by_activity.iter().next() else {
            return;
        };
        // Dropped, not known to have stalled: not told to the listener.
        if let Some(open) = st.open.remove(&root) {
            st.by_activity.remove(&(open.last, root));
            forget_waits(&mut st.waiting_for, &open, root);
        }
        self.metrics.open.set(st.open.len() as i64);
        self.metrics.evicted.inc();
        st.unreported_evictions += 1;
        let now = Instant::now();
        if st
            .last_warning
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
        {
            tracing::warn!(
                evicted = st.unreported_evictions,
                max_open = self.cfg.max_open,
                "too many open cascades: {} dropped before they completed (kascade_cascades_evicted_total)",
                st.unreported_evictions
            );
            st.last_warning = Some(now);
            st.unreported_evictions = 0;
        }
    }
}

impl CascadeTracker {
    /// The object `hash` was removed at `at`: every open cascade still
    /// waiting for it has it settled from then on.
    fn removed_elsewhere(&self, st: &mut State, hash: u64, at: SystemTime) {
        let Some(waits) = st.waiting_for.remove(&hash) else {
            return;
        };
        for root in waits {
            let Some(open) = st.open.get_mut(&root) else {
                continue;
            };
            let Some(settling) = open.objects.get_mut(&hash) else {
                continue;
            };
            if settling.settled_since.is_some() {
                continue;
            }
            settling.removed_elsewhere(at);
            open.unsettled -= 1;
            open.done_at = done_at(open);
            if open.done_at.is_some() {
                st.done.insert((open.last, root));
            }
        }
    }
}

impl CascadeTracker {
    /// The object `hash` settled at `at`: every open cascade that found it
    /// unsettled and left it as it found it has it settled from then on
    /// (as [`super::build`] judges them offline).
    fn settled_elsewhere(&self, st: &mut State, hash: u64, at: SystemTime) {
        let Some(waits) = st.waiting_for.get_mut(&hash) else {
            return;
        };
        let mut settled = Vec::new();
        waits.retain(|root| {
            let left_as_found = st
                .open
                .get(root)
                .and_then(|o| o.objects.get(&hash))
                .is_some_and(Settling::left_as_found);
            if left_as_found {
                settled.push(*root);
            }
            !left_as_found
        });
        if waits.is_empty() {
            st.waiting_for.remove(&hash);
        }
        for root in settled {
            let Some(open) = st.open.get_mut(&root) else {
                continue;
            };
            let Some(settling) = open.objects.get_mut(&hash) else {
                continue;
            };
            settling.settled_elsewhere(at);
            open.unsettled -= 1;
            open.done_at = done_at(open);
            if open.done_at.is_some() {
                st.done.insert((open.last, root));
            }
        }
    }
}

/// When every object of `open` settled, if they all have.
fn done_at(open: &Open) -> Option<SystemTime> {
    (open.unsettled == 0).then(|| {
        open.objects
            .values()
            .filter_map(|o| o.settled_since)
            .max()
            .unwrap_or(open.last)
    })
}

/// Takes a closed cascade out of the waits of the objects it waited for.
fn forget_waits(waiting_for: &mut HashMap<u64, Vec<SpanRef>>, open: &Open, root: SpanRef) {
    for (hash, settling) in &open.objects {
        if settling.settled_since.is_some() {
            continue;
        }
        if let Some(waits) = waiting_for.get_mut(hash) {
            waits.retain(|r| *r != root);
            if waits.is_empty() {
                waiting_for.remove(hash);
            }
        }
    }
}

/// Effects kept at most while their cause has not been recorded.
const MAX_EARLY_EFFECTS: usize = 10_000;

/// Unsettled objects whose readiness is remembered at most.
const MAX_UNSETTLED: usize = 100_000;

impl ChangeSink for CascadeTracker {
    fn record(&self, change: &ChangeRecord) {
        let mut st = self.lock();
        let st = &mut *st;
        self.record_in(st, change);
        let watermark = st.watermark.unwrap_or(SystemTime::UNIX_EPOCH);
        while let Some(&(at, cause)) = st.early_order.front() {
            if at + self.cfg.quiet > watermark {
                break;
            }
            st.early_order.pop_front();
            // Not recorded within the quiet time: most often an effect of a
            // cascade not followed (closed, or begun before this process).
            if cause != change.span {
                if let Some(gone) = st.early.remove(&cause) {
                    st.early_len -= gone.len();
                }
                st.rerooted.remove(&cause);
            }
        }
        // Effects that were recorded before this change and named it their
        // root: they join its cascade now.
        if let Some(effects) = st.early.remove(&change.span) {
            st.early_len -= effects.len();
            if st.rerooted.len() < MAX_EARLY_EFFECTS {
                st.rerooted.insert(change.span, change.root);
                st.early_order.push_back((change.completed, change.span));
            }
            for mut e in effects {
                e.root = change.root;
                self.record_in(st, &e);
            }
        }
    }
}

impl CascadeTracker {
    /// Keeps an effect whose root (the late cause standing for its
    /// cascade) has not been recorded yet.
    fn keep_early(&self, st: &mut State, change: &ChangeRecord) {
        while st.early_len >= MAX_EARLY_EFFECTS {
            let Some((_, oldest)) = st.early_order.pop_front() else {
                break;
            };
            self.drop_early(st, oldest);
        }
        let waits = st.early.entry(change.root).or_default();
        if waits.is_empty() {
            st.early_order.push_back((change.completed, change.root));
        }
        waits.push(change.clone());
        st.early_len += 1;
    }

    /// Drops the effects waiting for `cause` to stay within the bound, or
    /// at the end of the input (counted).
    fn drop_early(&self, st: &mut State, cause: SpanRef) {
        if let Some(dropped) = st.early.remove(&cause) {
            st.early_len -= dropped.len();
            self.metrics
                .early_effects_dropped
                .inc_by(dropped.len() as u64);
        }
    }

    fn record_in(&self, st: &mut State, change: &ChangeRecord) {
        st.watermark = st.watermark.max(Some(change.completed));
        let root = change.root;
        let open = match st.open.entry(root) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            // A change of a cascade not followed (evicted, observed already,
            // or started before this process) is left out; so is a refused
            // root write: nothing changed, nothing cascades from it.
            // An effect whose cause has not been recorded: the inference
            // let the cause stand for its cascade (it was not resolved yet).
            std::collections::hash_map::Entry::Vacant(_) if change.role == CascadeRole::Effect => {
                match st.rerooted.get(&root) {
                    Some(&real) if real != root => {
                        let mut e = change.clone();
                        e.root = real;
                        self.record_in(st, &e);
                    }
                    _ => self.keep_early(st, change),
                }
                return;
            }
            std::collections::hash_map::Entry::Vacant(_)
                if change.role == CascadeRole::Effect
                    || change.span != root
                    || change.code >= 400 =>
            {
                return;
            }
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Open {
                kind: change.object.resource.clone(),
                verb: if change.subresource.is_empty() {
                    change.verb.clone()
                } else {
                    format!("{} {}", change.verb, change.subresource)
                },
                root_received: change.received,
                objects: HashMap::default(),
                unsettled: 0,
                last: change.completed,
                done_at: None,
            }),
        };
        st.by_activity.remove(&(open.last, root));
        st.done.remove(&(open.last, root));
        open.last = open.last.max(change.completed);
        let hash = change.object.hash();
        let found = st.unsettled_objects.get(&hash).copied();
        if counts(change) {
            let settling = open.objects.entry(hash).or_insert_with(|| {
                open.unsettled += 1;
                let mut settling = Settling::default();
                settling.found_unsettled = found;
                settling
            });
            let before = settling.settled_since.is_some();
            settling.apply(change);
            settling.left = Some(readiness_key(change));
            let after = settling.settled_since.is_some();
            match (before, after) {
                (false, true) => open.unsettled -= 1,
                (true, false) => open.unsettled += 1,
                _ => {}
            }
            let waits = st.waiting_for.entry(hash).or_default();
            if after {
                waits.retain(|r| *r != root);
            } else if !waits.contains(&root) {
                waits.push(root);
            }
        }
        open.done_at = done_at(open);
        st.by_activity.insert((open.last, root));
        if open.done_at.is_some() {
            st.done.insert((open.last, root));
        }
        if change.deleted && counts(change) {
            self.removed_elsewhere(st, hash, change.completed);
        }
        if counts(change) {
            if settles(change, false) {
                if st.unsettled_objects.remove(&hash).is_some() {
                    self.settled_elsewhere(st, hash, change.completed);
                }
            } else {
                if st
                    .unsettled_objects
                    .insert(hash, readiness_key(change))
                    .is_none()
                {
                    st.unsettled_order.push_back(hash);
                }
                let mut forgotten = 0;
                while st.unsettled_objects.len() > MAX_UNSETTLED
                    && let Some(oldest) = st.unsettled_order.pop_front()
                {
                    forgotten += u64::from(st.unsettled_objects.remove(&oldest).is_some());
                }
                if forgotten > 0 {
                    self.metrics.unsettled_forgotten.inc_by(forgotten);
                    let now = Instant::now();
                    if st
                        .last_unsettled_warning
                        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
                    {
                        tracing::warn!(
                            bound = MAX_UNSETTLED,
                            "too many unsettled objects: the oldest one's readiness forgotten, a cascade that left it as it found it waits for its own writes (kascade_cascade_unsettled_forgotten_total)"
                        );
                        st.last_unsettled_warning = Some(now);
                    }
                }
                if st.unsettled_order.len() > 2 * MAX_UNSETTLED {
                    let kept = &st.unsettled_objects;
                    st.unsettled_order.retain(|h| kept.contains_key(h));
                }
            }
        }
        if st.waiting_for.get(&hash).is_some_and(Vec::is_empty) {
            st.waiting_for.remove(&hash);
        }
        // Complete and quiet: observed.
        let watermark = st.watermark.unwrap_or(SystemTime::UNIX_EPOCH);
        let quiet: Vec<SpanRef> = st
            .done
            .iter()
            .take_while(|(last, _)| *last + self.cfg.quiet <= watermark)
            .map(|(_, r)| *r)
            .collect();
        for r in quiet {
            self.finish(st, r);
        }
        // Incomplete and quiet for the stall time: closed as stalled.
        let stalled: Vec<SpanRef> = st
            .by_activity
            .iter()
            .take_while(|(last, _)| *last + self.cfg.stall <= watermark)
            .map(|(_, r)| *r)
            .collect();
        for r in stalled {
            self.close(st, r, true);
        }
        while st.open.len() > self.cfg.max_open.max(1) {
            self.evict_oldest(st);
        }
        self.metrics.open.set(st.open.len() as i64);
    }
}
