//! Jaeger v2 remote storage API (`jaeger.storage.v2.TraceReader`,
//! `DependencyReader`) over the assembled traces, so a stock Jaeger v2 with a
//! `grpc` trace storage serves its UI from kascade.
//!
//! The UI's search form maps as: Service = display mode, Operation = cluster,
//! Tags = cluster/group/resource/namespace/name (and `scope`, `siblings`), lookback =
//! clip range.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use tonic::{Request, Response, Status};

use super::assembled::encoded_chunks;
use super::display::{Mode, SIBLINGS_TAG, parse_siblings};
use super::http::MAX_TIME_SECS;
use super::proto::dependency_reader_server::{DependencyReader, DependencyReaderServer};
use super::proto::trace_reader_server::{TraceReader, TraceReaderServer};
use super::proto::{
    Dependency, FindTraceIDsResponse, FindTracesRequest, FoundTraceId, GetDependenciesRequest,
    GetDependenciesResponse, GetOperationsRequest, GetOperationsResponse, GetServicesRequest,
    GetServicesResponse, GetTracesRequest, Operation, TraceQueryParameters, TracesMessage,
    any_value,
};
use super::raw::{RawStore, TimeRange, from_nanos, trace_id_bytes};
use super::{AssembledTrace, Found, Frontend, FrontendError, SearchQuery};
use crate::frontend::assemble::Scope;
use crate::messages::{clip_message, quote};
use crate::metrics::{FrontendMetrics, Rpc};

type TraceStream = Pin<Box<dyn Stream<Item = Result<TracesMessage, Status>> + Send>>;

/// Default number of traces a search returns when the UI does not say.
const DEFAULT_SEARCH_DEPTH: usize = 20;

pub struct JaegerStorage<S> {
    frontend: Arc<Frontend<S>>,
}

impl<S: RawStore> JaegerStorage<S> {
    pub fn new(frontend: Arc<Frontend<S>>) -> Self {
        Self { frontend }
    }

    fn count(&self, rpc: Rpc) {
        self.frontend
            .metrics()
            .requests
            .get_or_create(&FrontendMetrics::rpc(rpc))
            .inc();
    }

    fn error(&self, rpc: Rpc) {
        count_error(&self.frontend, rpc, &tracing::Span::current());
    }

    fn fail(&self, rpc: Rpc, e: FrontendError) -> Status {
        self.error(rpc);
        to_status(e)
    }

    pub fn servers(self) -> (TraceReaderServer<Self>, DependencyReaderServer<Deps<S>>) {
        let deps = Deps {
            frontend: self.frontend.clone(),
        };
        (
            TraceReaderServer::new(self),
            DependencyReaderServer::new(deps),
        )
    }
}

/// An RPC's failure, in its self-tracing span (the request's) and the
/// error counter.
fn count_error<S: RawStore>(frontend: &Frontend<S>, rpc: Rpc, span: &tracing::Span) {
    crate::self_trace::record_error(span, &format!("{} failed", rpc.as_str()));
    frontend
        .metrics()
        .errors
        .get_or_create(&FrontendMetrics::rpc(rpc))
        .inc();
}

/// An InvalidArgument whose message is clipped to fit a gRPC status (a
/// message too large for the trailers leaves the client with no status).
fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(clip_message(msg.into()))
}

fn to_status(e: FrontendError) -> Status {
    status_of(&e)
}

fn status_of(e: &FrontendError) -> Status {
    match e {
        FrontendError::InvalidArgument(m) => invalid(m.clone()),
        FrontendError::Raw(r) => {
            tracing::warn!(error = %r, "raw read failed");
            Status::unavailable(clip_message(r.to_string()))
        }
        FrontendError::Timeout(_) => {
            tracing::warn!(error = %e, "assembly stopped");
            Status::deadline_exceeded(e.to_string())
        }
        FrontendError::AnswerCut(m) => Status::resource_exhausted(m.clone()),
        FrontendError::Busy(m) => {
            tracing::warn!(error = %m, "search refused");
            Status::unavailable(m.clone())
        }
        FrontendError::Shared(inner) => status_of(inner),
    }
}

/// Trace ids asked for in one GetTraces (the UI asks for one or two).
pub(crate) const MAX_TRACES_PER_GET: usize = 100;
/// Tags in one search (there are six distinct ones).
pub(crate) const MAX_SEARCH_TAGS: usize = 32;

