//! Raw spans spilled to a temporary file (offline `kascade trace`): the
//! spans of a large audit log, decoded, took several times the log's size
//! in memory, while an assembly reads only the searched object's relatives.
//! Memory holds an index (each span's place in the file, times and the
//! few tags searches name); a read decodes the spans of the traces asked
//! for from the file.
//!
//! The file is created owner-only (0600) without a name in the temporary
//! directory (`TMPDIR`; `O_TMPFILE` where the system has it), so it is gone
//! when the process ends, however it ends.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::os::unix::fs::FileExt as _;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

use super::*;
use crate::offline::SpanOut;
use crate::span_model::EncodedSpan;

/// The string attributes the index keeps, the only ones a search names:
/// the object span's identity ([`crate::frontend::SEARCH_TAGS`]), the span
/// kind, and what finds a cascade's or a change's writes. A search by any
/// other key reads the traces' spans from the file.
const INDEXED_KEYS: [&str; 8] = [
    attr::SPAN_KIND,
    attr::CLUSTER,
    attr::GROUP,
    attr::RESOURCE,
    attr::NAMESPACE,
    attr::NAME,
    attr::CASCADE_ROOT_SPAN_ID,
    attr::CPID,
];

/// Bytes gathered before one write to the file.
const WRITE_BUFFER: usize = 1 << 20;

/// A span's part of a trace as the index keeps it.
struct SpanEntry {
    offset: u64,
    len: u32,
    start: u64,
    end: u64,
    /// (index in [`INDEXED_KEYS`], value) of the indexed attributes the
    /// span has.
    tags: Box<[(u8, Box<str>)]>,
}

impl SearchedSpan for SpanEntry {
    fn start(&self) -> u64 {
        self.start
    }

    fn end(&self) -> u64 {
        self.end
    }

    fn tag(&self, key: &str) -> Option<&str> {
        let i = INDEXED_KEYS.iter().position(|k| *k == key)?;
        self.tags
            .iter()
            .find(|(k, _)| usize::from(*k) == i)
            .map(|(_, v)| &**v)
    }
}

impl SpanEntry {
    /// Bytes this entry holds in memory.
    fn held_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .tags
                .iter()
                .map(|(_, v)| std::mem::size_of::<(u8, Box<str>)>() + v.len())
                .sum::<usize>()
    }
}

/// What the index reads of an encoded span: the fields of
/// `opentelemetry.proto.trace.v1.Span` it keeps; the rest (events with
/// diffs and snapshots, links) is skipped unread.
#[derive(Clone, PartialEq, prost::Message)]
struct SpanHead {
    #[prost(bytes = "vec", tag = "1")]
    trace_id: Vec<u8>,
    #[prost(fixed64, tag = "7")]
    start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    attributes: Vec<KeyValue>,
}

/// Spills the spans an offline run emits ([`SpanOut`]) and indexes them;
/// [`SpillWriter::finish`] gives the store.
pub(crate) struct SpillWriter {
    out: BufWriter<File>,
    written: u64,
    traces: crate::model::FastHashMap<TraceIdBytes, Vec<SpanEntry>>,
    held_bytes: usize,
    /// The first failure; later spans are dropped.
    error: Option<String>,
}

impl SpillWriter {
    /// A writer over a new temporary file.
    pub(crate) fn new() -> anyhow::Result<Self> {
        let cannot = |e: std::io::Error| {
            anyhow::anyhow!(
                "cannot create a temporary file for the spans in {} (set TMPDIR to another directory): {e}",
                std::env::temp_dir().display()
            )
        };
        let file = tempfile::tempfile().map_err(cannot)?;
        // `O_TMPFILE` files are created under the umask (0644 commonly);
        // the spans hold what the audit log held.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(cannot)?;
        Ok(Self {
            out: BufWriter::with_capacity(WRITE_BUFFER, file),
            written: 0,
            traces: Default::default(),
            held_bytes: 0,
            error: None,
        })
    }

