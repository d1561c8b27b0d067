//! The pipeline without a network: audit log lines through the source's
//! filter and the processor, spans out, in memory. Used by tests and by
//! offline tools that render traces in the terminal.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::aggregate::redact::Redactor;
use crate::aggregate::rules::RuleSet;
use crate::aggregate::span_cache::LocalSpanCache;
use crate::aggregate::{NOTE_AHEAD, ParsedResponse, Processor, ProcessorConfig};
use crate::flow::{ChangeSink, WatchChange};
use crate::metrics::Metrics;
use crate::source::accept;
use crate::source::audit::AuditFilter;
use crate::source::exports::parse_line;

/// Runs audit log lines through the full processing path and returns every
/// span it would export, in emission order. Malformed lines are returned as
/// `line number: message` errors alongside.
#[cfg(feature = "test-support")]
pub async fn spans_from_audit_lines(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
) -> (Vec<crate::span_model::Span>, Vec<String>) {
    run(lines, cluster, rules, filter, cfg, redactor, None, true).await
}

/// Only the changes, to `sink` (the spans are discarded as they come, so
/// memory stays flat on large inputs); returns the malformed lines.
#[cfg(feature = "test-support")]
pub async fn changes_from_audit_lines(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    sink: Arc<dyn ChangeSink>,
) -> Vec<String> {
    run(
        lines,
        cluster,
        rules,
        filter,
        cfg,
        redactor,
        Some(sink),
        false,
    )
    .await
    .1
}

/// [`changes_from_audit_lines`] with several sinks, each handed every change.
pub(crate) async fn changes_to_sinks(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    sinks: Vec<Arc<dyn ChangeSink>>,
) -> Vec<String> {
    run_with(
        lines,
        Vec::new(),
        cluster,
        rules,
        filter,
        cfg,
        redactor,
        sinks,
        SpansKept::new(false),
    )
    .await
    .1
}

/// [`changes_to_sinks`], then the changes of captured watch streams
/// (versions the audit log did not show: a Metadata-level policy, writes
/// of other apiservers), as the list-watch would have brought them.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn changes_with_watch_to_sinks(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    watch: Vec<WatchChange>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    sinks: Vec<Arc<dyn ChangeSink>>,
) -> Vec<String> {
    run_with(
        lines,
        watch,
        cluster,
        rules,
        filter,
        cfg,
        redactor,
        sinks,
        SpansKept::new(false),
    )
    .await
    .1
}

#[cfg(feature = "test-support")]
#[allow(clippy::too_many_arguments)]
async fn run(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    sink: Option<Arc<dyn ChangeSink>>,
    keep_spans: bool,
) -> (Vec<crate::span_model::Span>, Vec<String>) {
    let sinks = sink.into_iter().collect();
    let out = SpansKept::new(keep_spans);
    let (kept, errors) = run_with(
        lines,
        Vec::new(),
        cluster,
        rules,
        filter,
        cfg,
        redactor,
        sinks,
        out,
    )
    .await;
    (kept.spans, errors)
}

/// Runs audit log lines through the full processing path, handing every
/// span, encoded, to `out` in emission order; returns `out` and the
/// malformed lines (`line number: message`).
pub(crate) async fn encoded_spans_from_audit_lines<O: SpanOut>(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    out: O,
) -> (O, Vec<String>) {
    run_with(
        lines,
        Vec::new(),
        cluster,
        rules,
        filter,
        cfg,
        redactor,
        Vec::new(),
        out,
    )
    .await
}

/// Where an offline run's spans go, one at a time as the processor emits
/// them.
pub(crate) trait SpanOut: Send + 'static {
    /// Whether the spans are wanted at all: when not, the processor builds
    /// none (changes only).
    fn wants_spans(&self) -> bool {
        true
    }

    fn put(&mut self, span: crate::span_model::EncodedSpan);
}

