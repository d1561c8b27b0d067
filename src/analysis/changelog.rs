//! `--output changelog=PATH`: one JSON line per change — time, operation,
//! object, old and new object (the processor's redacted states), cause and
//! root — the change-log format of the cascading-change research. The
//! processor never waits for the file: records go through a bounded queue
//! to a writer thread; when it is full they are dropped, counted
//! (`kascade_changelog_dropped_total`) and logged.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::flow::{ChangeRecord, ChangeSink, SpanRef};
use crate::metrics::Metrics;

/// Records that may wait for the writer.
pub(crate) const DEFAULT_QUEUE: usize = 10_000;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

fn span_json(s: &SpanRef) -> Value {
    json!({"trace_id": s.trace_hex(), "span_id": s.span_hex()})
}

/// The change-log line of a change (without the trailing newline).
pub(crate) fn change_line(c: &ChangeRecord) -> Value {
    let operation = if c.subresource.is_empty() {
        c.verb.clone()
    } else {
        format!("{} {}", c.verb, c.subresource)
    };
    let cause = c.cause.as_ref().map(|cause| {
        json!({
            "trace_id": cause.span.trace_hex(),
            "span_id": cause.span.span_hex(),
            "name": cause.name,
            "edge": cause.edge,
            "rule": cause.rule,
            "hop_us": u64::try_from(cause.hop.as_micros()).unwrap_or(u64::MAX),
            "object": object_json(&cause.object, None),
        })
    });
    json!({
        "time": rfc3339(c.completed),
        "received": rfc3339(c.received),
        "operation": operation,
        "verb": c.verb,
        "subresource": c.subresource,
        "user": c.user,
        "code": c.code,
        "source": match c.source { crate::flow::ChangeSource::Audit => "audit", crate::flow::ChangeSource::Watch => "watch" },
        "object": object_json(&c.object, Some(&c.uid)),
        "old_object": c.old.as_deref(),
        "new_object": c.new.as_deref(),
        "deleted": c.deleted,
        "readiness": c.readiness.as_ref().map(|r| json!({"status": r.status, "message": r.message})),
        "role": c.role.as_str(),
        "span": span_json(&c.span),
        "cause": cause,
        "root": span_json(&c.root),
        "depth": c.depth,
    })
}

fn object_json(o: &crate::model::ObjectRef, uid: Option<&str>) -> Value {
    let mut v = json!({
        "cluster": o.cluster,
        "group": o.group,
        "resource": o.resource,
        "namespace": o.namespace,
        "name": o.name,
    });
    if let Some(uid) = uid {
        v["uid"] = json!(uid);
    }
    v
}

#[derive(Default)]
struct Drops {
    unreported: u64,
    last_warning: Option<Instant>,
}

/// The change-log writer: a [`ChangeSink`] in front of a writer thread.
pub(crate) struct ChangelogWriter {
    path: PathBuf,
    tx: Mutex<Option<SyncSender<ChangeRecord>>>,
    thread: Mutex<Option<JoinHandle<std::io::Result<u64>>>>,
    metrics: Arc<Metrics>,
    drops: Mutex<Drops>,
}

impl ChangelogWriter {
    /// Creates (truncates) `path` and starts the writer thread.
    pub(crate) fn create(path: &Path, queue: usize, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let file = crate::output_file::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create the change log {}: {e}", path.display()))?;
        let (tx, rx) = sync_channel(queue.max(1));
        let thread = std::thread::Builder::new()
            .name("kascade-changelog".into())
            .spawn(move || write_all(rx, BufWriter::new(file)))?;
        Ok(Self {
            path: path.to_path_buf(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            metrics,
            drops: Mutex::new(Drops::default()),
        })
    }

    /// Stops taking records, writes what is queued and flushes; returns
    /// the lines written.
    pub(crate) fn finish(&self) -> anyhow::Result<u64> {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(0);
        };
        match thread.join() {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(anyhow::anyhow!(
                "writing the change log {}: {e}",
                self.path.display()
            )),
            Err(_) => Err(anyhow::anyhow!(
                "the change-log writer of {} failed",
                self.path.display()
            )),
        }
    }

    fn dropped(&self) {
        self.metrics.changelog_dropped.inc();
        let mut d = self.drops.lock().unwrap_or_else(|e| e.into_inner());
        d.unreported += 1;
        let now = Instant::now();
        if d.last_warning
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
        {
            tracing::warn!(
                dropped = d.unreported,
                path = %self.path.display(),
                "the change-log writer falls behind: {} changes dropped (kascade_changelog_dropped_total)",
                d.unreported
            );
            d.unreported = 0;
            d.last_warning = Some(now);
        }
    }
}

fn write_all(rx: Receiver<ChangeRecord>, mut out: BufWriter<File>) -> std::io::Result<u64> {
    let mut n = 0;
    let mut write = |c: ChangeRecord, out: &mut BufWriter<File>| -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, &change_line(&c))?;
        out.write_all(b"\n")?;
        n += 1;
        Ok(())
    };
    while let Ok(c) = rx.recv() {
        write(c, &mut out)?;
        while let Ok(c) = rx.try_recv() {
            write(c, &mut out)?;
        }
        // Flushed whenever the queue is empty, so a reader sees every change soon.
        out.flush()?;
    }
    out.flush()?;
    Ok(n)
}

impl ChangeSink for ChangelogWriter {
    fn wants_objects(&self) -> bool {
        true
    }

    fn record(&self, change: &ChangeRecord) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = tx.as_ref() else {
            self.dropped();
            return;
        };
        match tx.try_send(change.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.dropped(),
        }
    }
}

impl Drop for ChangelogWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
