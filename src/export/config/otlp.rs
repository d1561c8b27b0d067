//! The OTLP exporter's settings: flags first, then the OpenTelemetry
//! exporter environment variables, then defaults.
//!
//! Precedence, per setting, first found wins: the flag (or its `KASCADE_*`
//! variable, which clap treats as the flag), `OTEL_EXPORTER_OTLP_TRACES_*`,
//! `OTEL_EXPORTER_OTLP_*`, the default. Headers merge: those of the
//! environment, then each `--otlp-header`, which replaces a header of the
//! same name. An empty variable counts as unset (as the OpenTelemetry
//! specification says).

use std::path::Path;
use std::time::Duration;

use super::error::{ConfigError, ValueError};
use crate::client_tls::{self, ClientTls, FileSetting};
use crate::export::OtlpProtocol;

/// Compression of export requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// Uncompressed.
    None,
    /// gzip, which OTLP receivers (Jaeger, the OpenTelemetry Collector) accept.
    Gzip,
}

/// Where and how OTLP requests are sent.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The request URL: gRPC `scheme://host:port`; HTTP with its path
    /// (`/v1/traces`).
    pub endpoint: String,
    /// The flag or variable the endpoint came from (for error messages).
    pub endpoint_source: String,
    pub protocol: OtlpProtocol,
    /// Sent with every request. Often credentials: never logged.
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub compression: Compression,
    /// Used for `https://` endpoints.
    pub tls: ClientTls,
}

// Header values are often credentials (`Authorization`): debug output names
// the headers only.
impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("compression", &self.compression)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The OTLP flags as given on the command line (`None`: not given).
#[derive(Debug, Default, Clone)]
pub struct OtlpFlags<'a> {
    pub endpoint: Option<&'a str>,
    pub protocol: Option<OtlpProtocol>,
    pub headers: &'a [(String, String)],
    pub timeout: Option<Duration>,
    pub compression: Option<Compression>,
    pub ca_file: Option<&'a Path>,
    pub client_cert_file: Option<&'a Path>,
    pub client_key_file: Option<&'a Path>,
}

pub(crate) const DEFAULT_GRPC_ENDPOINT: &str = "http://127.0.0.1:4317";
pub(crate) const DEFAULT_HTTP_ENDPOINT: &str = "http://127.0.0.1:4318";
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const TRACES_PATH: &str = "/v1/traces";

/// A setting from the environment: the traces-specific variable, else the
/// generic one; with the name of the variable it came from.
fn otel_env(env: &dyn Fn(&str) -> Option<String>, suffix: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"),
        format!("OTEL_EXPORTER_OTLP_{suffix}"),
    ]
    .into_iter()
    .find_map(|name| {
        env(&name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (name, v))
    })
}

