//! TLS of kascade's outgoing connections (OTLP export, raw reads from
//! Jaeger): one rustls client configuration (ring provider, TLS 1.2+) built
//! from the system's CA certificates, or from a CA file instead, plus an
//! optional client certificate for mutual TLS.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setting that cannot be used; each names the flag or variable the
/// file came from.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{setting}: {problem}")]
    Unreadable {
        setting: String,
        problem: rustls::pki_types::pem::Error,
    },
    #[error("{setting}: no PEM certificate in it")]
    NoCertificate { setting: String },
    #[error("{setting}: not a usable CA certificate: {problem}")]
    BadCa {
        setting: String,
        problem: rustls::Error,
    },
    #[error("{setting}: no usable private key: {problem}")]
    BadKey {
        setting: String,
        problem: rustls::pki_types::pem::Error,
    },
    #[error("{cert} and {key} do not form a usable client certificate: {problem}")]
    BadIdentity {
        cert: String,
        key: String,
        problem: rustls::Error,
    },
    #[error("{setting} is set but no client key is")]
    NoClientKey { setting: String },
    #[error("{setting} is set but no client certificate is")]
    NoClientCertificate { setting: String },
    #[error("no system CA certificates found{detail}; name the server's CA with a CA file option")]
    NoSystemRoots { detail: String },
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
}

/// A file given by a flag or an environment variable; `source` names which,
/// so an error points at the setting to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSetting {
    pub path: PathBuf,
    pub source: String,
}

impl FileSetting {
    pub fn new(path: impl Into<PathBuf>, source: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            source: source.into(),
        }
    }

    fn describe(&self) -> String {
        format!("{} {}", self.source, self.path.display())
    }
}

/// What a client trusts and presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA certificates (PEM) trusted instead of the system's.
    pub ca_file: Option<FileSetting>,
    /// Client certificate chain and its private key (PEM), for mutual TLS.
    pub identity: Option<(FileSetting, FileSetting)>,
}

impl ClientTls {
    /// The rustls configuration, offering `alpn` (e.g. `h2` for gRPC).
    /// Reads and checks every file now, so a bad one fails at startup with
    /// its name rather than at the first connection.
    pub fn rustls_config(&self, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
        let roots = match &self.ca_file {
            Some(ca) => ca_roots(ca)?,
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let mut cfg = match &self.identity {
            Some((cert, key)) => {
                let chain = read_certs(cert)?;
                let key_der = PrivateKeyDer::from_pem_file(&key.path).map_err(|problem| {
                    TlsError::BadKey {
                        setting: key.describe(),
                        problem,
                    }
                })?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|problem| TlsError::BadIdentity {
                        cert: cert.describe(),
                        key: key.describe(),
                        problem,
                    })?
            }
            None => builder.with_no_client_auth(),
        };
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(cfg)
    }
}

fn read_certs(f: &FileSetting) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(&f.path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|problem| TlsError::Unreadable {
            setting: f.describe(),
            problem,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            setting: f.describe(),
        });
    }
    Ok(certs)
}

fn ca_roots(ca: &FileSetting) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(ca)? {
        roots.add(c).map_err(|problem| TlsError::BadCa {
            setting: ca.describe(),
            problem,
        })?;
    }
    Ok(roots)
}

/// The operating system's trusted CA certificates (e.g. the
/// `ca-certificates` package of the container image).
fn system_roots() -> Result<rustls::RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "skipping an unreadable system CA certificate");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(TlsError::NoSystemRoots {
            detail: found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
        });
    }
    Ok(roots)
}

/// A connection [`grpc_tls_connector`] makes.
pub(crate) type GrpcTlsStream =
    hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// A connector for tonic's `connect_with_connector_lazy` that dials
/// `authority` (its port, else `default_port`) and wraps the TCP connection
/// in TLS with `config`. The channel itself then connects to
/// `http://host:port`, so tonic never attempts TLS of its own and kascade's
/// rustls configuration (CA file, client certificate) applies to every
/// gRPC client alike (OTLP export, etcd).
pub(crate) fn grpc_tls_connector(
    authority: &tonic::codegen::http::uri::Authority,
    default_port: u16,
    config: Arc<rustls::ClientConfig>,
) -> Result<
    impl tower::Service<
        tonic::codegen::http::Uri,
        Response = GrpcTlsStream,
        Error = std::io::Error,
        Future = impl std::future::Future<Output = std::io::Result<GrpcTlsStream>> + Send,
    > + Clone
    + Send
    + 'static,
    TlsError,
> {
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(default_port);
    let server_name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|_| TlsError::ServerName(host.clone()))?;
    Ok(tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let tls = tokio_rustls::TlsConnector::from(config.clone());
        let (host, server_name) = (host.clone(), server_name.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connect(server_name, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        }
    }))
}

