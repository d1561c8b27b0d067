//! The webhook's HTTP server: TLS (optionally mutual), and limits that keep
//! slow or idle clients from holding connections (slowloris).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// At most `open` connections at once: one more is answered `429` with
/// `Retry-After` and closed before anything of it is read (over TLS, where
/// no answer can be sent before the handshake, it is closed). Idle
/// connections can then not take every file descriptor the process has.
#[derive(Clone)]
struct CountConnections<A> {
    inner: A,
    open: Arc<Semaphore>,
    limit: usize,
    plain: bool,
    refused: prometheus_client::metrics::counter::Counter,
}

impl<A, S> Accept<TcpStream, S> for CountConnections<A>
where
    A: Accept<TcpStream, S> + Clone + Send + 'static,
    A::Future: Send,
    A::Stream: Unpin,
    S: Send + 'static,
{
    type Stream = Counted<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, A::Service)>> + Send>>;

    fn accept(&self, mut stream: TcpStream, service: S) -> Self::Future {
        let inner = self.inner.clone();
        let permit = self.open.clone().try_acquire_owned();
        let (limit, plain, refused) = (self.limit, self.plain, self.refused.clone());
        Box::pin(async move {
            let Ok(permit) = permit else {
                refused.inc();
                if plain {
                    let msg =
                        format!("{limit} connections are open (--max-connections); retry later\n");
                    let answer = format!(
                        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nConnection: close\r\n\
                         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{msg}",
                        msg.len()
                    );
                    // Best effort: the client may be gone already.
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        stream.write_all(answer.as_bytes()).await?;
                        stream.shutdown().await
                    })
                    .await;
                }
                return Err(io::Error::other(
                    "connection limit reached (--max-connections)",
                ));
            };
            let (stream, service) = inner.accept(stream, service).await?;
            Ok((
                Counted {
                    inner: stream,
                    _permit: permit,
                },
                service,
            ))
        })
    }
}

/// A connection holding its place among `--max-connections` until it closes.
pub(crate) struct Counted<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Connections a server keeps open at once unless told otherwise: far
/// below the open-files limit kascade raises itself to (1,048,576 on most
/// distributions; 524,288 in many containers), far above what the
/// apiservers of a central collector keep open (a few each).
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// How the webhook's server holds its clients to account.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// A client must send its request headers within this time.
    pub header_read_timeout: Duration,
    /// Connections open at once; one more is refused (see `CountConnections`).
    pub max_connections: usize,
    /// Counts the connections refused for the limit.
    pub refused: prometheus_client::metrics::counter::Counter,
}

/// Raises this process's soft limit of open files to its hard limit (a
/// burst of connections otherwise exhausts the default 1,024, and then
/// `/healthz` too goes unanswered); the limits before and after.
pub(crate) fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, lim.rlim_cur))
}

/// Serves the webhook app on `listener` (HTTPS with `tls`) until `shutdown`
/// resolves, then lets requests in flight finish for up to 10 s.
pub async fn serve_webhook(
    listener: std::net::TcpListener,
    tls: Option<rustls::ServerConfig>,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let header_read_timeout = limits.header_read_timeout;
    fn count<A>(inner: A, limits: &ConnectionLimits, plain: bool) -> CountConnections<A> {
        CountConnections {
            inner,
            open: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limit: limits.max_connections.max(1),
            plain,
            refused: limits.refused.clone(),
        }
    }
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
            })
            .map(|inner| count(inner, &limits, false));
            limit_connections(server.http_builder(), header_read_timeout);
            server.serve(app.into_make_service()).await
        }
        None => {
            let mut server = axum_server::from_tcp(listener)?
                .handle(handle)
                .map(|inner| FirstByteWithin {
                    inner,
                    timeout: header_read_timeout,
                })
                .map(|inner| count(inner, &limits, true));
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
