//! Logging, and self-tracing: spans of kascade's own work (a webhook
//! request → decode → admit → process, each OTLP export request; a frontend
//! request → search → raw reads → assemble) exported with the OpenTelemetry
//! SDK (`opentelemetry_sdk` + `opentelemetry-otlp`, through
//! `tracing-opentelemetry`).
//!
//! Off unless asked for with `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true`
//! wins. Not on merely because `OTEL_EXPORTER_OTLP_ENDPOINT` is set: that
//! variable already says where the *object* spans go when `--otlp-endpoint`
//! is not given (export::config), and setting it must not start a second
//! stream of traces. Where self-traces go comes from the same
//! `OTEL_EXPORTER_OTLP_[TRACES_]*` variables, read by the same code as the
//! object export (export::config::resolve; the flags do not apply), so bad
//! values fail at startup naming the variable. The sampler is the SDK's
//! (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), checked here first
//! because the SDK falls back silently on a value it does not know.
//!
//! Self-traces carry their own service name (`OTEL_SERVICE_NAME`, else
//! `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else `kascade-<subcommand>`);
//! a name equal to the object spans' service (`--service-name`,
//! `--raw-service`) is refused, so they can never mix with object spans or
//! turn up in the frontend's raw searches, which ask for that service.
//!
//! Every self-tracing span has the target [`TARGET`]: the OpenTelemetry
//! layer takes those spans (and kascade's warnings and errors inside them as
//! span events); the log layer leaves them out, so log lines read as they
//! did before. When self-tracing is off no layer wants such a span and
//! creating one costs a check of a cached flag. Spans are per request or
//! batch, never per event.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, filter_fn};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::export::OtlpProtocol;
use crate::export::config::{Compression, OtlpConfig};

/// How kascade's own logs are written (on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub(crate) use crate::self_trace::TARGET;

/// What a subcommand is, for self-tracing: its default service name and the
/// service of the object spans it writes or reads (which self-traces must
/// not use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role<'a> {
    /// `collect`, `frontend`, …: the default service is `kascade-<component>`.
    pub component: &'static str,
    /// The object spans' service name and the flag that set it.
    pub object_service: Option<(&'a str, &'static str)>,
}

mod config;

pub use config::SelfTraceConfig;
pub(crate) use config::TelemetryError;
pub use config::config_from_env;

/// The log layer's and, when self-tracing is on, the tracer provider that
/// must be shut down (flushed) before the process exits.
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered; waits at most the export timeout.
    pub(crate) fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("warning: self-tracing: the last spans were not exported: {e}");
        }
    }
}

/// Logs to stderr (`RUST_LOG`, default `info`; at most warnings under
/// `--quiet`; coloured as `--color` says, see [`crate::terminal`]) and,
/// when the environment asks for it, self-tracing. Call once, inside the
/// Tokio runtime, after [`crate::terminal::init`].
pub(crate) fn init(format: LogFormat, role: Role<'_>) -> Result<Telemetry, TelemetryError> {
    let cfg = config_from_env(&|k| std::env::var(k).ok(), role)?;
    let provider = cfg.as_ref().map(tracer_provider).transpose()?;
    let levels = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let most = if crate::terminal::quiet() {
        LevelFilter::WARN
    } else {
        LevelFilter::TRACE
    };
    let log_filter = log_filter(levels, most);
    let log_layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(crate::terminal::colors(crate::terminal::Stream::Stderr));
    let log_layer = match format {
        LogFormat::Json => log_layer.json().with_filter(log_filter).boxed(),
        LogFormat::Text => log_layer.with_filter(log_filter).boxed(),
    };
    let trace_layer = provider.as_ref().map(self_tracing_layer);
    tracing_subscriber::registry()
        .with(log_layer)
        .with(trace_layer)
        .init();
    if let Some(cfg) = &cfg {
        tracing::info!(service = %cfg.service_name, endpoint = %cfg.otlp.endpoint,
            protocol = ?cfg.otlp.protocol, "self-tracing is on");
    }
    Ok(Telemetry { provider })
}

/// What is logged: what `levels` (`RUST_LOG`) enables up to `most`
/// (`--quiet`: warnings), without the self-tracing spans. The hint keeps
/// the lower maximum, so that `tracing` and `log` calls below it stay
/// disabled at their call sites.
fn log_filter<S>(levels: EnvFilter, most: LevelFilter) -> impl Filter<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    levels.and(
        filter_fn(move |m| !(m.is_span() && m.target() == TARGET) && most >= *m.level())
            .with_max_level_hint(most),
    )
}