/// A time of a query. `None` when absent or before the epoch: Jaeger sends
/// Go's zero time (year 1) for a bound the user left open. Times beyond
/// [`MAX_TIME_SECS`] and malformed nanoseconds are InvalidArgument.
fn timestamp(
    field: &str,
    t: &Option<prost_types::Timestamp>,
) -> Result<Option<SystemTime>, Status> {
    let Some(t) = t else {
        return Ok(None);
    };
    let nanos = u32::try_from(t.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| invalid(format!("{field}: nanos {} not in 0..1e9", t.nanos)))?;
    let Ok(secs) = u64::try_from(t.seconds) else {
        return Ok(None);
    };
    if secs > MAX_TIME_SECS {
        return Err(invalid(format!(
            "{field}: {secs} s since the epoch is after 9999-12-31T23:59:59Z, the latest time kascade accepts"
        )));
    }
    UNIX_EPOCH
        .checked_add(Duration::new(secs, nanos))
        .map(Some)
        .ok_or_else(|| invalid(format!("{field}: {secs} s is out of range")))
}

/// The UI's search as a [`SearchQuery`]; bad input is an InvalidArgument
/// naming what is wrong.
pub fn parse_query(
    q: Option<TraceQueryParameters>,
    default_scope: Scope,
) -> Result<SearchQuery, Status> {
    let q = q.ok_or_else(|| invalid("missing query"))?;
    let mode = if q.service_name.is_empty() {
        Mode::ALL[0]
    } else {
        q.service_name
            .parse::<Mode>()
            .map_err(|e| invalid(format!("service: {e}")))?
    };
    if q.attributes.len() > MAX_SEARCH_TAGS {
        return Err(invalid(format!(
            "{} tags, more than the {MAX_SEARCH_TAGS} allowed",
            q.attributes.len()
        )));
    }
    let mut scope = default_scope;
    let mut all_siblings = false;
    let mut tags = Vec::new();
    for kv in &q.attributes {
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            _ => {
                return Err(invalid(format!(
                    "tag {}: expected a string value",
                    quote(&kv.key)
                )));
            }
        };
        match kv.key.as_str() {
            "scope" => {
                scope = value
                    .parse()
                    .map_err(|e| invalid(format!("tag \"scope\": {e}")))?;
            }
            SIBLINGS_TAG => {
                all_siblings = parse_siblings(&value)
                    .map_err(|e| invalid(format!("tag \"{SIBLINGS_TAG}\": {e}")))?;
            }
            super::CPID_TAG => {
                kascade_cpid::Cpid::parse(value.trim())
                    .map_err(|e| invalid(format!("tag \"cpid\": {e}")))?;
                tags.push((super::CPID_TAG.to_string(), value));
            }
            k if super::SEARCH_TAGS.contains(&k) => {
                super::check_tag(k, &value).map_err(invalid)?;
                // The core API group has no name; accept the usual spellings.
                let value = if k == "group" && (value == "core" || value == "v1") {
                    String::new()
                } else {
                    value
                };
                tags.push((k.to_string(), value));
            }
            other => {
                return Err(invalid(format!(
                    "unknown tag {}: search by {}, scope, siblings, or cpid",
                    quote(other),
                    super::SEARCH_TAGS.join(", ")
                )));
            }
        }
    }
    if !q.operation_name.is_empty() && !tags.iter().any(|(k, _)| k == "cluster") {
        super::check_tag("cluster", &q.operation_name)
            .map_err(|e| invalid(format!("operation: {e}")))?;
        tags.push(("cluster".into(), q.operation_name.clone()));
    }
    let end = timestamp("start_time_max", &q.start_time_max)?.unwrap_or_else(SystemTime::now);
    let start = match timestamp("start_time_min", &q.start_time_min)? {
        Some(t) => t,
        None => end
            .checked_sub(Duration::from_secs(3600))
            .unwrap_or(UNIX_EPOCH),
    };
    if start > end {
        return Err(invalid("start_time_min is after start_time_max"));
    }
    let limit = usize::try_from(q.search_depth)
        .ok()
        .filter(|d| *d > 0)
        .unwrap_or(DEFAULT_SEARCH_DEPTH);
    Ok(SearchQuery {
        mode,
        scope,
        all_siblings,
        tags,
        range: TimeRange::new(start, end),
        limit,
    })
}

