//! Kubernetes components' own traces joined to the writes they served.
//!
//! kube-apiserver exports one trace per request (sent to `kascade collect
//! --component-traces-listen`, forwarded to the raw store unchanged); its
//! root span (`POST /api/v1/namespaces/{:namespace}/pods`) and the handler
//! span (`Create`) carry the request's audit ID as the tag `audit-id`. An
//! audit span names the same ID (`audit.id`), so the join is exact: one
//! search of the raw store by `audit-id` per write shown. The joined spans
//! keep their span ids; only their trace id becomes the assembled trace's,
//! the root's parent becomes the span that shows the write, and the root
//! links back to the apiserver's own trace.

use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};

use super::raw::{RawError, RawStore, TimeRange, TraceIdBytes, int_attr, string_attr};
use crate::span_model::attr;

mod join;

pub(crate) use join::{join, join_syncs};

pub use crate::component_spans::APISERVER_SERVICE;
pub use crate::component_spans::AUDIT_ID_TAG;
pub(crate) use crate::component_spans::ComponentSpans;
pub use crate::component_spans::KUBELET_SERVICE;
pub use crate::component_spans::POD_UID_TAG;
#[cfg(feature = "test-support")]
pub use crate::component_spans::parts;
#[cfg(feature = "test-support")]
pub use crate::component_spans::spans_from_otlp_json_lines;
/// Most writes of one assembled trace whose component spans are read (see
/// [`Write::rank`] for which first): each is one search of the raw store (a
/// store that indexes no tags scans every trace for each, ~40 ms in the
/// harness's), and the fast ones' requests say little.
pub(crate) const MAX_JOINED_WRITES: usize = 256;
/// Writes whose requests are always read, however long their searches
/// take; past them, a search starts only within [`JOIN_BUDGET`].
pub(crate) const ALWAYS_JOINED_WRITES: usize = 64;
/// How long the searches of the writes past [`ALWAYS_JOINED_WRITES`] may
/// keep starting: a cold assembly waits at most about this long more for
/// them (a store that answers each in milliseconds joins every write).
pub(crate) const JOIN_BUDGET: Duration = Duration::from_secs(1);
/// Most writes `/explain` reads the requests of, the slowest first.
pub(crate) const MAX_EXPLAINED_WRITES: usize = 256;
/// The tag on a trace's top span saying how many shown writes' requests
/// were not looked up ([`MAX_JOINED_WRITES`]).
pub(crate) const NOT_JOINED_TAG: &str = "apiserver.writes_not_joined";
/// How far around a write its request's spans are searched (the apiserver
/// starts its root span as the request arrives; clocks are one host's).
const SLACK: Duration = Duration::from_secs(5);

/// A write to look up: its audit ID and its request's times (ns).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Write {
    pub audit_id: String,
    pub received: u64,
    pub completed: u64,
    /// Refused (code ≥ 400), not for a conflict (a controller's routine
    /// retry): a webhook that denied it shows in its request.
    pub failed: bool,
    /// A cascade's root (a user's change): the write the trace is about.
    pub root: bool,
}

impl Write {
    /// Which writes' requests are read first: the slow ones (their request
    /// says what took the time), the cascades' roots, the refused, then the
    /// longest.
    fn rank(&self) -> std::cmp::Reverse<(bool, bool, bool, u64)> {
        let took = self.completed.saturating_sub(self.received);
        let slow = took >= crate::component_spans::SLOW_REQUEST.as_nanos() as u64;
        std::cmp::Reverse((slow, self.root, self.failed, took))
    }
}

/// A Pod whose kubelet syncs to look up: its uid, the times of its
/// history (ns) and the audit IDs of its writes (what shows it in modes
/// without an object span).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pod {
    pub uid: String,
    pub from: u64,
    pub to: u64,
    pub writes: Vec<String>,
}

/// Most Pods of one assembled trace whose kubelet syncs are read (one
/// search each).
pub(crate) const MAX_JOINED_PODS: usize = 64;
/// Most syncs read per Pod (a crash-looping Pod syncs at every back-off).
pub const MAX_SYNCS_PER_POD: usize = 32;
/// How long after a Pod's last write its syncs are still looked for: the
/// kubelet syncs a Pod it has nothing new to report on (a container in
/// back-off, a probe failing) without a write.
const SYNCS_AFTER_LAST_WRITE: Duration = Duration::from_secs(300);