/// Spans decoded and kept in memory, or none built.
struct SpansKept {
    keep: bool,
    spans: Vec<crate::span_model::Span>,
}

impl SpansKept {
    fn new(keep: bool) -> Self {
        Self {
            keep,
            spans: Vec::new(),
        }
    }
}

impl SpanOut for SpansKept {
    fn wants_spans(&self) -> bool {
        self.keep
    }

    fn put(&mut self, span: crate::span_model::EncodedSpan) {
        if self.keep {
            self.spans.push(span.decode());
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_with<O: SpanOut>(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    watch: Vec<WatchChange>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
    sinks: Vec<Arc<dyn ChangeSink>>,
    mut out: O,
) -> (O, Vec<String>) {
    let metrics = Arc::new(Metrics::default());
    // Spans nobody keeps are not built.
    let cfg = ProcessorConfig {
        changes_only: !out.wants_spans(),
        ..cfg
    };
    let (tx, mut rx) = mpsc::channel(1 << 16);
    let ttl = cfg.windowing.width + Duration::from_secs(300);
    let redactor_ahead = Arc::new(redactor.clone());
    let mut processor = Processor::new(
        cfg,
        redactor,
        rules,
        Arc::new(LocalSpanCache::new(1 << 20, ttl)),
        tx,
        metrics.clone(),
    );
    for sink in sinks {
        processor = processor.with_change_sink(sink);
    }
    // Response objects are redacted where they are parsed, as the
    // processor would have.
    let redactor_ahead = processor.sees_whole_objects().then_some(redactor_ahead);
    let collector = tokio::spawn(async move {
        while let Some(s) = rx.recv().await {
            out.put(s);
        }
        out
    });
    let mut errors = Vec::new();
    // As the collector's dispatcher does: lines are noted as candidate
    // causes before they are processed, each line once the next
    // `NOTE_AHEAD` are noted, so a write logged after its effect (its
    // response finished later) is found, wherever it falls in the file.
    let mut ahead: VecDeque<(usize, Parsed)> = VecDeque::with_capacity(NOTE_AHEAD + 1);
    // Lines are decoded on blocking threads, two batches ahead of the one
    // this thread processes: decoding, and parsing and redacting each
    // write's response object, need nothing from the processor and are
    // about half of an offline run's CPU. Batches are handled in order, so
    // the result is the one-thread result.
    let decoder = Decoder {
        cluster: Arc::from(cluster),
        filter: Arc::new(filter.clone()),
        metrics: metrics.clone(),
        redactor: redactor_ahead,
    };
    // An event logged twice (a file given twice, overlapping rotated logs,
    // an `audit.log*` glob) is one write: counted once.
    let mut seen = crate::source::repeats::Repeats::default();
    let mut duplicates = 0u64;
    let (mut batches, reader) = read_ahead(lines);
    let mut decoding = VecDeque::with_capacity(DECODE_BATCHES_AHEAD + 1);
    while decoding.len() < DECODE_BATCHES_AHEAD
        && let Some(batch) = batches.recv().await
    {
        decoding.push_back(decoder.decode_batch(batch));
    }
    while let Some(batch) = decoding.pop_front() {
        if let Some(next) = batches.recv().await {
            decoding.push_back(decoder.decode_batch(next));
        }
        let batch = match batch.await {
            Ok(batch) => batch,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        for (i, decoded) in batch {
            match decoded {
                Ok(Some((item, _)))
                    if !seen.first_time(item.event.once_key(), item.event.stage_timestamp) =>
                {
                    duplicates += 1;
                }
                Ok(Some((mut item, response))) => {
                    item.arrival = processor.note_arrival(&item);
                    ahead.push_back((i, (item, response)));
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("{}: {e}", i + 1)),
            }
            if ahead.len() > NOTE_AHEAD
                && let Some((i, (item, response))) = ahead.pop_front()
                && let Err(e) = processor.process_parsed(&item, response).await
            {
                errors.push(format!("{}: {e}", i + 1));
            }
        }
    }
    for (i, (item, response)) in ahead {
        if let Err(e) = processor.process_parsed(&item, response).await {
            errors.push(format!("{}: {e}", i + 1));
        }
    }
    // Its channel is closed: it has read everything, or panicked.
    if let Err(panic) = reader.join() {
        std::panic::resume_unwind(panic);
    }
    seen.warn_if_forgotten();
    if duplicates > 0 {
        tracing::warn!(
            duplicates,
            "audit events logged more than once (the same auditID and stage: a file given twice, or overlapping logs) were counted once"
        );
    }
    if !watch.is_empty() {
        for change in watch {
            let what = change.object.to_string();
            if let Err(e) = processor.process_watch(change).await {
                errors.push(format!("0: watch {what}: {e}"));
            }
        }
        // What no audit event claimed is a watch-only change.
        if let Err(e) = processor.flush_watch(true).await {
            errors.push(format!("0: watch: {e}"));
        }
    }
    drop(processor);
    match collector.await {
        Ok(out) => (out, errors),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// What makes an audit event the same event wherever it is logged.
/// Lines decoded per batch: a few MB of audit events in flight.
const DECODE_BATCH_LINES: usize = 512;

/// Batches decoded at once, ahead of the one being processed.
const DECODE_BATCHES_AHEAD: usize = 2;

/// An event as the source accepts it, with its response object parsed if
/// processing will need it.
type Parsed = (crate::flow::Accepted, Option<ParsedResponse>);

/// A line's number (0-based) and its event (`None`: filtered out), or why
/// it is malformed.
type Decoded = (usize, Result<Option<Parsed>, String>);

/// What decoding a line needs, shared with the blocking threads.
#[derive(Clone)]
struct Decoder {
    cluster: Arc<str>,
    filter: Arc<AuditFilter>,
    metrics: Arc<Metrics>,
    /// The processor's redactor, when it redacts objects.
    redactor: Option<Arc<Redactor>>,
}

/// Reads `lines` on a thread of its own, in batches of
/// [`DECODE_BATCH_LINES`] non-blank lines with their numbers (0-based), at
/// most [`DECODE_BATCHES_AHEAD`] batches ahead of their decoding: reading and
/// unpacking the files (a tenth of an offline run's CPU) leaves the thread
/// that processes. The channel closes when the lines end; the thread is
/// joined to learn whether it panicked.
fn read_ahead(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
) -> (
    mpsc::Receiver<Vec<(usize, String)>>,
    std::thread::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::channel(DECODE_BATCHES_AHEAD);
    let mut lines = lines.into_iter().enumerate();
    let reader = std::thread::Builder::new()
        .name("kascade-read".into())
        .spawn(move || {
            loop {
                let batch: Vec<(usize, String)> = lines
                    .by_ref()
                    .filter(|(_, line)| !line.trim().is_empty())
                    .take(DECODE_BATCH_LINES)
                    .collect();
                if batch.is_empty() || tx.blocking_send(batch).is_err() {
                    return;
                }
            }
        })
        .expect("a thread to read the input");
    (rx, reader)
}

impl Decoder {
    /// Starts decoding `batch` on a blocking thread.
    fn decode_batch(&self, batch: Vec<(usize, String)>) -> tokio::task::JoinHandle<Vec<Decoded>> {
        let decoder = self.clone();
        tokio::task::spawn_blocking(move || {
            batch
                .into_iter()
                .map(|(i, line)| (i, decoder.decode(&line)))
                .collect()
        })
    }

    fn decode(&self, line: &str) -> Result<Option<Parsed>, String> {
        let event = parse_line(line)?;
        Ok(
            accept(event, &self.cluster, &self.filter, &self.metrics).map(|item| {
                let response = ParsedResponse::ahead_of(&item, self.redactor.as_deref());
                (item, response)
            }),
        )
    }
}