/// Resolves the OTLP settings from `flags` and the environment `env`.
pub(crate) fn resolve(
    flags: &OtlpFlags<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<OtlpConfig, ConfigError> {
    let variable = |variable: String| move |problem| ConfigError::Variable { variable, problem };
    let protocol = match flags.protocol {
        Some(p) => p,
        None => match otel_env(env, "PROTOCOL") {
            Some((name, v)) => parse_otel_protocol(&v).map_err(variable(name))?,
            None => OtlpProtocol::Grpc,
        },
    };

    // The generic endpoint is a base URL that gets the signal's path; the
    // traces endpoint is used as it is (OpenTelemetry exporter spec).
    let (raw_endpoint, endpoint_source, append_path) = match flags.endpoint {
        Some(e) => (e.to_string(), "--otlp-endpoint".to_string(), true),
        None => match (
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|v| !v.trim().is_empty()),
            env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.trim().is_empty()),
        ) {
            (Some(e), _) => (
                e.trim().to_string(),
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_string(),
                false,
            ),
            (None, Some(e)) => (
                e.trim().to_string(),
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(),
                true,
            ),
            (None, None) => (
                match protocol {
                    OtlpProtocol::Grpc => DEFAULT_GRPC_ENDPOINT,
                    OtlpProtocol::Http => DEFAULT_HTTP_ENDPOINT,
                }
                .to_string(),
                "the default endpoint".to_string(),
                true,
            ),
        },
    };
    let url = match reqwest::Url::parse(&raw_endpoint) {
        Ok(url) => url,
        Err(problem) => {
            return Err(ConfigError::NotAUrl {
                setting: endpoint_source,
                value: raw_endpoint,
                problem,
            });
        }
    };
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ConfigError::NotHttp {
            setting: endpoint_source,
            value: raw_endpoint,
        });
    }
    let endpoint = match protocol {
        OtlpProtocol::Grpc => raw_endpoint,
        OtlpProtocol::Http if !append_path => raw_endpoint,
        OtlpProtocol::Http => {
            let mut u = raw_endpoint.trim_end_matches('/').to_string();
            if !u.ends_with(TRACES_PATH) {
                u.push_str(TRACES_PATH);
            }
            u
        }
    };

    let mut headers = match otel_env(env, "HEADERS") {
        Some((name, v)) => parse_otel_headers(&v).map_err(variable(name))?,
        None => Vec::new(),
    };
    for (k, v) in flags.headers {
        headers.retain(|(old, _)| !old.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v.clone()));
    }

    let timeout = match flags.timeout {
        Some(t) => t,
        None => match otel_env(env, "TIMEOUT") {
            // Milliseconds, per the specification.
            Some((name, v)) => match v.parse::<u64>() {
                Ok(ms) => Duration::from_millis(ms),
                Err(_) => {
                    return Err(ConfigError::NotMilliseconds {
                        variable: name,
                        value: v,
                    });
                }
            },
            None => DEFAULT_TIMEOUT,
        },
    };
    if timeout.is_zero() {
        return Err(ConfigError::ZeroTimeout);
    }

    let compression = match flags.compression {
        Some(c) => c,
        None => match otel_env(env, "COMPRESSION") {
            Some((name, v)) => match v.to_ascii_lowercase().as_str() {
                "gzip" => Compression::Gzip,
                "none" => Compression::None,
                _ => {
                    return Err(ConfigError::UnknownCompression {
                        variable: name,
                        value: v,
                    });
                }
            },
            None => Compression::None,
        },
    };

    let file = |flag: Option<&Path>, flag_name: &str, suffix: &str| {
        flag.map(|p| FileSetting::new(p, flag_name))
            .or_else(|| otel_env(env, suffix).map(|(name, v)| FileSetting::new(v, name)))
    };
    let tls = ClientTls {
        ca_file: file(flags.ca_file, "--otlp-ca-file", "CERTIFICATE"),
        identity: client_tls::identity(
            file(
                flags.client_cert_file,
                "--otlp-client-cert-file",
                "CLIENT_CERTIFICATE",
            ),
            file(
                flags.client_key_file,
                "--otlp-client-key-file",
                "CLIENT_KEY",
            ),
        )?,
    };
    if !client_tls::is_https(&endpoint) && tls != ClientTls::default() {
        tracing::warn!(endpoint = %endpoint, "OTLP TLS files are set but the endpoint is plain http://: they are not used");
    }

    Ok(OtlpConfig {
        endpoint,
        endpoint_source,
        protocol,
        headers,
        timeout,
        compression,
        tls,
    })
}

fn parse_otel_protocol(v: &str) -> Result<OtlpProtocol, ValueError> {
    match v {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::Http),
        "http/json" => Err(ValueError::HttpJson(v.to_string())),
        _ => Err(ValueError::UnknownProtocol(v.to_string())),
    }
}

