//! The exporter's settings: [`ExportSettings`] (outputs, batching, queues,
//! retries, and the OTLP settings given explicitly), resolved with the
//! `OTEL_EXPORTER_OTLP_*` environment variables into an `ExportConfig`
//! (see `otlp` for the precedence).

mod error;
mod otlp;

use std::path::PathBuf;
use std::time::Duration;

pub(crate) use error::ConfigError;
pub use otlp::Compression;
pub(crate) use otlp::{OtlpConfig, OtlpFlags, resolve};

use super::{
    DEFAULT_MAX_BATCH_BYTES, DEFAULT_OUTPUT_QUEUE_BATCHES, ExportConfig, MIN_MAX_BATCH_BYTES,
    OtlpProtocol, OutputSpec,
};

/// The exporter's settings before the environment is consulted: outputs,
/// batching, queues, retries, and the OTLP settings given explicitly
/// (`None`: from `OTEL_EXPORTER_OTLP_*`, else the default). The defaults
/// are those of `kascade collect` and `kascade replay`.
///
/// ```no_run
/// use std::time::Duration;
/// use kascade::app::{ExportSettings, OutputSpec};
///
/// let settings = ExportSettings::default()
///     .output(OutputSpec::OtlpJson("spans.jsonl".into()))
///     .otlp_endpoint("https://otel.example:4317")
///     .batch_size(512)
///     .retry_for(Duration::from_secs(60));
/// let config = settings.resolve()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    /// Where spans go; several outputs each get every span.
    pub outputs: Vec<OutputSpec>,
    /// OTLP endpoint, `http://` or `https://`.
    pub otlp_endpoint: Option<String>,
    /// gRPC or HTTP with protobuf bodies.
    pub otlp_protocol: Option<OtlpProtocol>,
    /// Added to (and replacing) the headers of the environment. Often
    /// credentials.
    pub otlp_headers: Vec<(String, String)>,
    /// Longest one export request may take.
    pub otlp_timeout: Option<Duration>,
    /// gzip or none.
    pub otlp_compression: Option<Compression>,
    /// CA certificates trusted for an `https://` endpoint instead of the system's.
    pub otlp_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS with the endpoint.
    pub otlp_client_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `otlp_client_cert_file`.
    pub otlp_client_key_file: Option<PathBuf>,
    /// Most spans per export request.
    pub batch_size: usize,
    /// Most encoded bytes per export request (uncompressed).
    pub max_batch_bytes: usize,
    /// Longest a span waits for its batch to fill.
    pub batch_timeout: Duration,
    /// Spans that may wait for export before processing slows down.
    pub queue_size: usize,
    /// Batches that may wait for each output.
    pub output_queue: usize,
    /// How long a failing export is retried before its spans are dropped.
    pub retry_for: Duration,
    /// Once one batch's retries are exhausted, later batches are dropped
    /// (and counted) without being retried: the receiver is taken as gone.
    /// For a replay, whose spans have nowhere else to go, so that a
    /// receiver lost midway ends it after `retry_for`, not after
    /// `retry_for` per batch still queued. Off for `collect`, which keeps
    /// retrying every batch through an outage.
    pub give_up_once_lost: bool,
    /// Longest attribute or span-event value, in bytes.
    pub max_value_bytes: usize,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for ExportSettings {
    fn default() -> Self {
        Self {
            outputs: vec![OutputSpec::Otlp],
            otlp_endpoint: None,
            otlp_protocol: None,
            otlp_headers: Vec::new(),
            otlp_timeout: None,
            otlp_compression: None,
            otlp_ca_file: None,
            otlp_client_cert_file: None,
            otlp_client_key_file: None,
            batch_size: 2048,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            batch_timeout: Duration::from_secs(1),
            queue_size: 10_000,
            output_queue: DEFAULT_OUTPUT_QUEUE_BATCHES,
            retry_for: Duration::from_secs(5 * 60),
            give_up_once_lost: false,
            max_value_bytes: crate::span_model::DEFAULT_MAX_VALUE_BYTES,
            service_name: "kascade".to_string(),
        }
    }
}