/// Traces as a stream's messages, each trace's chunks in a row (chunks
/// never mix traces). A trace is assembled when the stream is polled for it
/// and let go once its chunks are taken, so an answer of many large traces
/// holds about one at a time. An error (the last item) is counted as the
/// RPC's.
fn stream_of<S: RawStore>(
    frontend: Arc<Frontend<S>>,
    rpc: Rpc,
    traces: impl Stream<Item = Result<Arc<AssembledTrace>, FrontendError>> + Send + 'static,
) -> TraceStream {
    use futures::TryStreamExt as _;
    // The request's span: the stream is polled after the handler returned.
    let span = tracing::Span::current();
    Box::pin(
        traces
            .map_err(move |e| {
                count_error(&frontend, rpc, &span);
                to_status(e)
            })
            .map_ok(|t| {
                let chunks = encoded_chunks(&t).to_vec();
                futures::stream::iter(chunks.into_iter().map(|c| Ok(TracesMessage::Encoded(c))))
            })
            .try_flatten(),
    )
}

/// `traces` until the next would take the answer past `max_bytes`
/// (encoded), then an error saying the answer was cut and how to narrow it.
fn within_bytes(
    traces: impl Stream<Item = Result<Arc<AssembledTrace>, FrontendError>> + Send + 'static,
    max_bytes: u64,
    metrics: Arc<crate::metrics::FrontendMetrics>,
) -> impl Stream<Item = Result<Arc<AssembledTrace>, FrontendError>> + Send + 'static {
    use futures::StreamExt as _;
    traces
        .scan((0u64, 0usize, false), move |(sent, count, cut), t| {
            if *cut {
                return futures::future::ready(None);
            }
            let item = match t {
                Ok(t) => {
                    let bytes: u64 = encoded_chunks(&t).iter().map(|c| c.len() as u64).sum();
                    if *count > 0 && *sent + bytes > max_bytes {
                        *cut = true;
                        metrics.search_answers_cut.inc();
                        Err(FrontendError::AnswerCut(format!(
                            "the answer was cut after {count} traces ({sent} bytes): the next would pass \
                             --max-search-bytes ({max_bytes}); narrow the search (namespace, name, a shorter time range)"
                        )))
                    } else {
                        *sent += bytes;
                        *count += 1;
                        Ok(t)
                    }
                }
                Err(e) => Err(e),
            };
            futures::future::ready(Some(item))
        })
}

