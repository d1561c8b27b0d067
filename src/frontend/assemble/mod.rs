//! Follow links from a searched object and build the object tree its trace
//! shows: the object alone, its ancestors, its descendants, or the full tree
//! from its top ancestor down. Reads are concurrent and bounded; repeated
//! objects and cycles are detected by object identity.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::merge::{Link, ObjectHistory, Role, merge_until, widen};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::cache_weight::history_bytes;
use super::raw::{RawError, RawStore, TraceIdBytes};
use crate::metrics::{AssemblyLimit, AssemblyLimitLabel, FrontendMetrics};
use crate::model::{ObjectRef, raw_trace_id};

mod finish;
mod not_followed;
mod reads;
mod repeats;
mod scope;
mod shared_reads;

use finish::{
    child_links, clip_shared_to_parents, is_ancestor_or_self, set_up_nodes, sort_children,
};
use not_followed::NotFollowed;
pub(crate) use repeats::{REPEATED_COUNT, REPEATED_TIMES, REPEATED_UNTIL, is_fold_note};
pub use scope::Limits;
pub use scope::Scope;
pub(crate) use scope::{DEFAULT_SHARED_CLASSES, SET_UP_CLASSES};

#[derive(Clone, Debug)]
pub struct Node {
    pub history: ObjectHistory,
    pub parent: Option<usize>,
    /// Class of the link from the parent.
    pub class: Option<String>,
    pub children: Vec<usize>,
    /// A shared object (a Node, a ConfigMap) shown again under another
    /// object that uses it: the index of its first occurrence. Copies are
    /// leaves.
    pub copy_of: Option<usize>,
    /// Reached through a shared class (`Limits::shared_classes`), or below
    /// such an object: not part of the tree proper, so it does not set the
    /// trace's time range and its entries outside it are hidden.
    pub shared: bool,
}

/// The object tree of one assembled trace; `nodes[0]` is the root.
#[derive(Clone, Debug)]
pub struct Assembly {
    pub nodes: Vec<Node>,
    /// The node that was searched for.
    pub searched: usize,
    /// What was not followed (limits, repeated objects), for the reader.
    pub notes: Vec<String>,
    /// The trace's time range (ns since the epoch): the activity of the
    /// objects of the tree proper, without shared objects, whose entries
    /// outside it are hidden. `None` when nothing in the tree has activity.
    pub range: Option<(u64, u64)>,
}

impl Assembly {
    /// Nodes in depth-first order with their depth.
    pub fn walk(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![(0usize, 0usize)];
        while let Some((i, d)) = stack.pop() {
            out.push((i, d));
            for &c in self.nodes[i].children.iter().rev() {
                stack.push((c, d + 1));
            }
        }
        out
    }

    /// Whether `i` is the searched node or one of its ancestors.
    pub fn on_searched_path(&self, i: usize) -> bool {
        let mut at = Some(self.searched);
        while let Some(n) = at {
            if n == i {
                return true;
            }
            at = self.nodes[n].parent;
        }
        false
    }
}

/// What part of the stored data a trace shows.
#[derive(Clone, Debug)]
pub struct Clip {
    /// Window starts (seconds since the epoch) read for every object.
    pub windows: Vec<u64>,
    /// Entries and links recorded after this instant (ns since the epoch)
    /// are left out.
    pub until: u64,
}

/// The raw trace ids of `object`'s windows in the clip.
pub(crate) fn window_ids(object: &ObjectRef, clip: &Clip) -> Vec<TraceIdBytes> {
    let hash = object.hash();
    clip.windows
        .iter()
        .map(|&w| raw_trace_id(hash, w).to_bytes())
        .collect()
}

/// `object`'s windows taken out of `traces` and merged.
fn history_of(
    object: &ObjectRef,
    clip: &Clip,
    traces: &mut HashMap<TraceIdBytes, Vec<Span>>,
) -> Option<ObjectHistory> {
    let spans: Vec<Span> = window_ids(object, clip)
        .iter()
        .filter_map(|id| traces.remove(id))
        .flatten()
        .collect();
    merge_until(spans, clip.until).filter(|h| &h.object == object)
}

