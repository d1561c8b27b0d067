//! etcd through its own v3 gRPC API, generated from etcd's protos
//! (`proto/etcd`) by build.rs: the client ([`EtcdClient`]: endpoints tried
//! in turn, TLS, authentication, one `tracing` span per round trip), the
//! keeper of a lease ([`LeaseKeeper`], one `LeaseKeepAlive` stream), and
//! errors classified by gRPC status code ([`EtcdError`]).
//!
//! With `--client-cert-auth` on, etcd takes a client certificate's
//! CommonName as the user when a request carries no token; kascade sends
//! the token of `--etcd-username` whenever one is configured.

mod client;
mod error;
mod lease;
pub mod proto;
mod tls;

pub use client::EtcdClient;
pub(crate) use client::EtcdClientConfig;
pub(crate) use error::{EtcdConfigError, EtcdError};
pub(crate) use lease::LeaseKeeper;
pub use tls::EtcdTls;
