//! Raw spans held in memory (offline `kascade trace`, tests, benchmarks).

use super::*;

/// Raw spans held in memory, indexed by trace.
#[derive(Default)]
pub struct MemoryStore {
    traces: HashMap<TraceIdBytes, Vec<Span>>,
}

impl MemoryStore {
    pub fn new(spans: impl IntoIterator<Item = Span>) -> Self {
        let mut traces: HashMap<TraceIdBytes, Vec<Span>> = HashMap::new();
        for s in spans {
            if let Some(id) = trace_id_bytes(&s.trace_id) {
                traces.entry(id).or_default().push(s);
            }
        }
        Self { traces }
    }

    /// Earliest and latest span start, in ns since the epoch.
    pub fn time_span(&self) -> Option<(u64, u64)> {
        let starts = self
            .traces
            .values()
            .flatten()
            .map(|s| s.start_time_unix_nano);
        let (a, b) = starts.fold((u64::MAX, 0), |(a, b), t| (a.min(t), b.max(t)));
        (a <= b).then_some((a, b))
    }

    /// The `(group, resource)` pairs of the objects held.
    pub fn resources(&self) -> std::collections::BTreeSet<(String, String)> {
        super::resources_of(self.traces.values().flatten())
    }

    /// The namespaces holding an object of `resource` (in `group` when
    /// given) named `name`.
    pub fn namespaces_of(
        &self,
        resource: &str,
        group: Option<&str>,
        name: &str,
    ) -> std::collections::BTreeSet<String> {
        super::namespaces_of(self.traces.values().flatten(), resource, group, name)
    }

    /// Adds spans (e.g. a component's own traces beside the collector's).
    pub fn add(&mut self, spans: impl IntoIterator<Item = Span>) {
        for s in spans {
            if let Some(id) = trace_id_bytes(&s.trace_id) {
                self.traces.entry(id).or_default().push(s);
            }
        }
    }

    pub fn span_count(&self) -> usize {
        self.traces.values().map(Vec::len).sum()
    }

    pub fn len(&self) -> usize {
        self.traces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }
}

impl RawStore for MemoryStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        let (from, to) = (nanos(range.start), nanos(range.end));
        let mut found: Vec<(u64, TraceIdBytes)> = self
            .traces
            .iter()
            .filter_map(|(id, spans)| Some((search_match(spans, tags, from, to)?, *id)))
            .collect();
        found.sort();
        Ok(found.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    /// Traces without an object span (the store holds no resources, so
    /// `service` is not checked) with a span carrying every tag and
    /// starting within `range`.
    async fn find_component(
        &self,
        _service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        let (from, to) = (nanos(range.start), nanos(range.end));
        let mut found: Vec<(u64, TraceIdBytes)> = self
            .traces
            .iter()
            .filter(|(_, spans)| {
                !spans
                    .iter()
                    .any(|s| s.tag(attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))
            })
            .filter_map(|(id, spans)| {
                spans
                    .iter()
                    .filter(|s| (from..=to).contains(&s.start_time_unix_nano))
                    .find(|s| tags.iter().all(|(k, v)| s.tag(k) == Some(v.as_str())))
                    .map(|s| (s.start_time_unix_nano, *id))
            })
            .collect();
        found.sort();
        Ok(found.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    async fn get(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        Ok(self.traces.get(&id).cloned().unwrap_or_default())
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<RelationCounts, RawError> {
        let mut counts = RelationCounts::new();
        for id in self.find(&[], range, limit).await? {
            let spans = &self.traces[&id];
            count_child_links(
                spans,
                |s, k| string_attr(&s.attributes, k).map(str::to_string),
                &mut counts,
            );
        }
        Ok(counts)
    }

    async fn clusters(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<std::collections::BTreeSet<String>, RawError> {
        let mut out = std::collections::BTreeSet::new();
        for id in self.find(&[], range, limit).await? {
            out.extend(object_clusters(&self.traces[&id]));
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("in-memory store ({} raw traces)", self.traces.len())
    }
}
