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
use crate::export::config::{Compression, OtlpConfig, OtlpFlags, resolve};

/// How kascade's own logs are written (on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub use crate::self_trace::TARGET;

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

/// Self-tracing as asked for by the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTraceConfig {
    pub service_name: String,
    /// Where and how: the `OTEL_EXPORTER_OTLP_*` variables.
    pub otlp: OtlpConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?}: {problem}")]
    BadVariable {
        var: &'static str,
        value: String,
        problem: String,
    },
    #[error(
        "{source_var} gives self-tracing the service name {name:?}, which is the service of kascade's object spans ({flag}); self-traces need a name of their own"
    )]
    SameServiceAsObjects {
        source_var: &'static str,
        name: String,
        flag: &'static str,
    },
    #[error("self-tracing (OTEL_TRACES_EXPORTER=otlp): {0}")]
    Exporter(String),
}

fn bad(var: &'static str, value: &str, problem: impl Into<String>) -> TelemetryError {
    TelemetryError::BadVariable {
        var,
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// A variable, trimmed; empty counts as unset (as the OpenTelemetry
/// specification says).
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

fn check_sampler(env: &dyn Fn(&str) -> Option<String>) -> Result<(), TelemetryError> {
    let Some(sampler) = var(env, "OTEL_TRACES_SAMPLER") else {
        return Ok(());
    };
    if !SAMPLERS.contains(&sampler.as_str()) {
        return Err(bad(
            "OTEL_TRACES_SAMPLER",
            &sampler,
            format!("expected one of {}", SAMPLERS.join(", ")),
        ));
    }
    if sampler.ends_with("traceidratio")
        && let Some(arg) = var(env, "OTEL_TRACES_SAMPLER_ARG")
        && !arg.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r))
    {
        return Err(bad(
            "OTEL_TRACES_SAMPLER_ARG",
            &arg,
            format!("{sampler} needs a ratio between 0 and 1"),
        ));
    }
    Ok(())
}

