//! Search by change: every write that carried a change propagation ID or one
//! merged from it, as cascades.
//!
//! The merge graph lives in the raw store (`span_model::merge_spans`: each
//! CPID's trace id is the CPID), so any frontend replica walks it the same
//! way: from the searched CPID through its `merged_into` spans, breadth
//! first, each CPID once (a forged cycle ends there), at most
//! [`MAX_RELATED`]. The writes come from a raw search by `cpid` for each;
//! a write's cause is the inferred one when that cause belongs to the same
//! or a merged-from change, else the latest earlier write of its own change
//! or of one its CPID was merged from (explicit, `cascade.rule` `cpid`).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use kascade_cpid::Cpid;
use prometheus_client::metrics::counter::Counter;

use std::sync::Arc;
use std::time::SystemTime;

use tracing::{Instrument as _, field};

use super::assemble::Assembly;
use super::cascade_reads::record_from_span;
use super::merge::merge;
use super::raw::{RawError, RawStore, TimeRange, TraceIdBytes, find_all, string_attr};
use super::{AssembledTrace, Frontend, FrontendError, display};
use crate::analysis::cascade::{self, Cascade};
use crate::flow::{CascadeRole, Cause, ChangeRecord};
use crate::self_trace::TARGET;
use crate::span_model::{SPAN_KIND_MERGE, SPAN_KIND_MERGED_INTO, attr};

/// CPIDs one search follows at most (the searched one and its descendants).
pub(crate) const MAX_RELATED: usize = 256;
/// How far back a change's trace looks when reloaded by id, by default (the
/// id is the CPID and carries no time).
pub(crate) const LOOKBACK: Duration = Duration::from_secs(7 * 24 * 3600);
/// The rule named on a cause found through CPIDs.
pub(crate) const EXPLICIT_RULE: &str = "cpid";
/// Raw reads in flight for a change's trace when the store reads one
/// trace per request (the gRPC store batches them instead).
const READ_CONCURRENCY: usize = 16;

/// One CPID of a search: the searched one (depth 0) or one merged from it
/// (or, walking up, one it was merged from).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Related {
    pub cpid: Cpid,
    /// Merges from the searched CPID.
    pub depth: u32,
    /// The CPIDs it was merged from (empty unless minted by a merge).
    pub sources: Vec<Cpid>,
    /// Who merged, when a merge says so.
    pub controller: String,
}

/// The searched CPID and its descendants, breadth first.
pub(crate) async fn related<S: RawStore>(
    store: &S,
    searched: Cpid,
    notes: &mut Vec<String>,
    reads: &Counter,
) -> Result<Vec<Related>, RawError> {
    walk(store, searched, Direction::Down, notes, reads).await
}

/// The searched CPID and the CPIDs it was merged from, their sources, …
/// ("where did this come from"), breadth first.
pub(crate) async fn ancestors<S: RawStore>(
    store: &S,
    searched: Cpid,
    notes: &mut Vec<String>,
    reads: &Counter,
) -> Result<Vec<Related>, RawError> {
    walk(store, searched, Direction::Up, notes, reads).await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Down,
    Up,
}

async fn walk<S: RawStore>(
    store: &S,
    searched: Cpid,
    direction: Direction,
    notes: &mut Vec<String>,
    reads: &Counter,
) -> Result<Vec<Related>, RawError> {
    let mut out = Vec::new();
    let mut seen = HashSet::from([searched]);
    let mut queue = VecDeque::from([(searched, 0u32)]);
    while let Some((cpid, depth)) = queue.pop_front() {
        if out.len() >= MAX_RELATED {
            notes.push(format!(
                "more than {MAX_RELATED} CPIDs {} {searched}: the first {MAX_RELATED} shown",
                if direction == Direction::Down {
                    "descend from"
                } else {
                    "are ancestors of"
                }
            ));
            break;
        }
        let mut r = Related {
            cpid,
            depth,
            sources: Vec::new(),
            controller: String::new(),
        };
        let mut merged_into = BTreeSet::new();
        reads.inc();
        for s in store.get(cpid.to_bytes()).await? {
            let a = &s.attributes;
            match string_attr(a, attr::SPAN_KIND) {
                Some(SPAN_KIND_MERGE) => {
                    r.sources = string_attr(a, attr::CPID_SOURCES)
                        .unwrap_or_default()
                        .split(',')
                        .filter_map(|c| Cpid::parse(c).ok())
                        .collect();
                    r.controller = string_attr(a, attr::CPID_CONTROLLER)
                        .unwrap_or_default()
                        .to_string();
                }
                Some(SPAN_KIND_MERGED_INTO) => {
                    if let Some(n) =
                        string_attr(a, attr::CPID_MERGED_INTO).and_then(|c| Cpid::parse(c).ok())
                    {
                        merged_into.insert(n);
                    }
                }
                _ => {}
            }
        }
        let next: Vec<Cpid> = match direction {
            Direction::Down => merged_into.into_iter().collect(),
            Direction::Up => r.sources.clone(),
        };
        out.push(r);
        for n in next {
            if seen.insert(n) {
                queue.push_back((n, depth + 1));
            }
        }
    }
    Ok(out)
}