/// What to look up: the apiserver's traces of `writes` under
/// `apiserver_service`, the kubelet's syncs of `pods` under
/// `kubelet_service` (an empty service: none).
pub(crate) struct Lookups<'a> {
    pub apiserver_service: &'a str,
    pub writes: Vec<Write>,
    /// Writes whose requests are read at most (ranked by [`Write::rank`]):
    /// [`MAX_JOINED_WRITES`], [`MAX_EXPLAINED_WRITES`].
    pub max_writes: usize,
    /// Past [`ALWAYS_JOINED_WRITES`], how long searches may keep starting
    /// (`None`: no limit).
    pub budget: Option<Duration>,
    pub kubelet_service: &'a str,
    pub pods: Vec<Pod>,
}

/// What an assembled trace shows that components may have traced: the
/// writes its spans show (a span of a write, or a write's log on an object
/// span), by audit ID, and the Pods it shows (by their object span's uid,
/// or one of their writes). Writes and Pods the display left out (siblings
/// beyond `--max-siblings`, summarised) are not looked up: nothing would
/// hold their spans.
pub(crate) fn shown(
    out: &[ResourceSpans],
    assembly: &super::assemble::Assembly,
) -> (Vec<Write>, Vec<Pod>) {
    let mut writes: Vec<Write> = Vec::new();
    let mut uids: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for s in out
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        let failed = |attrs: &[KeyValue]| {
            int_attr(attrs, attr::AUDIT_CODE).is_some_and(|c| c >= 400 && c != 409)
        };
        let root = |attrs: &[KeyValue]| string_attr(attrs, attr::CASCADE_ROLE) == Some("root");
        if let Some(id) = string_attr(&s.attributes, attr::AUDIT_ID) {
            writes.push(Write {
                audit_id: id.to_string(),
                received: s.start_time_unix_nano,
                completed: s.end_time_unix_nano,
                failed: failed(&s.attributes),
                root: root(&s.attributes),
            });
        }
        for e in &s.events {
            if let Some(id) = string_attr(&e.attributes, attr::AUDIT_ID) {
                writes.push(Write {
                    audit_id: id.to_string(),
                    received: e.time_unix_nano,
                    completed: e.time_unix_nano,
                    failed: failed(&e.attributes),
                    root: root(&e.attributes),
                });
            }
        }
        if string_attr(&s.attributes, attr::RESOURCE) == Some("pods")
            && let Some(uid) = string_attr(&s.attributes, attr::UID)
        {
            uids.insert(uid);
        }
    }
    let ids: std::collections::HashSet<&str> = writes.iter().map(|w| w.audit_id.as_str()).collect();
    let audit_id = |s: &Span| string_attr(&s.attributes, attr::AUDIT_ID).map(str::to_string);
    let pods = assembly
        .nodes
        .iter()
        .filter(|n| n.history.object.resource == "pods" && !n.history.uid.is_empty())
        .filter_map(|n| {
            let e = &n.history.entries;
            let pod_writes: Vec<String> = e.iter().filter_map(|e| audit_id(&e.span)).collect();
            let is_shown = uids.contains(n.history.uid.as_str())
                || pod_writes.iter().any(|w| ids.contains(w.as_str()));
            is_shown.then_some(())?;
            Some(Pod {
                uid: n.history.uid.clone(),
                from: e.iter().map(|e| e.span.start_time_unix_nano).min()?,
                to: e.iter().map(|e| e.span.end_time_unix_nano).max()?,
                writes: pod_writes,
            })
        })
        .collect();
    (writes, pods)
}

fn at(ns: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_nanos(ns)
}

fn around(from: u64, to: u64, after: Duration) -> TimeRange {
    TimeRange::new(
        at(from).checked_sub(SLACK).unwrap_or(at(from)),
        at(to) + after,
    )
}