/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k=v`, values
/// percent-encoded).
fn service_in_resource_attributes(attrs: &str) -> Option<String> {
    attrs.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == "service.name").then(|| {
            percent_encoding::percent_decode_str(v.trim())
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// Self-tracing as `env` asks for it: `None` when off.
pub fn config_from_env(
    env: &dyn Fn(&str) -> Option<String>,
    role: Role<'_>,
) -> Result<Option<SelfTraceConfig>, TelemetryError> {
    if let Some(v) = var(env, "OTEL_SDK_DISABLED") {
        match v.to_ascii_lowercase().as_str() {
            "true" => return Ok(None),
            "false" => {}
            _ => return Err(bad("OTEL_SDK_DISABLED", &v, "expected true or false")),
        }
    }
    match var(env, "OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("none") => return Ok(None),
        Some("otlp") => {}
        Some(other) => {
            return Err(bad(
                "OTEL_TRACES_EXPORTER",
                other,
                "kascade traces itself only over OTLP: expected otlp or none",
            ));
        }
    }
    check_sampler(env)?;
    let (service_name, source_var) = match var(env, "OTEL_SERVICE_NAME") {
        Some(name) => (name, "OTEL_SERVICE_NAME"),
        None => match var(env, "OTEL_RESOURCE_ATTRIBUTES")
            .as_deref()
            .and_then(service_in_resource_attributes)
        {
            Some(name) => (name, "OTEL_RESOURCE_ATTRIBUTES"),
            None => (format!("kascade-{}", role.component), "the default"),
        },
    };
    if let Some((objects, flag)) = role.object_service
        && objects == service_name
    {
        return Err(TelemetryError::SameServiceAsObjects {
            source_var,
            name: service_name,
            flag,
        });
    }
    let otlp = resolve(&OtlpFlags::default(), env)
        .map_err(|e| TelemetryError::Exporter(format!("{e:#}")))?;
    Ok(Some(SelfTraceConfig { service_name, otlp }))
}

/// The log layer's and, when self-tracing is on, the tracer provider that
/// must be shut down (flushed) before the process exits.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether self-tracing is on.
    pub fn is_tracing(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still buffered; waits at most the export timeout.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("warning: self-tracing: the last spans were not exported: {e}");
        }
    }
}

/// Logs to stderr (`RUST_LOG`, default `info`) and, when the environment
/// asks for it, self-tracing. Call once, inside the Tokio runtime.
pub fn init(format: LogFormat, role: Role<'_>) -> Result<Telemetry, TelemetryError> {
    let cfg = config_from_env(&|k| std::env::var(k).ok(), role)?;
    let provider = cfg.as_ref().map(tracer_provider).transpose()?;
    let log_filter =
        log_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")));
    let log_layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
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

/// What is logged: what `levels` (`RUST_LOG`) enables, without the
/// self-tracing spans. The hint keeps the levels' maximum, so that
/// `tracing` and `log` calls below it stay disabled at their call sites.
fn log_filter<S>(levels: EnvFilter) -> impl Filter<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    levels.and(
        filter_fn(|m| !(m.is_span() && m.target() == TARGET))
            .with_max_level_hint(LevelFilter::TRACE),
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
            let client = SpawnedReqwest::new(otlp).map_err(|e| failed(&e))?;
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
    fn new(otlp: &OtlpConfig) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder()
            .timeout(otlp.timeout)
            .connect_timeout(otlp.timeout.min(Duration::from_secs(5)));
        if crate::client_tls::is_https(&otlp.endpoint) {
            builder = builder.use_preconfigured_tls(otlp.tls.rustls_config(&[b"http/1.1"])?);
        }
        Ok(Self {
            client: builder.build()?,
            runtime: tokio::runtime::Handle::try_current()?,
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

    const COLLECT: Role<'static> = Role {
        component: "collect",
        object_service: Some(("kascade", "--service-name")),
    };

    fn config(vars: &[(&str, &str)]) -> Result<Option<SelfTraceConfig>, TelemetryError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config_from_env(
            &move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            COLLECT,
        )
    }

    fn error(vars: &[(&str, &str)]) -> String {
        config(vars).unwrap_err().to_string()
    }

    #[test]
    fn off_unless_the_traces_exporter_is_otlp() {
        assert_eq!(config(&[]).unwrap(), None);
        // The endpoint alone configures the object export, not self-tracing.
        assert_eq!(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4317")]).unwrap(),
            None
        );
        assert_eq!(config(&[("OTEL_TRACES_EXPORTER", "none")]).unwrap(), None);
        let on = config(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap()
        .expect("on");
        assert_eq!(on.service_name, "kascade-collect");
        assert_eq!(on.otlp.protocol, OtlpProtocol::Http);
        assert_eq!(on.otlp.endpoint, "http://jaeger:4318/v1/traces");
        // kascade's default transport, as for the object export.
        let grpc = config(&[("OTEL_TRACES_EXPORTER", "otlp")])
            .unwrap()
            .unwrap();
        assert_eq!(grpc.otlp.protocol, OtlpProtocol::Grpc);
        assert_eq!(grpc.otlp.endpoint, "http://127.0.0.1:4317");
    }

    #[test]
    fn sdk_disabled_wins() {
        assert_eq!(
            config(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_SDK_DISABLED", "TRUE"),
                // Not even looked at.
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
            ])
            .unwrap(),
            None
        );
        assert!(
            config(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_SDK_DISABLED", "false")
            ])
            .unwrap()
            .is_some()
        );
        let e = error(&[("OTEL_SDK_DISABLED", "yes")]);
        assert!(
            e.contains("OTEL_SDK_DISABLED") && e.contains("true or false"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        let on = ("OTEL_TRACES_EXPORTER", "otlp");
        let e = error(&[on, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("http/json"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "jaeger:4317")]);
        assert!(e.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "{e}");
        let e = error(&[("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(
            e.contains("OTEL_TRACES_EXPORTER") && e.contains("zipkin"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_TRACES_SAMPLER", "sometimes")]);
        assert!(
            e.contains("OTEL_TRACES_SAMPLER") && e.contains("always_on"),
            "{e}"
        );
        let e = error(&[
            on,
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
        ]);
        assert!(
            e.contains("OTEL_TRACES_SAMPLER_ARG") && e.contains("1.5"),
            "{e}"
        );
        assert!(
            config(&[
                on,
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ])
            .unwrap()
            .is_some()
        );
    }

    #[test]
    fn the_service_name_is_never_that_of_the_object_spans() {
        let on = ("OTEL_TRACES_EXPORTER", "otlp");
        let named = config(&[on, ("OTEL_SERVICE_NAME", "kascade-self")])
            .unwrap()
            .unwrap();
        assert_eq!(named.service_name, "kascade-self");
        let from_attrs = config(&[
            on,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=k8s,service.name=kascade%2Dme",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(from_attrs.service_name, "kascade-me");
        let e = error(&[on, ("OTEL_SERVICE_NAME", "kascade")]);
        assert!(
            e.contains("OTEL_SERVICE_NAME") && e.contains("--service-name"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_RESOURCE_ATTRIBUTES", "service.name=kascade")]);
        assert!(e.contains("OTEL_RESOURCE_ATTRIBUTES"), "{e}");
    }

    #[test]
    fn logging_keeps_the_level_limit_of_rust_log() {
        type S = tracing_subscriber::Registry;
        // Without a hint, calls below the level would each be asked about.
        assert_eq!(
            Filter::<S>::max_level_hint(&log_filter::<S>(EnvFilter::new("info"))),
            Some(LevelFilter::INFO)
        );
        assert_eq!(
            Filter::<S>::max_level_hint(&log_filter::<S>(EnvFilter::new("kascade=debug,warn"))),
            Some(LevelFilter::DEBUG)
        );
    }
}
