//! The raw Jaeger's query HTTP API.

use super::*;
use tracing::Instrument as _;

/// Jaeger's query HTTP API: `/api/traces` (search with tags) and
/// `/api/v3/traces/{id}` (one trace as OTLP JSON).
pub struct JaegerHttp {
    base: String,
    service: String,
    client: reqwest::Client,
    round_trips: prometheus_client::metrics::counter::Counter,
}

#[derive(Deserialize)]
struct V1Search {
    #[serde(default)]
    data: Option<Vec<V1Trace>>,
}

#[derive(Deserialize)]
struct V1Trace {
    #[serde(rename = "traceID")]
    trace_id: String,
}

/// A search answer with the spans' tags (Jaeger's v1 JSON).
#[derive(Deserialize)]
struct V1SearchSpans {
    #[serde(default)]
    data: Option<Vec<V1TraceSpans>>,
}

#[derive(Deserialize)]
struct V1TraceSpans {
    #[serde(default)]
    spans: Vec<V1Span>,
}

#[derive(Deserialize)]
struct V1Span {
    #[serde(default)]
    tags: Vec<V1Tag>,
}

#[derive(Deserialize)]
struct V1Tag {
    key: String,
    #[serde(default)]
    value: serde_json::Value,
}

#[derive(Deserialize)]
struct V3Trace {
    result: TracesData,
}

impl JaegerHttp {
    /// `base` is the raw Jaeger's query URL over plain HTTP (e.g.
    /// `http://jaeger:16686`); `service` the collector's `--service-name`.
    /// For `https://`, see `with_tls`.
    #[cfg(feature = "test-support")]
    pub fn new(base: &str, service: &str, timeout: Duration) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            service: service.to_string(),
            client: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("reqwest client with default TLS settings"),
            round_trips: Default::default(),
        }
    }

    /// Counts each request for raw traces (not searches) in `round_trips`.
    pub fn counting(mut self, round_trips: prometheus_client::metrics::counter::Counter) -> Self {
        self.round_trips = round_trips;
        self
    }

    /// Like `new`; an `https://` base is verified against `tls` (the
    /// system's CA certificates, or `--jaeger-ca-file` instead).
    pub fn with_tls(
        base: &str,
        service: &str,
        timeout: Duration,
        tls: &crate::client_tls::ClientTls,
    ) -> Result<Self, RawError> {
        let mut builder = reqwest::Client::builder().timeout(timeout);
        if crate::client_tls::is_https(base) {
            let rustls = tls
                .rustls_config(&[b"http/1.1"])
                .map_err(|source| RawError::Tls {
                    url: base.to_string(),
                    problem: std::sync::Arc::new(source),
                })?;
            builder = builder.use_preconfigured_tls(rustls);
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            service: service.to_string(),
            client: builder.build().map_err(|e| RawError::Client {
                url: base.to_string(),
                message: e.to_string(),
            })?,
            round_trips: Default::default(),
        })
    }

    /// The spans (tags only) of the raw traces a search finds.
    async fn search_spans(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<Vec<V1Span>>, RawError> {
        let url = self.search_url(tags, range, limit)?;
        let Some(body) = self.fetch(url.as_str()).await? else {
            return Ok(Vec::new());
        };
        let parsed: V1SearchSpans =
            serde_json::from_slice(&body).map_err(|e| RawError::Decode {
                url: url.to_string(),
                message: e.to_string(),
            })?;
        Ok(parsed
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.spans)
            .collect())
    }

    /// The trace ids a search (`/api/traces`) finds.
    async fn find_at(&self, url: reqwest::Url) -> Result<Vec<TraceIdBytes>, RawError> {
        let Some(body) = self.fetch(url.as_str()).await? else {
            return Ok(Vec::new());
        };
        let parsed: V1Search = serde_json::from_slice(&body).map_err(|e| RawError::Decode {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        Ok(parsed
            .data
            .unwrap_or_default()
            .iter()
            .filter_map(|t| parse_hex_trace_id(&t.trace_id))
            .collect())
    }

    /// `/api/traces` for raw traces with a span carrying every tag.
    fn search_url(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<reqwest::Url, RawError> {
        self.search_url_of(&self.service, tags, range, limit)
    }

    fn search_url_of(
        &self,
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<reqwest::Url, RawError> {
        let tag_map: serde_json::Map<String, serde_json::Value> = tags
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let micros = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        reqwest::Url::parse_with_params(
            &format!("{}/api/traces", self.base),
            &[
                ("service", service.to_string()),
                ("tags", serde_json::Value::Object(tag_map).to_string()),
                ("start", micros(range.start).to_string()),
                ("end", micros(range.end).to_string()),
                ("limit", limit.to_string()),
            ],
        )
        .map_err(|e| RawError::Decode {
            url: self.base.clone(),
            message: e.to_string(),
        })
    }

    /// Self-tracing (crate::telemetry): one `raw read` span per request.
    async fn fetch(&self, url: &str) -> Result<Option<bytes::Bytes>, RawError> {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "raw read",
            otel.kind = "client", url.full = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            bytes = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty);
        if !span.is_disabled() {
            span.record("url.full", without_credentials(url).as_str());
        }
        let result = self
            .fetch_untraced(url, &span)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(body) => {
                span.record("bytes", body.as_ref().map_or(0, |b| b.len()));
            }
            Err(e) => crate::self_trace::record_error(&span, &e.to_string()),
        }
        result
    }

    async fn fetch_untraced(
        &self,
        url: &str,
        span: &tracing::Span,
    ) -> Result<Option<bytes::Bytes>, RawError> {
        let resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| RawError::Unreachable {
                url: self.base.clone(),
                message: error_chain(&e),
            })?;
        let status = resp.status();
        span.record("http.response.status_code", status.as_u16());
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = resp.bytes().await.map_err(|e| RawError::Unreachable {
            url: self.base.clone(),
            message: error_chain(&e),
        })?;
        if !status.is_success() {
            return Err(RawError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
            });
        }
        Ok(Some(body))
    }
}

