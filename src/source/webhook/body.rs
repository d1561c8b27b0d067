//! Reading an audit batch: its encoding, its body within the size and time
//! bounds, decompression, and decoding off the async runtime.

use super::*;

pub(super) fn body_encoding(headers: &HeaderMap) -> Result<BodyEncoding, Refusal> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    match encoding {
        "identity" | "" => Ok(BodyEncoding::Identity),
        "gzip" => Ok(BodyEncoding::Gzip),
        other => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Encoding {} is not supported (use gzip or none)",
                crate::messages::quote(other)
            ),
        )),
    }
}

/// The body's size as its `Content-Length` announces it, if it does.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A place for a body among `--max-intake-bytes`, taken before any of it
/// is read: its `Content-Length` (else `--max-body-bytes`), plus
/// `--max-body-bytes` for the inflated copy of a gzipped one. Without room
/// the answer is 429 with `Retry-After`: the apiserver retries the batch.
pub(super) fn reserve_intake(
    st: &WebhookState,
    cluster: &str,
    headers: &HeaderMap,
    encoding: BodyEncoding,
) -> Result<IntakePermit, Box<Response>> {
    let limit = st.max_body_bytes as u64;
    let inflated = if encoding == BodyEncoding::Gzip {
        limit
    } else {
        0
    };
    match try_reserve_intake(&st.intake_bytes, &st.metrics, headers, limit, inflated) {
        Ok(permit) => Ok(permit),
        Err(msg) => {
            AuditEventsRejected {
                reason: RejectReason::Overload,
                events: 1,
                cluster,
                error: &msg,
            }
            .emit(&st.metrics);
            let mut resp = error(StatusCode::TOO_MANY_REQUESTS, msg);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            Err(Box::new(resp))
        }
    }
}

/// A place among `--max-intake-bytes` (the KiB permits of `intake_bytes`)
/// for a body of `headers`' `Content-Length` (at most `limit`, else
/// `limit`) and `more` bytes beside it; else what to answer with 429.
pub(in crate::source) fn try_reserve_intake(
    intake_bytes: &Arc<Semaphore>,
    metrics: &Metrics,
    headers: &HeaderMap,
    limit: u64,
    more: u64,
) -> Result<IntakePermit, String> {
    let announced = content_length(headers).map_or(limit, |n| n.min(limit));
    let bytes = announced + more;
    let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
    match intake_bytes.clone().try_acquire_many_owned(kib) {
        Ok(permit) => {
            metrics.intake_bytes.inc_by(i64::from(kib) << 10);
            Ok(IntakePermit {
                _permit: permit,
                bytes: i64::from(kib) << 10,
                gauge: metrics.intake_bytes.clone(),
            })
        }
        Err(_) => Err(format!(
            "{} bytes of webhook bodies are being read and decoded; this one's {bytes} would pass --max-intake-bytes: retry",
            metrics.intake_bytes.get()
        )),
    }
}

/// A body's place among `--max-intake-bytes` (see [`reserve_intake`]).
pub(in crate::source) struct IntakePermit {
    _permit: tokio::sync::OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for IntakePermit {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

/// Reads the whole body within `--body-read-timeout`, refusing more than
/// `--max-body-bytes` as soon as it is announced or exceeded.
pub(super) async fn read_body(
    st: &WebhookState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, Refusal> {
    read_bounded(headers, body, st.max_body_bytes, st.body_timeout).await
}

/// Reads the whole body within `timeout` (else 408), refusing more than
/// `limit` bytes (413) as soon as it is announced or exceeded.
pub(in crate::source) async fn read_bounded(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Refusal> {
    let announced = content_length(headers);
    if announced.is_some_and(|n| n > limit as u64) {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body exceeds {limit} bytes (--max-body-bytes)"),
        ));
    }
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!("body not received within {timeout:?} (--body-read-timeout)"),
        )),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body exceeds {limit} bytes (--max-body-bytes)"),
        )),
        Ok(Err(e)) => Err((StatusCode::BAD_REQUEST, format!("cannot read body: {e}"))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

pub(super) fn decompress(
    limit: usize,
    encoding: BodyEncoding,
    body: &[u8],
) -> Result<Cow<'_, [u8]>, Refusal> {
    match encoding {
        BodyEncoding::Identity => Ok(Cow::Borrowed(body)),
        BodyEncoding::Gzip => {
            let mut out = Vec::new();
            let limit = limit as u64;
            flate2::read::GzDecoder::new(body)
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    (
                        StatusCode::BAD_REQUEST,
                        format!("body is not valid gzip: {e}"),
                    )
                })?;
            if out.len() as u64 > limit {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("decompressed body exceeds {limit} bytes (--max-body-bytes)"),
                ));
            }
            Ok(Cow::Owned(out))
        }
    }
}

