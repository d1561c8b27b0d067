//! Why an export setting cannot be used.

use crate::client_tls::TlsError;

/// The error of parsing a URL.
type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// An export setting that cannot be used, naming the flag or variable it
/// came from. Header values are never shown: they are often credentials.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{variable}: {problem}")]
    Variable {
        variable: String,
        problem: ValueError,
    },
    #[error("{setting} {value:?} is not a URL: {problem}")]
    NotAUrl {
        setting: String,
        value: String,
        problem: UrlError,
    },
    #[error("{setting} {value:?}: expected http://host:port or https://host:port")]
    NotHttp { setting: String, value: String },
    #[error("{variable} {value:?}: expected a whole number of milliseconds")]
    NotMilliseconds { variable: String, value: String },
    #[error("the OTLP timeout must be positive")]
    ZeroTimeout,
    #[error("{variable} {value:?}: expected gzip or none")]
    UnknownCompression { variable: String, value: String },
    #[error("--export-max-batch-bytes {value} is below the minimum {minimum}")]
    BatchBytesTooSmall { value: usize, minimum: usize },
    #[error("--export-max-value-bytes {value} is below the minimum {minimum}")]
    ValueBytesTooSmall { value: usize, minimum: usize },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A bad value of an `OTEL_EXPORTER_OTLP_*` variable (named by
/// [`ConfigError::Variable`]).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error("{0:?}: kascade sends OTLP as protobuf; use grpc or http/protobuf")]
    HttpJson(String),
    #[error("{0:?}: expected grpc or http/protobuf")]
    UnknownProtocol(String),
    #[error("item {0} is not key=value")]
    NotKeyValue(usize),
    #[error("item {0} has an empty key")]
    EmptyKey(usize),
    #[error("the value of {0} is not UTF-8 once percent-decoded")]
    NotUtf8(String),
}