    fn spill(&mut self, span: &EncodedSpan) -> Result<(), String> {
        let bytes = span.0.as_ref();
        let head = SpanHead::decode(bytes).map_err(|e| format!("a span kascade wrote: {e}"))?;
        // As the in-memory store: a span without a trace id is in no trace.
        let Some(id) = trace_id_bytes(&head.trace_id) else {
            return Ok(());
        };
        let len = u32::try_from(bytes.len())
            .map_err(|_| format!("a span of {} bytes (more than 4 GiB)", bytes.len()))?;
        self.out.write_all(bytes).map_err(|e| {
            format!(
                "cannot write the spans to a temporary file in {} (set TMPDIR to a directory with room): {e}",
                std::env::temp_dir().display()
            )
        })?;
        let entry = SpanEntry {
            offset: self.written,
            len,
            start: head.start_time_unix_nano,
            end: head.end_time_unix_nano,
            tags: indexed_tags(head.attributes),
        };
        self.written += u64::from(len);
        let trace = self.traces.entry(id).or_default();
        if trace.is_empty() {
            self.held_bytes += std::mem::size_of::<(TraceIdBytes, Vec<SpanEntry>)>();
        }
        self.held_bytes += entry.held_bytes();
        trace.push(entry);
        Ok(())
    }

    /// The store of the spans spilled, or why spilling failed.
    pub(crate) fn finish(self) -> anyhow::Result<SpillStore> {
        if let Some(e) = self.error {
            anyhow::bail!(e);
        }
        let file = self.out.into_inner().map_err(|e| {
            anyhow::anyhow!(
                "cannot write the spans to a temporary file in {} (set TMPDIR to a directory with room): {}",
                std::env::temp_dir().display(),
                e.error()
            )
        })?;
        let starts = self.traces.values().flatten().map(|s| s.start);
        let (a, b) = starts.fold((u64::MAX, 0), |(a, b), t| (a.min(t), b.max(t)));
        let store = SpillStore {
            file,
            traces: self.traces,
            spilled_bytes: self.written,
            held_bytes: self.held_bytes,
            time_span: (a <= b).then_some((a, b)),
        };
        tracing::debug!(
            raw_traces = store.traces.len(),
            spilled_bytes = store.spilled_bytes(),
            held_bytes = store.held_bytes(),
            "spans spilled to a temporary file"
        );
        Ok(store)
    }
}

impl SpanOut for SpillWriter {
    fn put(&mut self, span: EncodedSpan) {
        if self.error.is_none()
            && let Err(e) = self.spill(&span)
        {
            self.error = Some(e);
        }
    }
}

/// The indexed string attributes among `attributes`.
fn indexed_tags(attributes: Vec<KeyValue>) -> Box<[(u8, Box<str>)]> {
    attributes
        .into_iter()
        .filter_map(|kv| {
            let i = INDEXED_KEYS.iter().position(|k| *k == kv.key)?;
            match kv.value?.value? {
                any_value::Value::StringValue(s) => Some((i as u8, s.into_boxed_str())),
                _ => None,
            }
        })
        .collect()
}

/// Raw spans in a temporary file, indexed in memory by trace.
pub(crate) struct SpillStore {
    file: File,
    traces: crate::model::FastHashMap<TraceIdBytes, Vec<SpanEntry>>,
    spilled_bytes: u64,
    held_bytes: usize,
    time_span: Option<(u64, u64)>,
}

impl SpillStore {
    /// `(group, resource)` of every object in the store.
    pub(crate) fn resources(&self) -> std::collections::BTreeSet<(String, String)> {
        super::resources_of(self.traces.values().flatten())
    }

    /// The namespaces holding an object of `resource` (in `group` when
    /// given) named `name`.
    pub(crate) fn namespaces_of(
        &self,
        resource: &str,
        group: Option<&str>,
        name: &str,
    ) -> std::collections::BTreeSet<String> {
        super::namespaces_of(self.traces.values().flatten(), resource, group, name)
    }

    /// Earliest and latest span start, in ns since the epoch.
    pub(crate) fn time_span(&self) -> Option<(u64, u64)> {
        self.time_span
    }

    /// Bytes of spans in the file.
    pub(crate) fn spilled_bytes(&self) -> u64 {
        self.spilled_bytes
    }

    /// Bytes the index holds in memory (its entries and tags, not the
    /// maps' spare capacity).
    pub(crate) fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    fn read(&self, entry: &SpanEntry) -> Result<Span, RawError> {
        let mut buf = vec![0; entry.len as usize];
        self.file
            .read_exact_at(&mut buf, entry.offset)
            .map_err(|e| RawError::Spill {
                message: e.to_string(),
            })?;
        Span::decode(buf.as_slice()).map_err(|e| RawError::Spill {
            message: format!("the span at byte {}: {e}", entry.offset),
        })
    }