pub struct Assembler<S> {
    store: Arc<S>,
    limits: Limits,
    metrics: Arc<FrontendMetrics>,
    /// One permit: held by the assembly that has loaded more than a
    /// quarter of `max_bytes` ([`WidePermit`]), so wide traces are
    /// assembled one at a time and the frontend's memory holds one of them,
    /// not one per concurrent request.
    wide: Arc<tokio::sync::Semaphore>,
    /// Reads in flight joined, recent answers reused.
    shared: shared_reads::SharedReads,
}

/// Held by a wide assembly until its trace is rendered and encoded (the
/// caller drops it then): another wide assembly waits for it.
pub(crate) type WidePermit = tokio::sync::OwnedSemaphorePermit;

impl<S: RawStore> Assembler<S> {
    /// An assembler reading `store`; concurrent reads of one raw trace
    /// share one read, answers are not reused after it
    /// ([`Assembler::reusing_reads`]).
    pub fn new(store: Arc<S>, limits: Limits, metrics: Arc<FrontendMetrics>) -> Self {
        Self {
            shared: shared_reads::SharedReads::new(Duration::ZERO, &metrics),
            store,
            limits,
            metrics,
            wide: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Reuses each raw trace read for `period` after it answered (the
    /// server's [`FrontendConfig::raw_read_reuse`](crate::frontend::FrontendConfig::raw_read_reuse)):
    /// a burst of searches reads a hub object's raw trace once, not once
    /// per assembly.
    pub fn reusing_reads(mut self, period: Duration) -> Self {
        self.shared = shared_reads::SharedReads::new(period, &self.metrics);
        self
    }

    /// Bytes of histories past which an assembly is wide.
    fn wide_bytes(&self) -> u64 {
        self.limits.max_bytes / 4
    }

    /// The wide permit, waited for (and the wait counted) if another wide
    /// assembly holds it.
    async fn wait_for_wide(&self) -> WidePermit {
        if let Ok(p) = self.wide.clone().try_acquire_owned() {
            return p;
        }
        self.metrics.wide_assembly_waits.inc();
        tracing::debug!("a wide assembly waits for another to finish");
        self.wide
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// Reads every window of `object` in the clip and merges them.
    #[cfg(feature = "test-support")]
    pub async fn load(
        &self,
        object: &ObjectRef,
        clip: &Clip,
    ) -> Result<Option<ObjectHistory>, RawError> {
        let mut traces = self.read_many(&window_ids(object, clip)).await?;
        Ok(history_of(object, clip, &mut traces))
    }

    /// Every window of every object in one batch of reads; an object with
    /// nothing recorded becomes a placeholder. A window the store could not
    /// serve is left out, and `notes` say so.
    async fn load_many(
        &self,
        objects: Vec<ObjectRef>,
        clip: &Clip,
        notes: &mut Vec<String>,
    ) -> Result<Vec<ObjectHistory>, RawError> {
        let unique: HashSet<&ObjectRef> = objects.iter().collect();
        let ids: Vec<TraceIdBytes> = unique.iter().flat_map(|o| window_ids(o, clip)).collect();
        let reads::Read {
            mut traces,
            unreadable,
        } = self.read_each(&ids).await?;
        let mut loaded: HashMap<ObjectRef, ObjectHistory> = HashMap::with_capacity(unique.len());
        Ok(objects
            .into_iter()
            .map(|o| {
                if let Some(h) = loaded.get(&o) {
                    return h.clone();
                }
                if !unreadable.is_empty() {
                    let ids = window_ids(&o, clip);
                    let failed: Vec<&RawError> =
                        ids.iter().filter_map(|id| unreadable.get(id)).collect();
                    if let Some(first) = failed.first() {
                        notes.push(format!(
                            "{o}: {} of its {} raw traces could not be read, shown without them: {}",
                            failed.len(),
                            ids.len(),
                            crate::messages::clip_message(first.to_string())
                        ));
                    }
                }
                let h = history_of(&o, clip, &mut traces)
                    .unwrap_or_else(|| ObjectHistory::placeholder(o.clone()));
                loaded.insert(o, h.clone());
                h
            })
            .collect())
    }

    /// Builds the tree for `searched` (already loaded) in `scope`, reading
    /// related objects within `clip`. A wide tree comes with the
    /// [`WidePermit`], to be dropped once the trace is rendered.
    pub async fn assemble(
        &self,
        searched: ObjectHistory,
        scope: Scope,
        clip: &Clip,
    ) -> Result<(Assembly, Option<WidePermit>), RawError> {
        let mut notes = Vec::new();
        // Upward chain: searched first, top ancestor last.
        let mut chain = vec![(searched, None::<String>)];
        if matches!(scope, Scope::Ancestors | Scope::Full) {
            let mut seen: HashSet<ObjectRef> = HashSet::from([chain[0].0.object.clone()]);
            loop {
                let current = &chain.last().expect("chain starts non-empty").0;
                if chain.len() > self.limits.max_depth {
                    self.metrics
                        .links_not_followed
                        .get_or_create(&AssemblyLimitLabel {
                            limit: AssemblyLimit::Depth,
                        })
                        .inc();
                    notes.push(format!(
                        "stopped climbing at {} (max depth {})",
                        current.object, self.limits.max_depth
                    ));
                    break;
                }
                let Some(up) = self.parent_link(current) else {
                    break;
                };
                if !seen.insert(up.other.clone()) {
                    notes.push(format!("cycle: {} is its own ancestor", up.other));
                    break;
                }
                let loaded = self
                    .load_many(vec![up.other.clone()], clip, &mut notes)
                    .await?;
                let parent = loaded.into_iter().next().expect("one object loaded");
                // The class is the one of the link from parent to child.
                chain.last_mut().expect("non-empty").1 = Some(up.class.clone());
                chain.push((parent, None));
            }
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut index: HashMap<ObjectRef, usize> = HashMap::new();
        // Lay the chain out top-down.
        for (history, class_to_parent) in chain.into_iter().rev() {
            let parent = nodes.len().checked_sub(1);
            let i = nodes.len();
            index.insert(history.object.clone(), i);
            nodes.push(Node {
                history,
                parent,
                class: None,
                children: Vec::new(),
                copy_of: None,
                shared: false,
            });
            if let Some(p) = parent {
                nodes[p].children.push(i);
            }
            nodes[i].class = class_to_parent;
        }
        let searched = nodes.len() - 1;
        // The descent starts at the top of the chain (full) or at the
        // searched object (descendants) and goes through every chain node
        // below that, so the searched object's own subtree is complete.
        let path: Vec<usize> = match scope {
            Scope::Object | Scope::Ancestors => Vec::new(),
            Scope::Descendants => vec![searched],
            Scope::Full => (0..=searched).collect(),
        };
        let mut copies = Vec::new();
        let mut wide = None;
        if !path.is_empty() {
            copies = self
                .descend(&mut nodes, &mut index, &path, clip, &mut notes, &mut wide)
                .await?;
        }
        let mut asm = Assembly {
            nodes,
            searched,
            notes,
            range: None,
        };
        self.clip_shared(&mut asm);
        for (parent, class, original) in copies {
            let i = asm.nodes.len();
            // Only what happened while the parent was active is shown
            // (`clip_shared_to_parents`): a Node's whole day is not copied
            // under each of a thousand Pods.
            let within = asm.nodes[parent].history.active_range();
            let history = asm.nodes[original].history.leaf_copy_within(within);
            asm.nodes.push(Node {
                history,
                parent: Some(parent),
                class: Some(class),
                children: Vec::new(),
                copy_of: Some(original),
                shared: true,
            });
            asm.nodes[parent].children.push(i);
        }
        clip_shared_to_parents(&mut asm);
        sort_children(&mut asm);
        Ok((asm, wide))
    }

    /// Marks the nodes reached through a shared class (a Node, a
    /// ConfigMap), or below one.
    fn mark_shared(&self, asm: &mut Assembly) {
        for (i, _) in asm.walk() {
            let n = &asm.nodes[i];
            let shared = n.parent.is_some_and(|p| asm.nodes[p].shared)
                || n.class
                    .as_ref()
                    .is_some_and(|c| self.limits.shared_classes.contains(c));
            asm.nodes[i].shared = shared;
        }
    }

    /// Sets the trace's time range from the tree proper and hides the
    /// entries of shared objects outside it: a Node's or ConfigMap's
    /// activity since cluster start-up would otherwise set the start.
    /// Objects reached through a set-up class ([`SET_UP_CLASSES`]: the
    /// PersistentVolumes a cluster's set-up made for claims) do not set
    /// the start either: their entries before it are hidden, the later
    /// ones shown (a volume's release after its claim's delete).
    fn clip_shared(&self, asm: &mut Assembly) {
        self.mark_shared(asm);
        repeats::fold_repeats(asm);
        let set_up = set_up_nodes(asm);
        let own = asm
            .nodes
            .iter()
            .zip(&set_up)
            .filter(|(n, set_up)| !n.shared && !**set_up)
            .filter_map(|(n, _)| n.history.active_range());
        let Some(mut range) = own.fold(None, widen) else {
            // Nothing but set-up objects has activity: theirs is the range.
            let all = asm.nodes.iter().filter(|n| !n.shared);
            asm.range = all
                .filter_map(|n| n.history.active_range())
                .fold(None, widen);
            return self.hide_outside(asm);
        };
        for (n, _) in asm.nodes.iter_mut().zip(&set_up).filter(|(_, s)| **s) {
            let before = n.history.entries.len();
            n.history
                .entries
                .retain(|e| e.span.start_time_unix_nano >= range.0);
            n.history.hidden_entries += before - n.history.entries.len();
            if let Some(r) = n.history.active_range() {
                range = (range.0, range.1.max(r.1));
            }
        }
        asm.range = Some(range);
        self.hide_outside(asm);
    }

    /// Hides the entries of shared objects outside the trace's range.
    fn hide_outside(&self, asm: &mut Assembly) {
        let Some(range) = asm.range else {
            return;
        };
        for n in asm.nodes.iter_mut().filter(|n| n.shared) {
            let before = n.history.entries.len();
            n.history.entries.retain(|e| e.starts_within(range));
            n.history.hidden_entries += before - n.history.entries.len();
        }
    }

    /// The link to climb from `h`: an owner first, then any non-shared parent.
    fn parent_link<'a>(&self, h: &'a ObjectHistory) -> Option<&'a Link> {
        let parents = h
            .links
            .iter()
            .filter(|l| l.role == Role::Parent && !self.limits.shared_classes.contains(&l.class));
        let mut best: Option<&Link> = None;
        for l in parents {
            let rank = |l: &Link| match l.class.as_str() {
                "owner" => 0,
                "owner-ref" => 1,
                _ => 2,
            };
            if best.is_none_or(|b| rank(l) < rank(b)) {
                best = Some(l);
            }
        }
        best
    }

    /// Follows child links level by level from `path[0]`; `path[d]` (a node
    /// of the upward chain, already in the tree) joins the level at depth
    /// `d`, first, so its children are claimed by it. Returns the copies to
    /// add: a shared object (`shared_classes`) reached again is shown under
    /// every object that uses it, as `(parent, class, first occurrence)`.
    ///
    /// Stops following links at `max_depth` levels, `max_objects` objects or
    /// `max_bytes` of histories loaded: a wide level is loaded in slices
    /// sized to what is left of the budget, so one assembly's memory stays
    /// bounded however many Pods a Deployment has. Past a quarter of the
    /// budget, the assembly takes the wide permit into `wide` before it
    /// loads more.
    async fn descend(
        &self,
        nodes: &mut Vec<Node>,
        index: &mut HashMap<ObjectRef, usize>,
        path: &[usize],
        clip: &Clip,
        notes: &mut Vec<String>,
        wide: &mut Option<WidePermit>,
    ) -> Result<Vec<(usize, String, usize)>, RawError> {
        let mut frontier = vec![path[0]];
        let mut depth = 0;
        let mut not_followed = NotFollowed::default();
        let mut loaded_bytes: u64 = nodes.iter().map(|n| history_bytes(&n.history) as u64).sum();
        let mut copies: Vec<(usize, String, ObjectRef)> = Vec::new();
        while !frontier.is_empty() {
            let pending = || -> usize {
                frontier
                    .iter()
                    .map(|&i| child_links(&nodes[i].history).count())
                    .sum()
            };
            if depth >= self.limits.max_depth {
                not_followed.depth += pending();
                break;
            }
            if loaded_bytes >= self.limits.max_bytes {
                not_followed.bytes += pending();
                break;
            }
            // Children to read at this level, each object once.
            let mut wanted: Vec<(usize, Link)> = Vec::new();
            let mut claimed: HashSet<ObjectRef> = HashSet::new();
            for &p in &frontier {
                for l in child_links(&nodes[p].history) {
                    let shared = self.limits.shared_classes.contains(&l.class);
                    let known = index.contains_key(&l.other) || claimed.contains(&l.other);
                    if known && !shared {
                        // Shown once, under the first parent that reached it
                        // (or a cycle back into the tree).
                        continue;
                    }
                    if index.len() + wanted.len() + copies.len() >= self.limits.max_objects {
                        not_followed.objects += 1;
                        continue;
                    }
                    if known {
                        if !is_ancestor_or_self(nodes, index.get(&l.other).copied(), p) {
                            copies.push((p, l.class.clone(), l.other.clone()));
                        }
                        continue;
                    }
                    claimed.insert(l.other.clone());
                    wanted.push((p, l.clone()));
                }
            }
            let mut next = Vec::with_capacity(wanted.len() + 1);
            if let Some(&on_path) = path.get(depth + 1) {
                next.push(on_path);
            }
            // A first slice measures this level's objects; each next one is
            // what the rest of the budget holds at their average size.
            let mut rest = wanted.into_iter();
            let (mut level_objects, mut level_bytes) = (0u64, 0u64);
            let mut slice = FIRST_SLICE;
            loop {
                let take: Vec<(usize, Link)> = rest.by_ref().take(slice).collect();
                if take.is_empty() {
                    break;
                }
                if wide.is_none() && loaded_bytes >= self.wide_bytes() {
                    *wide = Some(self.wait_for_wide().await);
                }
                let loaded = self
                    .load_many(
                        take.iter().map(|(_, l)| l.other.clone()).collect(),
                        clip,
                        notes,
                    )
                    .await?;
                for ((parent, link), history) in take.into_iter().zip(loaded) {
                    let bytes = history_bytes(&history) as u64;
                    loaded_bytes += bytes;
                    level_bytes += bytes;
                    level_objects += 1;
                    let i = nodes.len();
                    index.insert(history.object.clone(), i);
                    nodes.push(Node {
                        history,
                        parent: Some(parent),
                        class: Some(link.class),
                        children: Vec::new(),
                        copy_of: None,
                        shared: false,
                    });
                    nodes[parent].children.push(i);
                    next.push(i);
                }
                let left = self.limits.max_bytes.saturating_sub(loaded_bytes);
                if left == 0 {
                    not_followed.bytes += rest.len();
                    break;
                }
                let per_object = (level_bytes / level_objects).max(1);
                slice = usize::try_from(left / per_object)
                    .unwrap_or(usize::MAX)
                    .max(1);
            }
            frontier = next;
            depth += 1;
        }
        // Wide at the last level: its rendering waits its turn too.
        if wide.is_none() && loaded_bytes >= self.wide_bytes() {
            *wide = Some(self.wait_for_wide().await);
        }
        not_followed.note(
            &self.limits,
            &self.metrics,
            &nodes[path[0]].history.object,
            notes,
        );
        let mut placed = HashSet::new();
        Ok(copies
            .into_iter()
            .filter_map(|(p, class, o)| index.get(&o).map(|&i| (p, class, i)))
            .filter(|(p, _, i)| nodes[*i].parent != Some(*p) && placed.insert((*p, *i)))
            .collect())
    }
}

/// Objects in the first slice of a wide level: enough to measure their
/// size, few enough to stay well within any budget.
const FIRST_SLICE: usize = 64;