/// Reads the apiserver's spans of the writes (at most `max_writes`, ranked
/// by [`Write::rank`]) and the kubelet's syncs of the Pods (the first
/// [`MAX_JOINED_PODS`], at most [`MAX_SYNCS_PER_POD`] each) from `store`,
/// `concurrency` searches at a time; for each service one search over the
/// whole time range first, so a store without its traces costs one search.
pub(crate) async fn read<S: RawStore>(
    store: &S,
    lookups: Lookups<'_>,
    concurrency: usize,
) -> Result<ComponentSpans, RawError> {
    let Lookups {
        apiserver_service,
        mut writes,
        max_writes,
        budget,
        kubelet_service,
        mut pods,
    } = lookups;
    writes.sort_by(|a, b| a.audit_id.cmp(&b.audit_id));
    writes.dedup_by(|a, b| a.audit_id == b.audit_id);
    writes.sort_by_key(Write::rank);
    pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    pods.dedup_by(|a, b| a.uid == b.uid);
    let mut not_read = writes.len().saturating_sub(max_writes);
    writes.truncate(max_writes);
    pods.truncate(MAX_JOINED_PODS);
    let deadline = budget.map(|b| (ALWAYS_JOINED_WRITES, std::time::Instant::now() + b));
    let requests = searches(
        store,
        apiserver_service,
        writes
            .iter()
            .map(|w| Search {
                tags: vec![(AUDIT_ID_TAG.to_string(), w.audit_id.clone())],
                range: around(w.received, w.completed, SLACK),
                limit: 2,
            })
            .collect(),
        concurrency,
        deadline,
    );
    let syncs = searches(
        store,
        kubelet_service,
        pods.iter()
            .map(|p| Search {
                tags: vec![(POD_UID_TAG.to_string(), p.uid.clone())],
                range: around(p.from, p.to, SYNCS_AFTER_LAST_WRITE),
                limit: MAX_SYNCS_PER_POD,
            })
            .collect(),
        concurrency,
        None,
    );
    let (requests, syncs) = futures::join!(requests, syncs);
    let (mut ids, skipped) = requests?;
    not_read += skipped;
    ids.extend(syncs?.0);
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Ok(ComponentSpans::default());
    }
    let traces = store.get_many(&ids, concurrency).await?;
    let mut spans = ComponentSpans::from_spans(traces.into_values().flatten());
    spans.not_read = not_read;
    Ok(spans)
}

/// One search of a component's traces: spans with these tags, starting in
/// the range, at most `limit` traces.
struct Search {
    tags: Vec<(String, String)>,
    range: TimeRange,
    limit: usize,
}