/// `key1=value1,key2=value2` with percent-encoded values (W3C Baggage
/// format, as the OpenTelemetry specification says). Errors name the item,
/// never the value: values are often credentials.
pub(crate) fn parse_otel_headers(v: &str) -> Result<Vec<(String, String)>, ValueError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, item) in v.split(',').enumerate() {
        if item.trim().is_empty() {
            continue;
        }
        let Some((k, val)) = item.split_once('=') else {
            return Err(ValueError::NotKeyValue(i + 1));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(ValueError::EmptyKey(i + 1));
        }
        let val = percent_encoding::percent_decode_str(val.trim())
            .decode_utf8()
            .map_err(|_| ValueError::NotUtf8(k.to_string()))?;
        out.retain(|(old, _)| !old.eq_ignore_ascii_case(k));
        out.push((k.to_string(), val.into_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn without_flags_or_environment_the_defaults_follow_the_protocol() {
        let cfg = resolve(&OtlpFlags::default(), &env_of(&[])).unwrap();
        assert_eq!(cfg.endpoint, "http://127.0.0.1:4317");
        assert_eq!(cfg.protocol, OtlpProtocol::Grpc);
        assert_eq!(cfg.timeout, Duration::from_secs(10));
        assert_eq!(cfg.compression, Compression::None);
        assert_eq!(cfg.tls, ClientTls::default());
        let http = OtlpFlags {
            protocol: Some(OtlpProtocol::Http),
            ..Default::default()
        };
        assert_eq!(
            resolve(&http, &env_of(&[])).unwrap().endpoint,
            "http://127.0.0.1:4318/v1/traces"
        );
    }

    #[test]
    fn the_environment_fills_what_the_flags_leave_open() {
        let env = env_of(&[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://otel.example:4318/base/",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-tenant=prod, authorization=Bearer%20abc%3D",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/otel/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/etc/otel/tls.crt"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/otel/tls.key"),
        ]);
        let cfg = resolve(&OtlpFlags::default(), &env).unwrap();
        // The generic endpoint is a base: the signal's path is appended.
        assert_eq!(cfg.endpoint, "https://otel.example:4318/base/v1/traces");
        assert_eq!(cfg.protocol, OtlpProtocol::Http);
        assert_eq!(
            cfg.headers,
            vec![
                ("x-tenant".to_string(), "prod".to_string()),
                ("authorization".to_string(), "Bearer abc=".to_string())
            ]
        );
        assert_eq!(cfg.timeout, Duration::from_millis(2500));
        assert_eq!(cfg.compression, Compression::Gzip);
        assert_eq!(
            cfg.tls.ca_file,
            Some(FileSetting::new(
                "/etc/otel/ca.pem",
                "OTEL_EXPORTER_OTLP_CERTIFICATE"
            ))
        );
        let (cert, key) = cfg.tls.identity.unwrap();
        assert_eq!(cert.path, Path::new("/etc/otel/tls.crt"));
        assert_eq!(key.source, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    }

    #[test]
    fn traces_variables_win_over_generic_ones_and_flags_over_both() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom/path",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "3000"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=generic"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "a=traces,b=traces"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/generic.pem"),
        ]);
        let cfg = resolve(&OtlpFlags::default(), &env).unwrap();
        // The traces endpoint is used as it is, path and all.
        assert_eq!(cfg.endpoint, "http://traces:4318/custom/path");
        assert_eq!(cfg.endpoint_source, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        assert_eq!(cfg.protocol, OtlpProtocol::Http);
        assert_eq!(cfg.timeout, Duration::from_secs(3));
        assert_eq!(
            cfg.headers,
            vec![
                ("a".to_string(), "traces".to_string()),
                ("b".to_string(), "traces".to_string())
            ]
        );

        let headers = vec![("A".to_string(), "flag".to_string())];
        let flags = OtlpFlags {
            endpoint: Some("https://flag:4317"),
            protocol: Some(OtlpProtocol::Grpc),
            headers: &headers,
            timeout: Some(Duration::from_secs(7)),
            compression: Some(Compression::None),
            ca_file: Some(Path::new("/flag.pem")),
            ..Default::default()
        };
        let cfg = resolve(&flags, &env).unwrap();
        assert_eq!(cfg.endpoint, "https://flag:4317");
        assert_eq!(cfg.endpoint_source, "--otlp-endpoint");
        assert_eq!(cfg.protocol, OtlpProtocol::Grpc);
        assert_eq!(cfg.timeout, Duration::from_secs(7));
        assert_eq!(cfg.compression, Compression::None);
        // A flag header replaces the variable's header of the same name.
        assert_eq!(
            cfg.headers,
            vec![
                ("b".to_string(), "traces".to_string()),
                ("A".to_string(), "flag".to_string())
            ]
        );
        assert_eq!(
            cfg.tls.ca_file,
            Some(FileSetting::new("/flag.pem", "--otlp-ca-file"))
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", " "),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
        ]);
        let cfg = resolve(&OtlpFlags::default(), &env).unwrap();
        assert_eq!(cfg.endpoint, "http://generic:4317");
        assert_eq!(cfg.timeout, Duration::from_millis(500));
    }

    #[test]
    fn bad_settings_are_named_without_echoing_header_values() {
        let err = |vars: &[(&str, &str)]| {
            format!(
                "{:#}",
                resolve(&OtlpFlags::default(), &env_of(vars)).unwrap_err()
            )
        };
        let e = err(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_TIMEOUT") && e.contains("milliseconds"),
            "{e}"
        );
        let e = err(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("protobuf"),
            "{e}"
        );
        let e = err(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")]);
        assert!(e.contains("OTEL_EXPORTER_OTLP_COMPRESSION"), "{e}");
        let e = err(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4317")]);
        assert!(e.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
        let e = err(&[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer s3cr3t,oops",
        )]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_HEADERS")
                && e.contains("item 2")
                && !e.contains("s3cr3t"),
            "{e}"
        );
        let e = err(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE") && e.contains("no client key"),
            "{e}"
        );
        // The debug form names headers but never shows their values.
        let headers = vec![("authorization".to_string(), "Bearer s3cr3t".to_string())];
        let cfg = resolve(
            &OtlpFlags {
                headers: &headers,
                ..Default::default()
            },
            &env_of(&[]),
        )
        .unwrap();
        let debug = format!("{cfg:?}");
        assert!(
            debug.contains("authorization") && !debug.contains("s3cr3t"),
            "{debug}"
        );
    }
}