/// The writes of the related CPIDs within `range`, arranged as cascades;
/// notes for what was cut. The object windows holding a CPID's writes are
/// searched `raw_search_limit` at a time ([`find_all`]), at most
/// `max_windows` of them in all, and read in slices of `raw_search_limit`
/// (only the slice's histories are held at once). Raw traces read are
/// counted in `reads`.
pub(crate) async fn cascades_of_change<S: RawStore>(
    store: &S,
    searched: Cpid,
    range: TimeRange,
    raw_search_limit: usize,
    max_windows: usize,
    reads: &Counter,
) -> Result<(Vec<Related>, Vec<Cascade>, Vec<String>), RawError> {
    let mut notes = Vec::new();
    let related = related(store, searched, &mut notes, reads).await?;
    let cpids: HashSet<Cpid> = related.iter().map(|r| r.cpid).collect();
    let mut raw_ids: BTreeSet<TraceIdBytes> = BTreeSet::new();
    for r in &related {
        let tags = [(attr::CPID.to_string(), r.cpid.to_string())];
        let left = max_windows.saturating_sub(raw_ids.len());
        let found = find_all(store, &tags, range, raw_search_limit, left).await?;
        if !found.complete {
            notes.push(format!(
                "change {}: its writes lie in more object windows than were searched ({} per search, --raw-search-limit; {max_windows} in all, --max-objects), some writes not shown",
                r.cpid, raw_search_limit
            ));
        }
        // A CPID's own trace holds its merges, not writes.
        raw_ids.extend(
            found
                .ids
                .into_iter()
                .filter(|id| Cpid::from_bytes(*id).is_none_or(|c| !cpids.contains(&c))),
        );
    }
    let mut records = Vec::new();
    let mut seen = HashSet::new();
    let raw_ids: Vec<_> = raw_ids.into_iter().collect();
    for slice in raw_ids.chunks(raw_search_limit.max(1)) {
        reads.inc_by(slice.len() as u64);
        let mut traces = store.get_many(slice, READ_CONCURRENCY).await?;
        for id in slice {
            let Some(h) = traces.remove(id).and_then(merge) else {
                continue;
            };
            for e in &h.entries {
                if let Some(r) = record_from_span(&h.object, &h.uid, e.source, &e.span)
                    && r.cpid.is_some_and(|c| cpids.contains(&c.cpid))
                    && seen.insert(r.span)
                {
                    records.push(r);
                }
            }
        }
    }
    let sources: HashMap<Cpid, Vec<Cpid>> = related
        .iter()
        .map(|r| (r.cpid, r.sources.clone()))
        .collect();
    explicit_causes(&mut records, &sources);
    Ok((related, cascade::build(records), notes))
}

/// Gives each write a cause within the change: its inferred cause if that
/// belongs to the same change or one it was merged from; else the latest
/// write of such a change that completed before it was received; else it
/// roots a cascade of its own.
pub(crate) fn explicit_causes(records: &mut [ChangeRecord], sources: &HashMap<Cpid, Vec<Cpid>>) {
    records.sort_by_key(|r| (r.received, r.completed, r.span));
    let by_span: HashMap<_, _> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.span, i))
        .collect();
    let feeds = |from: Option<Cpid>, to: Option<Cpid>| match (from, to) {
        (Some(f), Some(t)) => f == t || sources.get(&t).is_some_and(|s| s.contains(&f)),
        _ => false,
    };
    let cpid_of = |r: &ChangeRecord| r.cpid.map(|c| c.cpid);
    let mut found: Vec<Option<Cause>> = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let inferred = r
            .cause
            .as_ref()
            .filter(|_| r.role == CascadeRole::Effect)
            .and_then(|c| by_span.get(&c.span).map(|&k| (c, k)))
            .filter(|&(_, k)| feeds(cpid_of(&records[k]), cpid_of(r)));
        if let Some((c, k)) = inferred {
            let mut c = c.clone();
            c.object = records[k].object.clone();
            found.push(Some(c));
            continue;
        }
        let explicit = records[..i]
            .iter()
            .rev()
            .find(|e| {
                e.completed <= r.received && e.object != r.object && feeds(cpid_of(e), cpid_of(r))
            })
            .map(|e| Cause {
                span: e.span,
                object: e.object.clone(),
                name: cascade::change_name(e),
                edge: if cpid_of(e) == cpid_of(r) {
                    "cpid inherited".to_string()
                } else {
                    "cpid merged".to_string()
                },
                rule: EXPLICIT_RULE.to_string(),
                hop: r.received.duration_since(e.completed).unwrap_or_default(),
            });
        found.push(explicit);
    }
    for (r, cause) in records.iter_mut().zip(found) {
        r.role = if cause.is_some() {
            CascadeRole::Effect
        } else {
            CascadeRole::Root
        };
        r.cause = cause;
    }
}