    fn spans(&self, entries: &[SpanEntry]) -> Result<Vec<Span>, RawError> {
        entries.iter().map(|e| self.read(e)).collect()
    }
}

impl RawStore for SpillStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        let (from, to) = (nanos(range.start), nanos(range.end));
        let indexed = tags.iter().all(|(k, _)| INDEXED_KEYS.contains(&k.as_str()));
        let mut found = Vec::new();
        for (id, entries) in &self.traces {
            let start = if indexed {
                search_match(entries, tags, from, to)
            } else {
                search_match(&self.spans(entries)?, tags, from, to)
            };
            found.extend(start.map(|start| (start, *id)));
        }
        found.sort();
        Ok(found.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    async fn get(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        match self.traces.get(&id) {
            Some(entries) => self.spans(entries),
            None => Ok(Vec::new()),
        }
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<RelationCounts, RawError> {
        let mut counts = RelationCounts::new();
        for id in self.find(&[], range, limit).await? {
            count_child_links(
                &self.get(id).await?,
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
            out.extend(object_clusters(&self.get(id).await?));
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!(
            "spans spilled to a temporary file ({} raw traces, {} bytes)",
            self.traces.len(),
            self.spilled_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::aggregate::ProcessorConfig;
    use crate::aggregate::redact::Redactor;
    use crate::aggregate::rules::RuleSet;
    use crate::source::audit::AuditFilter;

    /// The spans as the processor emits them, encoded.
    #[derive(Default)]
    struct Encoded(Vec<EncodedSpan>);

    impl SpanOut for Encoded {
        fn put(&mut self, span: EncodedSpan) {
            self.0.push(span);
        }
    }

    fn fixtures() -> Vec<String> {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures"));
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|d| d.unwrap().path())
            .filter(|p| p.join("audit.log").is_file())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The spans the collector's pipeline makes of a fixture's audit log.
    async fn spans_of(scenario: &str) -> Vec<EncodedSpan> {
        let path = format!(
            "{}/e2e/fixtures/{scenario}/audit.log",
            env!("CARGO_MANIFEST_DIR")
        );
        let log = std::fs::read_to_string(&path).unwrap();
        let (out, errors) = crate::offline::encoded_spans_from_audit_lines(
            log.lines().map(str::to_string).collect::<Vec<_>>(),
            "c",
            Arc::new(
                RuleSet::load_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules")))
                    .unwrap(),
            ),
            &AuditFilter::default(),
            ProcessorConfig::default(),
            Redactor::new(None),
            Encoded::default(),
        )
        .await;
        assert!(errors.is_empty(), "{scenario}: {errors:?}");
        assert!(!out.0.is_empty(), "{scenario}: no spans");
        out.0
    }

    fn spill(spans: &[EncodedSpan]) -> SpillStore {
        let mut writer = SpillWriter::new().unwrap();
        for s in spans {
            writer.put(s.clone());
        }
        writer.finish().unwrap()
    }

    fn tag(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    /// Every search the frontend makes of a store (by object, by cascade
    /// root, by change, everything), and one by a tag the index does not
    /// keep, over `spans`.
    fn searches(spans: &[Span]) -> Vec<Vec<(String, String)>> {
        let mut out = vec![
            vec![],
            vec![tag(attr::SPAN_KIND, SPAN_KIND_OBJECT)],
            vec![tag("audit.verb", "create")],
            vec![tag(attr::RESOURCE, "pods"), tag("audit.verb", "create")],
        ];
        for s in spans {
            let a = |k| {
                string_attr(&s.attributes, k)
                    .unwrap_or_default()
                    .to_string()
            };
            if string_attr(&s.attributes, attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT) {
                out.push(vec![
                    tag(attr::CLUSTER, &a(attr::CLUSTER)),
                    tag(attr::RESOURCE, &a(attr::RESOURCE)),
                    tag(attr::NAMESPACE, &a(attr::NAMESPACE)),
                    tag(attr::NAME, &a(attr::NAME)),
                ]);
                out.push(vec![tag(attr::GROUP, &a(attr::GROUP))]);
            }
            for key in [attr::CASCADE_ROOT_SPAN_ID, attr::CPID] {
                if let Some(v) = string_attr(&s.attributes, key) {
                    out.push(vec![tag(key, v)]);
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[tokio::test]
    async fn the_spilled_store_answers_as_the_memory_store_on_every_fixture() {
        for scenario in fixtures() {
            let encoded = spans_of(&scenario).await;
            let memory = MemoryStore::new(encoded.iter().map(EncodedSpan::decode));
            let spilled = spill(&encoded);
            assert_eq!(spilled.time_span(), memory.time_span(), "{scenario}");
            let (first, last) = memory.time_span().unwrap();
            let middle = first + (last - first) / 2;
            let ranges = [
                (first, last),
                (first, middle),
                (middle, last),
                (last + 1, u64::MAX),
            ]
            .map(|(a, b)| TimeRange::new(from_nanos(a), from_nanos(b)));
            let decoded: Vec<Span> = encoded.iter().map(EncodedSpan::decode).collect();
            for tags in searches(&decoded) {
                for range in ranges {
                    for limit in [1, 3, usize::MAX] {
                        assert_eq!(
                            spilled.find(&tags, range, limit).await.unwrap(),
                            memory.find(&tags, range, limit).await.unwrap(),
                            "{scenario}: find {tags:?} in {range:?}, limit {limit}"
                        );
                    }
                }
            }
            let whole = ranges[0];
            let ids = memory.find(&[], whole, usize::MAX).await.unwrap();
            assert_eq!(ids.len(), memory.len(), "{scenario}");
            for id in ids {
                assert_eq!(
                    spilled.get(id).await.unwrap(),
                    memory.get(id).await.unwrap(),
                    "{scenario}: trace {}",
                    hex_trace_id(&id)
                );
            }
            assert_eq!(spilled.get([7; 16]).await.unwrap(), Vec::<Span>::new());
            assert_eq!(
                spilled.relation_counts(whole, usize::MAX).await.unwrap(),
                memory.relation_counts(whole, usize::MAX).await.unwrap(),
                "{scenario}"
            );
            assert_eq!(
                spilled.clusters(whole, usize::MAX).await.unwrap(),
                memory.clusters(whole, usize::MAX).await.unwrap(),
                "{scenario}"
            );
        }
    }

    #[tokio::test]
    async fn the_index_holds_no_span_bodies() {
        let encoded = spans_of("deployment").await;
        let store = spill(&encoded);
        let spilled: usize = encoded.iter().map(|s| s.0.len()).sum();
        assert_eq!(store.spilled_bytes(), spilled as u64);
        // What a span's index entry may hold: its place and times, and the
        // indexed tags (object identity, a cascade root's id, a CPID), but
        // none of the diffs, snapshots, links or other attributes.
        let allowed: usize = encoded
            .iter()
            .map(|s| {
                let span = s.decode();
                let tags = INDEXED_KEYS
                    .iter()
                    .filter_map(|k| string_attr(&span.attributes, k))
                    .map(|v| std::mem::size_of::<(u8, Box<str>)>() + v.len());
                std::mem::size_of::<SpanEntry>() + tags.sum::<usize>()
            })
            .sum::<usize>()
            + store.traces.len() * std::mem::size_of::<(TraceIdBytes, Vec<SpanEntry>)>();
        assert_eq!(store.held_bytes(), allowed);
        let held: usize = store
            .traces
            .values()
            .flatten()
            .map(SpanEntry::held_bytes)
            .sum();
        assert!(held <= store.held_bytes());
        // The bodies stay in the file: the index is a small part of them.
        assert!(
            store.held_bytes() * 4 < spilled,
            "index {} bytes for {spilled} bytes of spans",
            store.held_bytes()
        );
    }

    #[tokio::test]
    async fn the_spill_file_is_owner_only_and_has_no_name() {
        let store = spill(&spans_of("deployment").await);
        let meta = store.file.metadata().unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        // No directory entry: the file goes when the process does.
        assert_eq!(meta.nlink(), 0);
        assert_eq!(meta.len(), store.spilled_bytes());
    }

    #[tokio::test]
    async fn a_span_that_cannot_be_read_back_is_an_error_naming_the_spill_file() {
        let encoded = spans_of("deployment").await;
        let store = spill(&encoded);
        let id = *store.traces.keys().next().unwrap();
        // The file cut short under the index.
        store.file.set_len(0).unwrap();
        let e = store.get(id).await.unwrap_err().to_string();
        assert!(
            e.starts_with("cannot read back the spans spilled to a temporary file: "),
            "{e}"
        );
    }
}