/// The spelling `--output` accepts.
impl std::fmt::Display for OutputSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputSpec::Otlp => f.write_str("otlp"),
            OutputSpec::OtlpJson(path) => write!(f, "otlp-json={}", path.display()),
            OutputSpec::Changelog(path) => write!(f, "changelog={}", path.display()),
        }
    }
}

impl ExportSettings {
    /// Sends spans to `output` only (replacing the default `otlp`).
    pub fn output(mut self, output: OutputSpec) -> Self {
        self.outputs = vec![output];
        self
    }

    /// Sets the OTLP endpoint (else from the environment, else the default).
    pub fn otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// Sets the most spans per export request.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets how long a failing export is retried.
    pub fn retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// Sets the `service.name` of the exported spans.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// The exporter's configuration: these settings, then the
    /// `OTEL_EXPORTER_OTLP_*` environment variables of this process.
    pub fn resolve(&self) -> Result<ExportConfig, ConfigError> {
        self.resolve_with_env(&|k| std::env::var(k).ok())
    }

    /// `resolve` with the environment `env`.
    pub fn resolve_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ExportConfig, ConfigError> {
        if self.max_batch_bytes < MIN_MAX_BATCH_BYTES {
            return Err(ConfigError::BatchBytesTooSmall {
                value: self.max_batch_bytes,
                minimum: MIN_MAX_BATCH_BYTES,
            });
        }
        if self.max_value_bytes < crate::span_model::MIN_MAX_VALUE_BYTES {
            return Err(ConfigError::ValueBytesTooSmall {
                value: self.max_value_bytes,
                minimum: crate::span_model::MIN_MAX_VALUE_BYTES,
            });
        }
        let otlp = if self.outputs.contains(&OutputSpec::Otlp) {
            Some(resolve(&self.otlp_flags(), env)?)
        } else {
            None
        };
        Ok(ExportConfig {
            otlp,
            batch_size: self.batch_size.max(1),
            max_batch_bytes: self.max_batch_bytes,
            batch_timeout: self.batch_timeout,
            queue_capacity: self.queue_size.max(1),
            output_queue_batches: self.output_queue.max(1),
            retry_for: self.retry_for,
            give_up_once_lost: self.give_up_once_lost,
            max_value_bytes: self.max_value_bytes,
            service_name: self.service_name.clone(),
        })
    }

    /// The OTLP settings given explicitly.
    pub fn otlp_flags(&self) -> OtlpFlags<'_> {
        OtlpFlags {
            endpoint: self.otlp_endpoint.as_deref(),
            protocol: self.otlp_protocol,
            headers: &self.otlp_headers,
            timeout: self.otlp_timeout,
            compression: self.otlp_compression,
            ca_file: self.otlp_ca_file.as_deref(),
            client_cert_file: self.otlp_client_cert_file.as_deref(),
            client_key_file: self.otlp_client_key_file.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::otlp::DEFAULT_GRPC_ENDPOINT;
    use super::*;

    #[test]
    fn settings_resolve_with_the_environment_and_refuse_bounds_below_the_minimum() {
        let no_env = |_: &str| None;
        let cfg = ExportSettings::default().resolve_with_env(&no_env).unwrap();
        assert_eq!(cfg.otlp.unwrap().endpoint, DEFAULT_GRPC_ENDPOINT);
        assert_eq!(
            (
                cfg.batch_size,
                cfg.max_batch_bytes,
                cfg.service_name.as_str()
            ),
            (2048, DEFAULT_MAX_BATCH_BYTES, "kascade")
        );
        // Without an `otlp` output the OTLP settings are not read at all.
        let file_only = ExportSettings::default().output(OutputSpec::OtlpJson("x.jsonl".into()));
        let bad_env = |k: &str| (k == "OTEL_EXPORTER_OTLP_TIMEOUT").then(|| "10s".to_string());
        assert!(file_only.resolve_with_env(&bad_env).unwrap().otlp.is_none());
        assert!(matches!(
            ExportSettings::default().resolve_with_env(&bad_env),
            Err(ConfigError::NotMilliseconds { .. })
        ));
        let small = ExportSettings {
            max_batch_bytes: 10,
            ..ExportSettings::default()
        };
        assert_eq!(
            small.resolve_with_env(&no_env).unwrap_err().to_string(),
            "--export-max-batch-bytes 10 is below the minimum 16384"
        );
    }
}
