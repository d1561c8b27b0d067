//! The webhook's HTTP server: TLS (optionally mutual), and limits that keep
//! slow or idle clients from holding connections (slowloris).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::net::TcpStream;

/// Why the `--tls-*` files give no server configuration; each names the
/// flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {detail}", .path.display())]
    Unreadable {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("--tls-cert-file {}: no certificate in it", .0.display())]
    NoCertificate(PathBuf),
    #[error("--tls-client-ca-file {}", .path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("--tls-cert-file and --tls-key-file do not form a usable certificate")]
    KeyPair(#[source] rustls::Error),
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
}

/// The rustls server configuration for `--tls-*` (ring provider, TLS 1.2+,
/// optional client-certificate verification).
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let unreadable = |flag: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |e: rustls::pki_types::pem::Error| TlsError::Unreadable {
            flag,
            path,
            detail: e.to_string(),
        }
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(unreadable("--tls-cert-file", cert))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(unreadable("--tls-key-file", key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(ca) => {
            let refused = |e: Box<dyn std::error::Error + Send + Sync>| TlsError::ClientCa {
                path: ca.to_path_buf(),
                source: e,
            };
            let mut roots = rustls::RootCertStore::empty();
            for c in
                CertificateDer::pem_file_iter(ca).map_err(unreadable("--tls-client-ca-file", ca))?
            {
                let c = c.map_err(unreadable("--tls-client-ca-file", ca))?;
                roots.add(c).map_err(|e| refused(e.into()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| refused(e.into()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(TlsError::KeyPair)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Closes a connection whose client sends nothing within the timeout before
/// HTTP starts (hyper's header timeout only starts with the first byte, and
/// HTTP version detection would wait forever).
#[derive(Clone)]
struct FirstByteWithin<A> {
    inner: A,
    timeout: Duration,
}

impl<A, S> Accept<TcpStream, S> for FirstByteWithin<A>
where
    A: Accept<TcpStream, S> + Clone + Send + 'static,
    A::Future: Send,
    S: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(A::Stream, A::Service)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let inner = self.inner.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let mut one = [0u8; 1];
            match tokio::time::timeout(timeout, stream.peek(&mut one)).await {
                Ok(Ok(n)) if n > 0 => inner.accept(stream, service).await,
                Ok(Ok(_)) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed")),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "client sent nothing within --header-read-timeout",
                )),
            }
        })
    }
}

/// Serves the webhook app on `listener` (HTTPS with `tls`) until `shutdown`
/// resolves, then lets requests in flight finish for up to 10 s.
pub async fn serve_webhook(
    listener: std::net::TcpListener,
    tls: Option<rustls::ServerConfig>,
    app: axum::Router,
    header_read_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        h.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    match tls {
        Some(cfg) => {
            let mut server = axum_server::from_tcp_rustls(
                listener,
                axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg)),
            )?
            .handle(handle)
            .map(|inner| FirstByteWithin {
                inner,
                timeout: header_read_timeout,
            });
            limit_connections(server.http_builder(), header_read_timeout);
            server.serve(app.into_make_service()).await
        }
        None => {
            let mut server = axum_server::from_tcp(listener)?
                .handle(handle)
                .map(|inner| FirstByteWithin {
                    inner,
                    timeout: header_read_timeout,
                });
            limit_connections(server.http_builder(), header_read_timeout);
            server.serve(app.into_make_service()).await
        }
    }
}

/// Slow clients cannot hold connections: request headers must arrive within
/// `header_read_timeout` (also between keep-alive requests), and HTTP/2
/// connections whose peer stops answering pings are closed.
fn limit_connections(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    header_read_timeout: Duration,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(header_read_timeout)
        .max_concurrent_streams(64);
}
