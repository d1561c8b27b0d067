//! Reading the related objects' raw traces so that one unreadable trace
//! costs that object, not the whole answer.
//!
//! A store can fail on one trace and serve the others: Jaeger v2's query
//! API answers 500 for a trace holding two spans with one id (its
//! warning translation dereferences nil), which a store keeps after two
//! collector replicas each recorded a link while their shared span cache
//! was gone. A hub object (a Node every Pod links to) is in every search,
//! so one such trace would fail them all.

use std::collections::HashMap;

use futures::StreamExt as _;
use opentelemetry_proto::tonic::trace::v1::Span;

use super::Assembler;
use crate::frontend::raw::{RawError, RawStore, TraceIdBytes};

/// What a batch of reads gave: the traces read, and the ids that could not
/// be read with why.
pub(crate) struct Read {
    pub traces: HashMap<TraceIdBytes, Vec<Span>>,
    pub unreadable: HashMap<TraceIdBytes, RawError>,
}

impl Read {
    /// The first unreadable trace's error, clipped, for a note.
    pub(crate) fn first_error(&self) -> Option<String> {
        self.unreadable
            .values()
            .next()
            .map(|e| crate::messages::clip_message(e.to_string()))
    }
}

/// Whether `e` is about one trace (the store answered, for it, with an
/// error or with what cannot be read) rather than the store as a whole
/// (unreachable, TLS, the client), which fails the answer.
fn is_about_the_trace(e: &RawError) -> bool {
    matches!(
        e,
        RawError::Status { .. } | RawError::Grpc { .. } | RawError::Decode { .. }
    )
}

impl<S: RawStore> Assembler<S> {
    /// One raw trace, counted.
    #[cfg(feature = "test-support")]
    pub async fn read(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        Ok(self.read_many(&[id]).await?.remove(&id).unwrap_or_default())
    }

    /// Many raw traces (as few round trips as the store allows), counted;
    /// ids the store does not have are absent.
    pub async fn read_many(
        &self,
        ids: &[TraceIdBytes],
    ) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError> {
        self.metrics.raw_reads.inc_by(ids.len() as u64);
        let r = self
            .shared
            .read(&self.store, ids, self.limits.concurrency, &self.metrics)
            .await;
        if r.is_err() {
            self.metrics.raw_read_errors.inc();
        }
        r
    }

    /// Reads `ids` as [`read_many`](Self::read_many) does; when that fails
    /// on a trace, each id again alone (at most `concurrency` at once) and
    /// the ids still failing are returned as unreadable. An error about the
    /// store is the answer's error. (A store failing every trace fails the
    /// searched object's own read, which takes no such leniency.)
    pub(crate) async fn read_each(&self, ids: &[TraceIdBytes]) -> Result<Read, RawError> {
        let first = match self.read_many(ids).await {
            Ok(traces) => {
                return Ok(Read {
                    traces,
                    unreadable: HashMap::new(),
                });
            }
            Err(e) if !is_about_the_trace(&e) || ids.len() < 2 => return Err(e),
            Err(e) => e,
        };
        let store = self.store();
        // Collected first: a stream of futures made by a closure over
        // borrowed ids would not be `Send` (rust-lang/rust#102211).
        let reads: Vec<_> = ids
            .iter()
            .map(|&id| async move { (id, store.get(id).await) })
            .collect();
        let answers: Vec<(TraceIdBytes, Result<Vec<Span>, RawError>)> =
            futures::stream::iter(reads)
                .buffer_unordered(self.limits.concurrency.max(1))
                .collect()
                .await;
        self.metrics.raw_reads.inc_by(ids.len() as u64);
        let mut read = Read {
            traces: HashMap::with_capacity(ids.len()),
            unreadable: HashMap::new(),
        };
        for (id, answer) in answers {
            match answer {
                Ok(spans) if spans.is_empty() => {}
                Ok(spans) => {
                    read.traces.insert(id, spans);
                }
                Err(e) if is_about_the_trace(&e) => {
                    self.metrics.raw_read_errors.inc();
                    read.unreadable.insert(id, e);
                }
                Err(e) => return Err(e),
            }
        }
        tracing::warn!(
            unreadable = read.unreadable.len(),
            of = ids.len(),
            error = %crate::messages::clip_message(first.to_string()),
            "raw traces the store could not serve are left out of the answer (its objects say so)"
        );
        Ok(read)
    }
}