/// The traces of `service` each search found: none when the service is
/// empty or holds nothing in the searches' whole range. With a `deadline`
/// (first searches always made, then an instant), a search past the first
/// ones starts only before the instant; returns also how many did not.
async fn searches<S: RawStore>(
    store: &S,
    service: &str,
    searches: Vec<Search>,
    concurrency: usize,
    deadline: Option<(usize, std::time::Instant)>,
) -> Result<(Vec<TraceIdBytes>, usize), RawError> {
    use futures::StreamExt as _;
    let (Some(from), Some(to)) = (
        searches.iter().map(|s| s.range.start).min(),
        searches.iter().map(|s| s.range.end).max(),
    ) else {
        return Ok((Vec::new(), 0));
    };
    if service.is_empty()
        || store
            .find_component(service, &[], TimeRange::new(from, to), 1)
            .await?
            .is_empty()
    {
        return Ok((Vec::new(), 0));
    }
    // Checked as each search starts (buffer_unordered starts them in order
    // as earlier ones finish).
    let found: Vec<Option<Result<Vec<TraceIdBytes>, RawError>>> =
        futures::stream::iter(searches.into_iter().enumerate().map(|(i, s)| async move {
            if let Some((always, until)) = deadline
                && i >= always
                && std::time::Instant::now() >= until
            {
                return None;
            }
            Some(
                store
                    .find_component(service, &s.tags, s.range, s.limit)
                    .await,
            )
        }))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut ids = Vec::new();
    let mut skipped = 0;
    for f in found {
        match f {
            Some(found) => ids.extend(found?),
            None => skipped += 1,
        }
    }
    Ok((ids, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::raw::MemoryStore;

    /// A captured run's apiserver traces (the real kubelet's crash loop):
    /// every request's (audit ID, received, completed), from its root span.
    fn captured() -> (MemoryStore, Vec<Write>) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/real-crashloop/apiserver-traces.jsonl"
        );
        requests_of(&std::fs::read_to_string(path).unwrap())
    }

    /// The requests of a whole-cluster run's traces (`slow-webhook`: every
    /// request of the cluster's start-up and two rollouts).
    fn whole_cluster() -> (MemoryStore, Vec<Write>) {
        use std::io::Read as _;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/corpus/slow-webhook/apiserver-traces.jsonl.gz"
        );
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        requests_of(&text)
    }

    fn requests_of(text: &str) -> (MemoryStore, Vec<Write>) {
        let spans = crate::component_spans::spans_from_otlp_json_lines(text).unwrap();
        let comps = ComponentSpans::from_spans(spans.clone());
        let mut writes: Vec<Write> = spans
            .iter()
            .filter(|s| s.parent_span_id.is_empty())
            .filter_map(|s| {
                let id = string_attr(&s.attributes, AUDIT_ID_TAG)?;
                comps.key_of(id)?;
                Some(Write {
                    audit_id: id.to_string(),
                    received: s.start_time_unix_nano,
                    completed: s.end_time_unix_nano,
                    failed: false,
                    root: false,
                })
            })
            .collect();
        writes.sort_by(|a, b| a.audit_id.cmp(&b.audit_id));
        writes.dedup_by(|a, b| a.audit_id == b.audit_id);
        (MemoryStore::new(spans), writes)
    }

    /// Past the bound, the requests read are the slow writes', the
    /// cascades' roots', the refused ones', then the longest: the ones
    /// whose inner spans say something.
    #[tokio::test]
    async fn past_the_bound_the_slow_the_roots_the_refused_then_the_longest_are_read() {
        let (store, mut writes) = captured();
        assert!(writes.len() > 10, "{} requests captured", writes.len());
        let duration = |w: &Write| w.completed - w.received;
        writes.sort_by_key(|w| (duration(w), w.audit_id.clone()));
        // The fastest refused, the next fastest a user's change: read
        // before longer ones however fast.
        writes[0].failed = true;
        writes[1].root = true;
        let (failed, root) = (writes[0].audit_id.clone(), writes[1].audit_id.clone());
        let slow: Vec<String> = writes
            .iter()
            .filter(|w| duration(w) >= 300_000_000)
            .map(|w| w.audit_id.clone())
            .collect();
        let mut rest: Vec<&Write> = writes[2..]
            .iter()
            .filter(|w| duration(w) < 300_000_000)
            .collect();
        rest.sort_by_key(|w| std::cmp::Reverse(duration(w)));
        let by_time: Vec<String> = rest.iter().map(|w| w.audit_id.clone()).collect();
        let bound = slow.len() + 2 + 3;
        let read = |max_writes| {
            read(
                &store,
                Lookups {
                    apiserver_service: APISERVER_SERVICE,
                    writes: writes.clone(),
                    max_writes,
                    budget: None,
                    kubelet_service: "",
                    pods: Vec::new(),
                },
                4,
            )
        };
        let got = read(bound).await.unwrap();
        assert_eq!(got.requests(), bound);
        assert_eq!(got.not_read, writes.len() - bound);
        for id in slow.iter().chain([&failed, &root]).chain(&by_time[..3]) {
            assert!(got.key_of(id).is_some(), "{id} not read");
        }
        for id in &by_time[3..] {
            assert!(got.key_of(id).is_none(), "{id} read");
        }
        // Within the bound, every one.
        let all = read(writes.len()).await.unwrap();
        assert_eq!((all.requests(), all.not_read), (writes.len(), 0));
    }

    /// Past the writes always read, searches start only within the budget:
    /// none left, none more; a budget never spent, every write (up to the
    /// bound).
    #[tokio::test]
    async fn past_the_first_writes_searches_start_only_within_the_budget() {
        let (store, writes) = whole_cluster();
        assert!(
            writes.len() > ALWAYS_JOINED_WRITES + 10,
            "{} requests captured",
            writes.len()
        );
        let read = |budget| {
            read(
                &store,
                Lookups {
                    apiserver_service: APISERVER_SERVICE,
                    writes: writes.clone(),
                    max_writes: writes.len(),
                    budget,
                    kubelet_service: "",
                    pods: Vec::new(),
                },
                4,
            )
        };
        let spent = read(Some(Duration::ZERO)).await.unwrap();
        assert_eq!(spent.requests(), ALWAYS_JOINED_WRITES);
        assert_eq!(spent.not_read, writes.len() - ALWAYS_JOINED_WRITES);
        let ample = read(Some(Duration::from_secs(24 * 3600))).await.unwrap();
        assert_eq!((ample.requests(), ample.not_read), (writes.len(), 0));
    }
}