/// The layer that turns self-tracing spans into OpenTelemetry spans of
/// `provider` (public for tests, which give it an in-memory exporter).
pub fn self_tracing_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("kascade"))
        // Busy/idle times would cost two clock reads per poll of a batch's
        // events; the span's own duration is what matters.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_filter(filter_fn(wanted_by_self_tracing).with_max_level_hint(LevelFilter::INFO))
}

/// Self-tracing spans, and kascade's warnings and errors (as events of the
/// span they happen in).
fn wanted_by_self_tracing(m: &tracing::Metadata<'_>) -> bool {
    if m.is_span() {
        m.target() == TARGET
    } else {
        m.target().starts_with("kascade") && *m.level() <= Level::WARN
    }
}

/// The SDK tracer provider exporting to `cfg` in batches (public for tests).
pub fn tracer_provider(cfg: &SelfTraceConfig) -> Result<SdkTracerProvider, TelemetryError> {
    let failed = |e: &dyn std::fmt::Display| TelemetryError::Exporter(format!("{e:#}"));
    let otlp = &cfg.otlp;
    let compression =
        (otlp.compression == Compression::Gzip).then_some(opentelemetry_otlp::Compression::Gzip);
    // Headers and the timeout are read from the same variables by
    // opentelemetry-otlp itself; TLS and the endpoint are kascade's.
    let exporter = match otlp.protocol {
        OtlpProtocol::Grpc => {
            let channel = crate::export::grpc_channel(otlp).map_err(|e| failed(&e))?;
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_channel(channel)
                .with_timeout(otlp.timeout);
            if let Some(c) = compression {
                b = b.with_compression(c);
            }
            b.build()
        }
        OtlpProtocol::Http => {
            let client = SpawnedReqwest::new(otlp)?;
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(otlp.endpoint.clone())
                .with_http_client(client)
                .with_timeout(otlp.timeout);
            if let Some(c) = compression {
                b = b.with_compression(c);
            }
            b.build()
        }
    }
    .map_err(|e| failed(&e))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        )
        .build())
}

/// OTLP/HTTP through kascade's reqwest client (its TLS settings), each
/// request run on the Tokio runtime: the SDK's batch processor exports from
/// a thread of its own, where reqwest cannot run.
#[derive(Debug)]
struct SpawnedReqwest {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl SpawnedReqwest {
    fn new(otlp: &OtlpConfig) -> Result<Self, TelemetryError> {
        let failed = |e: &dyn std::fmt::Display| TelemetryError::Exporter(e.to_string());
        let mut builder = reqwest::Client::builder()
            .timeout(otlp.timeout)
            .connect_timeout(otlp.timeout.min(Duration::from_secs(5)));
        if crate::client_tls::is_https(&otlp.endpoint) {
            let tls = otlp
                .tls
                .rustls_config(&[b"http/1.1"])
                .map_err(|e| failed(&e))?;
            builder = builder.use_preconfigured_tls(tls);
        }
        Ok(Self {
            client: builder.build().map_err(|e| failed(&e))?,
            runtime: tokio::runtime::Handle::try_current().map_err(|e| failed(&e))?,
        })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for SpawnedReqwest {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<bytes::Bytes>,
    ) -> Result<opentelemetry_http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        self.runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let mut out = axum::http::Response::builder().status(response.status());
                if let Some(h) = out.headers_mut() {
                    *h = response.headers().clone();
                }
                // The answer to an export is small; its body only explains a refusal.
                let body = response.bytes().await?;
                Ok(out.body(body)?)
            })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logging_keeps_the_level_limit_of_rust_log() {
        type S = tracing_subscriber::Registry;
        // Without a hint, calls below the level would each be asked about.
        let all = LevelFilter::TRACE;
        assert_eq!(
            Filter::<S>::max_level_hint(&log_filter::<S>(EnvFilter::new("info"), all)),
            Some(LevelFilter::INFO)
        );
        assert_eq!(
            Filter::<S>::max_level_hint(&log_filter::<S>(
                EnvFilter::new("kascade=debug,warn"),
                all
            )),
            Some(LevelFilter::DEBUG)
        );
        // --quiet caps RUST_LOG.
        assert_eq!(
            Filter::<S>::max_level_hint(&log_filter::<S>(
                EnvFilter::new("kascade=debug,warn"),
                LevelFilter::WARN
            )),
            Some(LevelFilter::WARN)
        );
    }
}