/// A decoded webhook batch: the events to process and the malformed items.
pub(super) struct Decoded {
    pub(super) accepted: Vec<Accepted>,
    pub(super) errors: Vec<String>,
}

/// Decompresses, decodes and filters one batch (CPU work: called on a
/// blocking thread).
pub(super) fn decode_batch(
    st: &WebhookState,
    cluster: &str,
    encoding: BodyEncoding,
    body: &[u8],
    replayed: bool,
) -> Result<Decoded, Refusal> {
    let body = decompress(st.max_body_bytes, encoding, body).inspect_err(|(_, msg)| {
        AuditEventsRejected {
            reason: RejectReason::BadBody,
            events: 1,
            cluster,
            error: msg,
        }
        .emit(&st.metrics);
    })?;
    let batch = crate::source::exports::decode_body(&body).map_err(|e| {
        AuditEventsRejected {
            reason: RejectReason::Malformed,
            events: 1,
            cluster,
            error: &e,
        }
        .emit(&st.metrics);
        (StatusCode::BAD_REQUEST, e)
    })?;
    if !replayed {
        st.arrivals
            .note(cluster, &batch.events, std::time::SystemTime::now());
    }
    let source = Metrics::source(if replayed {
        Source::Spool
    } else {
        Source::Webhook
    });
    st.metrics
        .events_received
        .get_or_create(&source)
        .inc_by((batch.events.len() + batch.errors.len()) as u64);
    if let Some(first) = batch.errors.first() {
        AuditEventsRejected {
            reason: RejectReason::Malformed,
            events: batch.errors.len() as u64,
            cluster,
            error: first,
        }
        .emit(&st.metrics);
    }
    let mut accepted: Vec<_> = batch
        .events
        .into_iter()
        .filter_map(|ev| {
            crate::source::accept_advising(
                ev,
                cluster,
                &st.filter,
                &st.metrics,
                crate::source::PolicyAdvice::Operator,
            )
        })
        .map(|mut a| {
            a.replayed = replayed;
            a.more_in_batch = true;
            a
        })
        .collect();
    if let Some(last) = accepted.last_mut() {
        last.more_in_batch = false;
    }
    Ok(Decoded {
        accepted,
        errors: batch.errors,
    })
}

pub(super) async fn decode_off_runtime(
    st: &Arc<WebhookState>,
    cluster: &str,
    encoding: BodyEncoding,
    body: Bytes,
    replayed: bool,
) -> Result<Decoded, Refusal> {
    let span = tracing::info_span!(target: TARGET, "decode", bytes = body.len(),
        events = field::Empty, malformed = field::Empty);
    let slot = st
        .decode_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_string()))?;
    let st = st.clone();
    let cluster = cluster.to_string();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        span.in_scope(|| {
            let decoded = decode_batch(&st, &cluster, encoding, &body, replayed);
            if let Ok(d) = &decoded {
                span.record("events", d.accepted.len());
                span.record("malformed", d.errors.len());
            }
            decoded
        })
    })
    .await
    .unwrap_or_else(|e| {
        Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("decoding the batch failed: {e}"),
        ))
    })
}
