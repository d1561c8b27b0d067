//! The raw Jaeger's remote-storage gRPC API (`jaeger.storage.v2.TraceReader`,
//! served by Jaeger v2's `remote_storage` extension): many raw traces per
//! round trip (`GetTraces` takes a list of ids and streams the traces back),
//! where the query HTTP API needs one GET per object window.

use std::sync::Arc;

use futures::StreamExt as _;
use prometheus_client::metrics::counter::Counter;
use tonic::transport::{Channel, Endpoint};
use tracing::Instrument as _;

use super::*;
use crate::frontend::proto::trace_reader_client::TraceReaderClient;
use crate::frontend::proto::{
    AnyValue, FindTracesRequest, GetTraceParams, GetTracesRequest, KeyValue as QueryKeyValue,
    TraceQueryParameters, any_value::Value as QueryValue,
};

/// Trace ids asked for in one `GetTraces` call: a Deployment's tree with
/// 1,000 Pods is a handful of calls, and one slow call holds back few.
const IDS_PER_CALL: usize = 128;

/// One raw trace can be large (a busy object's window); the default limit
/// of 4 MiB per message would refuse it.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Raw reads over Jaeger's remote-storage gRPC API.
pub struct JaegerGrpc {
    url: String,
    service: String,
    client: TraceReaderClient<Channel>,
    round_trips: Counter,
}