/// `true` for an `https://` URL.
pub(crate) fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// Checks that both halves of a client identity are given, or neither.
pub(crate) fn identity(
    cert: Option<FileSetting>,
    key: Option<FileSetting>,
) -> Result<Option<(FileSetting, FileSetting)>, TlsError> {
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        (Some(c), None) => Err(TlsError::NoClientKey {
            setting: c.describe(),
        }),
        (None, Some(k)) => Err(TlsError::NoClientCertificate {
            setting: k.describe(),
        }),
    }
}

/// Certificates for tests of TLS clients against in-process servers: a CA,
/// a server certificate for 127.0.0.1 and localhost, and a client
/// certificate, written as PEM files.
#[cfg(test)]
pub(crate) mod test_pki {
    use std::path::PathBuf;
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };

    pub(crate) struct TestPki {
        _dir: tempfile::TempDir,
        pub ca: PathBuf,
        pub server_cert: PathBuf,
        pub server_key: PathBuf,
        pub client_cert: PathBuf,
        pub client_key: PathBuf,
        /// A CA that signed none of these.
        pub other_ca: PathBuf,
    }

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    impl TestPki {
        pub(crate) fn generate() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let write = |name: &str, pem: String| {
                let p = dir.path().join(name);
                std::fs::write(&p, pem).unwrap();
                p
            };
            let issuer = ca("kascade-test-ca");
            let other = ca("kascade-test-other-ca");

            let server_key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                    .unwrap();
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let server = params.signed_by(&server_key, &issuer).unwrap();

            let client_key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params
                .distinguished_name
                .push(DnType::CommonName, "kascade-test-client");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let client = params.signed_by(&client_key, &issuer).unwrap();

            Self {
                ca: write("ca.crt", issuer.pem()),
                server_cert: write("server.crt", server.pem()),
                server_key: write("server.key", server_key.serialize_pem()),
                client_cert: write("client.crt", client.pem()),
                client_key: write("client.key", client_key.serialize_pem()),
                other_ca: write("other-ca.crt", other.pem()),
                _dir: dir,
            }
        }

        /// A server's rustls configuration for the test servers that
        /// stand in for receivers (built here, not by kascade's webhook
        /// code, so that client TLS depends on no stage); with
        /// `require_client_cert`, mutual TLS.
        pub(crate) fn server_config(&self, require_client_cert: bool) -> rustls::ServerConfig {
            use rustls::pki_types::pem::PemObject as _;
            let certs = CertificateDer::pem_file_iter(&self.server_cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&self.server_key).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap();
            let builder = if require_client_cert {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(&self.ca).unwrap() {
                    roots.add(c.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_no_client_auth()
            };
            let mut cfg = builder.with_single_cert(certs, key).unwrap();
            cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            cfg
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_pki::TestPki;
    use super::*;

    #[test]
    fn bad_files_are_named_in_the_error() {
        let pki = TestPki::generate();
        let err = |tls: ClientTls| format!("{:#}", tls.rustls_config(&[]).unwrap_err());
        let e = err(ClientTls {
            ca_file: Some(FileSetting::new("/nonexistent/ca.pem", "--otlp-ca-file")),
            identity: None,
        });
        assert!(e.contains("--otlp-ca-file /nonexistent/ca.pem"), "{e}");
        let e = err(ClientTls {
            ca_file: Some(FileSetting::new(
                &pki.client_key,
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            )),
            identity: None,
        });
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_CERTIFICATE") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = err(ClientTls {
            ca_file: Some(FileSetting::new(&pki.ca, "--otlp-ca-file")),
            identity: Some((
                FileSetting::new(&pki.client_cert, "--otlp-client-cert-file"),
                FileSetting::new(&pki.client_cert, "--otlp-client-key-file"),
            )),
        });
        assert!(e.contains("--otlp-client-key-file"), "{e}");
        let e = format!(
            "{:#}",
            identity(
                Some(FileSetting::new(
                    &pki.client_cert,
                    "--otlp-client-cert-file"
                )),
                None
            )
            .unwrap_err()
        );
        assert!(
            e.contains("--otlp-client-cert-file") && e.contains("no client key"),
            "{e}"
        );
    }

    #[test]
    fn a_ca_file_and_a_client_identity_make_a_config() {
        let pki = TestPki::generate();
        let cfg = ClientTls {
            ca_file: Some(FileSetting::new(&pki.ca, "--otlp-ca-file")),
            identity: Some((
                FileSetting::new(&pki.client_cert, "--otlp-client-cert-file"),
                FileSetting::new(&pki.client_key, "--otlp-client-key-file"),
            )),
        }
        .rustls_config(&[b"h2"])
        .unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(cfg.client_auth_cert_resolver.has_certs());
    }

    #[test]
    fn https_urls_are_recognised_in_any_case() {
        assert!(is_https("https://jaeger:4318"));
        assert!(is_https("HTTPS://jaeger:4318"));
        assert!(!is_https("http://jaeger:4318"));
        assert!(!is_https("http"));
    }
}