/// How the notes of a change's trace name its CPIDs.
pub(crate) fn describe_related(related: &[Related]) -> Vec<String> {
    related
        .iter()
        .map(|r| {
            if r.depth == 0 && r.sources.is_empty() {
                format!("change {}", r.cpid)
            } else if r.sources.is_empty() {
                format!("change {} (related)", r.cpid)
            } else {
                let from: Vec<String> = r.sources.iter().map(Cpid::to_string).collect();
                let by = if r.controller.is_empty() {
                    String::new()
                } else {
                    format!(" by {}", r.controller)
                };
                format!("change {} merged from {}{by}", r.cpid, from.join(", "))
            }
        })
        .collect()
}

/// The answer to the related-CPID query (`GET /cpid/related`).
#[derive(Debug, serde::Serialize)]
pub struct RelatedCpids {
    pub cpid: kascade_cpid::Cpid,
    /// The searched CPID first, then what was merged from it, breadth first.
    pub descendants: Vec<Related>,
    /// The searched CPID first, then what it was merged from.
    pub ancestors: Vec<Related>,
    pub notes: Vec<String>,
}

impl<S: RawStore> Frontend<S> {
    /// The trace of a change: its writes and those of the changes merged
    /// from it, as cascades; its id is the CPID. Not cached: a change goes
    /// on after it was first shown.
    pub async fn change_trace(
        &self,
        cpid: kascade_cpid::Cpid,
        range: TimeRange,
    ) -> Result<Option<Arc<AssembledTrace>>, FrontendError> {
        let span = tracing::info_span!(target: TARGET, "change", cpid = %cpid,
            related = field::Empty, writes = field::Empty);
        async {
            let (related, cascades, mut notes) = cascades_of_change(
                &**self.store(),
                cpid,
                range,
                self.cfg.raw_search_limit,
                self.cfg.limits.max_objects,
                &self.metrics.raw_reads,
            )
            .await?;
            span.record("related", related.len());
            let writes: usize = cascades.iter().map(|c| c.changes.len()).sum();
            span.record("writes", writes);
            if writes == 0 {
                return Ok(None);
            }
            let mut all_notes = describe_related(&related);
            all_notes.append(&mut notes);
            let id = cpid.to_bytes();
            // Every write: the trace id is the CPID, with no room for the
            // choice `siblings=all` makes in an object's trace id.
            let resource_spans =
                display::cascade::render(&cascades, &id, &all_notes, None, 0, &Default::default());
            self.metrics.traces_assembled.inc();
            let assembly = Assembly {
                nodes: Vec::new(),
                searched: 0,
                notes: all_notes,
                range: None,
            };
            Ok(Some(self.finish(AssembledTrace::unweighed(
                id,
                assembly,
                cascades,
                resource_spans,
            ))))
        }
        .instrument(span.clone())
        .await
    }

    /// The related-CPID query: the CPIDs merged from `cpid` (descendants)
    /// and those it was merged from (ancestors), each with its sources, as
    /// the raw store holds them (any replica answers the same).
    pub async fn related_cpids(
        &self,
        cpid: kascade_cpid::Cpid,
    ) -> Result<RelatedCpids, FrontendError> {
        let mut notes = Vec::new();
        let store = &**self.store();
        let reads = &self.metrics.raw_reads;
        let descendants = related(store, cpid, &mut notes, reads).await?;
        let ancestors = ancestors(store, cpid, &mut notes, reads).await?;
        Ok(RelatedCpids {
            cpid,
            descendants,
            ancestors,
            notes,
        })
    }

    pub(super) async fn change_trace_by_id(
        &self,
        id: &TraceIdBytes,
    ) -> Result<Option<Arc<AssembledTrace>>, FrontendError> {
        let Some(cpid) = kascade_cpid::Cpid::from_bytes(*id) else {
            return Ok(None);
        };
        let now = SystemTime::now();
        let range = TimeRange::new(now - self.cfg.change_lookback, now);
        self.change_trace(cpid, range).await
    }
}
