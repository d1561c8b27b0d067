//! gRPC channels to etcd members: plain, or TLS with a CA and an optional
//! client certificate (kascade's rustls configuration, `client_tls`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::error::EtcdConfigError;
use crate::client_tls::{ClientTls, FileSetting};

/// TLS towards etcd.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// CA bundle (PEM) that signed etcd's serving certificate.
    pub ca_file: PathBuf,
    /// Client certificate chain and key (PEM), when etcd wants one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl EtcdTls {
    /// Reads and checks every file now, so a bad one fails at startup with
    /// the flag that named it.
    pub(crate) fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>, EtcdConfigError> {
        let tls = ClientTls {
            ca_file: Some(FileSetting::new(&self.ca_file, "--etcd-ca-file")),
            identity: self.client_cert.as_ref().map(|(cert, key)| {
                (
                    FileSetting::new(cert, "--etcd-cert-file"),
                    FileSetting::new(key, "--etcd-key-file"),
                )
            }),
        };
        tls.rustls_config(&[b"h2"])
            .map(Arc::new)
            .map_err(|e| EtcdConfigError::Tls(format!("{e:#}")))
    }
}

/// `http://host:2379`, `https://host:2379/` or `host:2379` → the URL
/// without trailing slash; anything else is refused with the reason.
pub(crate) fn normalize_endpoint(e: &str) -> Result<String, EtcdConfigError> {
    let e = e.trim().trim_end_matches('/');
    let bad = |reason: &str| EtcdConfigError::BadEndpoint {
        endpoint: e.to_string(),
        reason: reason.to_string(),
    };
    let url = if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    };
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(bad("not an http(s)://host:port URL"));
    }
    if !matches!(uri.path(), "" | "/") {
        return Err(bad("an etcd endpoint has no path"));
    }
    Ok(url)
}

/// A channel to one member, connecting on first use. Over TLS the channel
/// connects to `http://host:port` with its own connector (a TCP connection
/// wrapped by tokio-rustls), so tonic never attempts TLS of its own.
pub(crate) fn channel(
    url: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
) -> Result<Channel, EtcdConfigError> {
    let bad = |reason: String| EtcdConfigError::BadEndpoint {
        endpoint: url.to_string(),
        reason,
    };
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|_| bad("not a URL".into()))?;
    let authority = uri
        .authority()
        .ok_or_else(|| bad("no host".into()))?
        .clone();
    let plain = Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let Some(config) = tls.filter(|_| uri.scheme_str() == Some("https")) else {
        return Ok(plain.connect_lazy());
    };
    let connector = crate::client_tls::grpc_tls_connector(&authority, 2379, config.clone())
        .map_err(|e| bad(e.to_string()))?;
    Ok(plain.origin(uri).connect_with_connector_lazy(connector))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized_and_checked() {
        assert_eq!(
            normalize_endpoint("http://e:2379/").unwrap(),
            "http://e:2379"
        );
        assert_eq!(normalize_endpoint(" e:2379 ").unwrap(), "http://e:2379");
        assert_eq!(
            normalize_endpoint("https://10.0.0.1:2379").unwrap(),
            "https://10.0.0.1:2379"
        );
        assert!(normalize_endpoint("ftp://e:2379").is_err());
        let err = normalize_endpoint("http://e:2379/v3").unwrap_err();
        assert!(err.to_string().contains("no path"), "{err}");
    }
}