fn proto_ts(ns: u64) -> prost_types::Timestamp {
    let t = from_nanos(ns);
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

#[tonic::async_trait]
impl<S: RawStore> TraceReader for JaegerStorage<S> {
    type GetTracesStream = TraceStream;
    type FindTracesStream = TraceStream;

    async fn get_traces(
        &self,
        request: Request<GetTracesRequest>,
    ) -> Result<Response<TraceStream>, Status> {
        self.count(Rpc::GetTraces);
        let queries = request.into_inner().query;
        if queries.len() > MAX_TRACES_PER_GET {
            self.error(Rpc::GetTraces);
            return Err(invalid(format!(
                "{} trace ids in one request, more than the {MAX_TRACES_PER_GET} allowed",
                queries.len()
            )));
        }
        let mut ids = Vec::with_capacity(queries.len());
        for q in queries {
            let Some(id) = trace_id_bytes(&q.trace_id) else {
                self.error(Rpc::GetTraces);
                return Err(invalid(format!(
                    "trace_id must be 16 bytes, got {}",
                    q.trace_id.len()
                )));
            };
            ids.push(id);
        }
        // Assembled as the stream is read (each `get` under this request's
        // span, though polled after the handler returned).
        let found = Found::of_ids(ids, tracing::Span::current());
        let traces = self.frontend.clone().found_stream(found);
        Ok(Response::new(stream_of(
            self.frontend.clone(),
            Rpc::GetTraces,
            traces,
        )))
    }

    async fn get_services(
        &self,
        _: Request<GetServicesRequest>,
    ) -> Result<Response<GetServicesResponse>, Status> {
        Ok(Response::new(GetServicesResponse {
            services: Mode::ALL.iter().map(|m| m.name().to_string()).collect(),
        }))
    }

    async fn get_operations(
        &self,
        request: Request<GetOperationsRequest>,
    ) -> Result<Response<GetOperationsResponse>, Status> {
        self.count(Rpc::GetOperations);
        let service = request.into_inner().service;
        if !service.is_empty() && service.parse::<Mode>().is_err() {
            return Ok(Response::new(GetOperationsResponse::default()));
        }
        Ok(Response::new(GetOperationsResponse {
            operations: self
                .frontend
                .clusters_stored()
                .await
                .into_iter()
                .map(|name| Operation {
                    name,
                    span_kind: String::new(),
                })
                .collect(),
        }))
    }

    async fn find_traces(
        &self,
        request: Request<FindTracesRequest>,
    ) -> Result<Response<TraceStream>, Status> {
        self.count(Rpc::FindTraces);
        let q = parse_query(
            request.into_inner().query,
            self.frontend.config().default_scope,
        )
        .inspect_err(|_| self.error(Rpc::FindTraces))?;
        let found = self
            .frontend
            .find(&q)
            .await
            .map_err(|e| self.fail(Rpc::FindTraces, e))?;
        let traces = within_bytes(
            self.frontend.clone().found_stream(found),
            self.frontend.config().max_search_bytes,
            self.frontend.metrics().clone(),
        );
        Ok(Response::new(stream_of(
            self.frontend.clone(),
            Rpc::FindTraces,
            traces,
        )))
    }

    async fn find_trace_i_ds(
        &self,
        request: Request<FindTracesRequest>,
    ) -> Result<Response<FindTraceIDsResponse>, Status> {
        self.count(Rpc::FindTraceIDs);
        let q = parse_query(
            request.into_inner().query,
            self.frontend.config().default_scope,
        )
        .inspect_err(|_| self.error(Rpc::FindTraceIDs))?;
        let mut found = self
            .frontend
            .find(&q)
            .await
            .map_err(|e| self.fail(Rpc::FindTraceIDs, e))?;
        // Only ids and time ranges are answered: each trace is let go
        // before the next is assembled.
        let mut trace_ids = Vec::new();
        while let Some(t) = found
            .next(&self.frontend)
            .await
            .map_err(|e| self.fail(Rpc::FindTraceIDs, e))?
        {
            if let Some((s, e)) = t.span_range {
                trace_ids.push(FoundTraceId {
                    trace_id: t.id.to_vec(),
                    start: Some(proto_ts(s)),
                    end: Some(proto_ts(e.max(s))),
                });
            }
        }
        Ok(Response::new(FindTraceIDsResponse { trace_ids }))
    }
}

/// The service graph of System Architecture: resources linked as parent
/// and child in the raw traces of the asked interval.
pub struct Deps<S> {
    frontend: Arc<Frontend<S>>,
}

#[tonic::async_trait]
impl<S: RawStore> DependencyReader for Deps<S> {
    async fn get_dependencies(
        &self,
        request: Request<GetDependenciesRequest>,
    ) -> Result<Response<GetDependenciesResponse>, Status> {
        let metrics = self.frontend.metrics();
        metrics
            .requests
            .get_or_create(&FrontendMetrics::rpc(Rpc::GetDependencies))
            .inc();
        let fail = |e: Status| {
            metrics
                .errors
                .get_or_create(&FrontendMetrics::rpc(Rpc::GetDependencies))
                .inc();
            e
        };
        let r = request.into_inner();
        let end = timestamp("end_time", &r.end_time)
            .map_err(fail)?
            .unwrap_or_else(SystemTime::now);
        let start = timestamp("start_time", &r.start_time)
            .map_err(fail)?
            .unwrap_or_else(|| {
                end.checked_sub(Duration::from_secs(3600))
                    .unwrap_or(UNIX_EPOCH)
            });
        if start > end {
            return Err(fail(invalid("start_time is after end_time")));
        }
        let counts = self
            .frontend
            .dependencies(TimeRange::new(start, end))
            .await
            .map_err(|e| fail(to_status(e)))?;
        Ok(Response::new(GetDependenciesResponse {
            dependencies: counts
                .into_iter()
                .map(|((parent, child), call_count)| Dependency {
                    parent,
                    child,
                    call_count,
                    source: "kascade".into(),
                })
                .collect(),
        }))
    }
}