/// The spans of a `/api/v3/traces/{id}` answer (OTLP JSON, `{"result":
/// TracesData}`).
pub fn decode_v3_trace(body: &[u8]) -> Result<Vec<Span>, serde_json::Error> {
    let parsed: V3Trace = serde_json::from_slice(body)?;
    Ok(spans_of(parsed.result.resource_spans))
}

/// `url` as self-traces show it: a password or user name in it (a
/// `--jaeger-url` with credentials) never leaves the process.
pub(super) fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_password(None);
            let _ = u.set_username("");
            u.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => "(not a URL)".to_string(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl RawStore for JaegerHttp {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        self.find_at(self.search_url(tags, range, limit)?).await
    }

    async fn find_component(
        &self,
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        self.find_at(self.search_url_of(service, tags, range, limit)?)
            .await
    }

    async fn get(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        let url = format!("{}/api/v3/traces/{}", self.base, hex_trace_id(&id));
        self.round_trips.inc();
        let Some(body) = self.fetch(&url).await? else {
            return Ok(Vec::new());
        };
        decode_v3_trace(&body).map_err(|e| RawError::Decode {
            url: url.clone(),
            message: e.to_string(),
        })
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<RelationCounts, RawError> {
        let mut counts = RelationCounts::new();
        for spans in self.search_spans(&child_link_tags(), range, limit).await? {
            count_child_links(
                &spans,
                |s, k| {
                    s.tags
                        .iter()
                        .find(|t| t.key == k)
                        .and_then(|t| t.value.as_str().map(str::to_string))
                },
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
        for spans in self.search_spans(&object_span_tags(), range, limit).await? {
            out.extend(spans.iter().filter_map(|s| {
                let tag = |k: &str| {
                    s.tags
                        .iter()
                        .find(|t| t.key == k)
                        .and_then(|t| t.value.as_str())
                };
                (tag(attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))
                    .then(|| tag(attr::CLUSTER).map(str::to_string))
                    .flatten()
            }));
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("raw Jaeger at {} (service {})", self.base, self.service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_tls::test_pki::TestPki;
    use crate::client_tls::{ClientTls, FileSetting};

    /// An HTTPS server answering every trace read with an empty trace: it
    /// stands in for a raw Jaeger behind TLS with a private CA, to test what
    /// the client trusts (the e2e suite reads the harness's real Jaeger).
    async fn https_server(pki: &TestPki) -> String {
        let app = axum::Router::new().route(
            "/api/v3/traces/{id}",
            axum::routing::get(|| async { r#"{"result":{"resourceSpans":[]}}"# }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let config = axum_server::tls_rustls::RustlsConfig::from_config(std::sync::Arc::new(
            pki.server_config(false),
        ));
        let server = axum_server::from_tcp_rustls(listener, config).unwrap();
        tokio::spawn(server.serve(app.into_make_service()));
        format!("https://localhost:{port}")
    }

    #[tokio::test]
    async fn raw_reads_over_https_trust_the_jaeger_ca_file() {
        let pki = TestPki::generate();
        let base = https_server(&pki).await;
        let id = [7u8; 16];
        let trusting = |ca: &std::path::Path| ClientTls {
            ca_file: Some(FileSetting::new(ca, "--jaeger-ca-file")),
            identity: None,
        };
        let store = JaegerHttp::with_tls(
            &base,
            "kascade",
            Duration::from_secs(10),
            &trusting(&pki.ca),
        )
        .unwrap();
        assert_eq!(store.get(id).await.unwrap(), Vec::<Span>::new());
        // Another CA: the server is not trusted.
        let store = JaegerHttp::with_tls(
            &base,
            "kascade",
            Duration::from_secs(10),
            &trusting(&pki.other_ca),
        )
        .unwrap();
        let e = store.get(id).await.unwrap_err().to_string();
        assert!(e.contains("certificate"), "{e}");
        // A CA file that is not there fails at startup, naming the flag.
        let e = JaegerHttp::with_tls(
            &base,
            "kascade",
            Duration::from_secs(10),
            &trusting(std::path::Path::new("/nonexistent/ca.pem")),
        )
        .err()
        .unwrap();
        assert!(format!("{e:#}").contains("--jaeger-ca-file"), "{e:#}");
    }

    #[test]
    fn raw_read_urls_lose_their_credentials_in_self_traces() {
        let shown =
            without_credentials("https://reader:planted-s3cret@jaeger:16686/api/traces?x=1");
        assert!(
            !shown.contains("planted-s3cret") && !shown.contains("reader"),
            "{shown}"
        );
        assert_eq!(shown, "https://jaeger:16686/api/traces?x=1");
        assert_eq!(
            without_credentials("http://jaeger:16686/api/v3/traces/1"),
            "http://jaeger:16686/api/v3/traces/1"
        );
    }

    #[test]
    fn trace_ids_round_trip_through_jaeger_hex() {
        let id: TraceIdBytes = [0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
        let hex = hex_trace_id(&id);
        assert_eq!(hex.len(), 32);
        assert_eq!(parse_hex_trace_id(&hex), Some(id));
        assert_eq!(parse_hex_trace_id(hex.trim_start_matches('0')), Some(id));
        assert_eq!(parse_hex_trace_id("xyz"), None);
    }
}