impl JaegerGrpc {
    /// `url` is the raw Jaeger's `remote_storage` endpoint (`http://host:17271`,
    /// or `https://` verified against `tls`); `service` the collector's
    /// `--service-name`; `timeout` bounds each call. Connects lazily: an
    /// unreachable Jaeger fails the reads, not the start.
    pub fn connect(
        url: &str,
        service: &str,
        timeout: Duration,
        tls: &crate::client_tls::ClientTls,
    ) -> Result<Self, RawError> {
        let bad = |message: String| RawError::Client {
            url: url.to_string(),
            message,
        };
        let origin: tonic::codegen::http::Uri =
            url.parse().map_err(|e| bad(format!("not a URL: {e}")))?;
        let authority = origin
            .authority()
            .ok_or_else(|| bad("the URL names no host".into()))?
            .clone();
        let plain = Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| bad(e.to_string()))?
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .tcp_nodelay(true);
        let channel = if crate::client_tls::is_https(url) {
            let rustls = tls.rustls_config(&[b"h2"]).map_err(|e| RawError::Tls {
                url: url.to_string(),
                problem: Arc::new(e),
            })?;
            let connector =
                crate::client_tls::grpc_tls_connector(&authority, 443, Arc::new(rustls)).map_err(
                    |e| RawError::Tls {
                        url: url.to_string(),
                        problem: Arc::new(e),
                    },
                )?;
            plain.origin(origin).connect_with_connector_lazy(connector)
        } else {
            plain.connect_lazy()
        };
        Ok(Self {
            // Shown in errors, logs and self-traces: never with credentials.
            url: super::jaeger::without_credentials(url.trim_end_matches('/')),
            service: service.to_string(),
            client: TraceReaderClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip),
            round_trips: Counter::default(),
        })
    }

    /// Counts each `GetTraces` call (not searches) in `round_trips`.
    pub fn counting(mut self, round_trips: Counter) -> Self {
        self.round_trips = round_trips;
        self
    }

    fn query(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> FindTracesRequest {
        Self::query_of(&self.service, tags, range, limit)
    }

    fn query_of(
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> FindTracesRequest {
        FindTracesRequest {
            query: Some(TraceQueryParameters {
                service_name: service.to_string(),
                attributes: tags
                    .iter()
                    .map(|(k, v)| QueryKeyValue {
                        key: k.clone(),
                        value: Some(AnyValue {
                            value: Some(QueryValue::StringValue(v.clone())),
                        }),
                    })
                    .collect(),
                start_time_min: Some(timestamp(range.start)),
                start_time_max: Some(timestamp(range.end)),
                search_depth: i32::try_from(limit).unwrap_or(i32::MAX),
                ..Default::default()
            }),
        }
    }

    /// Self-tracing (crate::telemetry): one `raw read` span per call.
    async fn call<T>(
        &self,
        method: &'static str,
        traces: usize,
        work: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, RawError> {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "raw read",
            otel.kind = "client", rpc.system = "grpc", rpc.method = method,
            server.address = self.url.as_str(), traces,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty);
        work.instrument(span.clone()).await.map_err(|status| {
            let e = self.status_error(method, status);
            crate::self_trace::record_error(&span, &e.to_string());
            e
        })
    }

    fn status_error(&self, method: &str, status: tonic::Status) -> RawError {
        use tonic::Code;
        match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => RawError::Unreachable {
                url: self.url.clone(),
                message: format!("{method}: {}", status.message()),
            },
            code => RawError::Grpc {
                url: self.url.clone(),
                method: method.to_string(),
                code: format!("{code:?}"),
                message: crate::messages::clip_message(status.message().to_string()),
            },
        }
    }

    /// `FindTraces`: the whole raw traces a search finds.
    async fn find_traces(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<Vec<Span>>, RawError> {
        let request = self.query(tags, range, limit);
        let mut client = self.client.clone();
        let data = self
            .call("FindTraces", 0, async move {
                let mut stream = client.find_traces(request).await?.into_inner();
                let mut out = Vec::new();
                while let Some(d) = stream.next().await {
                    out.push(message_spans(d?)?);
                }
                Ok(out)
            })
            .await?;
        Ok(data)
    }

    /// One `GetTraces` call for `ids`: spans grouped by their trace.
    async fn get_batch(
        &self,
        ids: &[TraceIdBytes],
    ) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError> {
        let request = GetTracesRequest {
            query: ids
                .iter()
                .map(|id| GetTraceParams {
                    trace_id: id.to_vec(),
                    ..Default::default()
                })
                .collect(),
        };
        let mut client = self.client.clone();
        self.round_trips.inc();
        self.call("GetTraces", ids.len(), async move {
            let mut stream = client.get_traces(request).await?.into_inner();
            let mut out: HashMap<TraceIdBytes, Vec<Span>> = HashMap::new();
            while let Some(d) = stream.next().await {
                for s in message_spans(d?)? {
                    if let Some(id) = trace_id_bytes(&s.trace_id) {
                        out.entry(id).or_default().push(s);
                    }
                }
            }
            Ok(out)
        })
        .await
    }
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

impl JaegerGrpc {
    /// `FindTraceIDs`: the ids a search finds.
    async fn find_ids(&self, request: FindTracesRequest) -> Result<Vec<TraceIdBytes>, RawError> {
        let mut client = self.client.clone();
        let found = self
            .call("FindTraceIDs", 0, async move {
                Ok(client.find_trace_i_ds(request).await?.into_inner())
            })
            .await?;
        Ok(found
            .trace_ids
            .iter()
            .filter_map(|t| trace_id_bytes(&t.trace_id))
            .collect())
    }
}

impl RawStore for JaegerGrpc {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        self.find_ids(self.query(tags, range, limit)).await
    }

    async fn find_component(
        &self,
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        self.find_ids(Self::query_of(service, tags, range, limit))
            .await
    }

    async fn get(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        Ok(self.get_batch(&[id]).await?.remove(&id).unwrap_or_default())
    }

    async fn get_many(
        &self,
        ids: &[TraceIdBytes],
        concurrency: usize,
    ) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError> {
        let calls: Vec<_> = ids
            .chunks(IDS_PER_CALL)
            .map(|c| self.get_batch(c))
            .collect();
        gather(calls, concurrency, ids.len()).await
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<RelationCounts, RawError> {
        let mut counts = RelationCounts::new();
        for spans in self.find_traces(&child_link_tags(), range, limit).await? {
            count_child_links(
                &spans,
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
        for spans in self.find_traces(&object_span_tags(), range, limit).await? {
            out.extend(object_clusters(&spans));
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!(
            "raw Jaeger's remote storage at {} (service {})",
            self.url, self.service
        )
    }
}

/// The spans of one streamed message. Read from the wire it is always
/// decoded already (`TracesMessage::Encoded` is what the frontend sends).
fn message_spans(m: crate::frontend::proto::TracesMessage) -> Result<Vec<Span>, tonic::Status> {
    m.into_decoded()
        .map(|d| spans_of(d.resource_spans))
        .map_err(|e| tonic::Status::internal(format!("TracesData: {e}")))
}
