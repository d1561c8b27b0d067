//! The span cache of `collect`: local to the process, or shared by replicas
//! through etcd (see `aggregate::span_cache`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::PipelineConfig;
use crate::aggregate::span_cache::{EtcdConfig, EtcdSpanCache, EtcdTls, SpanCache};
use crate::metrics::Metrics;

/// Where `collect` keeps its span cache: empty `etcd_endpoints` keep it in
/// the process; else it is shared by every replica through etcd, so each
/// object span and link is emitted once.
///
/// ```no_run
/// use kascade::app::SpanCacheConfig;
///
/// let shared = SpanCacheConfig::default()
///     .etcd_endpoints(["https://etcd-0:2379", "https://etcd-1:2379"])
///     .etcd_ca_file("/etc/etcd/ca.crt");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanCacheConfig {
    /// etcd client URLs; empty: the local cache only.
    pub etcd_endpoints: Vec<String>,
    /// Prefix of every etcd key kascade writes.
    pub etcd_prefix: String,
    /// Longest one etcd request may take at first.
    pub etcd_timeout: Duration,
    /// How long a failed etcd request is retried before the local cache is
    /// used instead.
    pub etcd_retry_for: Duration,
    /// While falling back, how often etcd is probed.
    pub etcd_probe_interval: Duration,
    /// CA (PEM) of etcd's serving certificate.
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd.
    pub etcd_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `etcd_cert_file`.
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user (etcd authentication enabled).
    pub etcd_username: Option<String>,
    /// File holding the password of `etcd_username`.
    pub etcd_password_file: Option<PathBuf>,
}

impl Default for SpanCacheConfig {
    fn default() -> Self {
        Self {
            etcd_endpoints: Vec::new(),
            etcd_prefix: "/kascade/spans/".to_string(),
            etcd_timeout: Duration::from_millis(500),
            etcd_retry_for: Duration::from_secs(10),
            etcd_probe_interval: Duration::from_secs(5),
            etcd_ca_file: None,
            etcd_cert_file: None,
            etcd_key_file: None,
            etcd_username: None,
            etcd_password_file: None,
        }
    }
}

impl SpanCacheConfig {
    /// Shares the span cache through these etcd endpoints.
    pub fn etcd_endpoints<S: Into<String>>(mut self, urls: impl IntoIterator<Item = S>) -> Self {
        self.etcd_endpoints = urls.into_iter().map(Into::into).collect();
        self
    }

    /// Trusts this CA (PEM) for etcd's serving certificate.
    pub fn etcd_ca_file(mut self, ca: impl Into<PathBuf>) -> Self {
        self.etcd_ca_file = Some(ca.into());
        self
    }

    /// The local cache, or the etcd one (which starts checking etcd in the
    /// background when called inside a Tokio runtime).
    pub fn build(
        &self,
        p: &PipelineConfig,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<dyn SpanCache>> {
        let Some(cfg) = self.etcd_config(p)? else {
            return Ok(Arc::new(p.local_span_cache(&metrics)));
        };
        let cache =
            EtcdSpanCache::new(cfg, p.span_cache_entries, metrics).context("--etcd-endpoints")?;
        cache.start();
        Ok(Arc::new(cache))
    }

    /// Who watches each `--watch-cluster`: every replica alone, or one
    /// replica at a time through etcd.
    pub fn role_election(
        &self,
        p: &PipelineConfig,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<dyn crate::coordination::election::RoleElection>> {
        use crate::coordination::election::{EtcdElection, SingleReplica};
        use crate::coordination::etcd::EtcdClient;
        let Some(cfg) = self.etcd_config(p)? else {
            return Ok(SingleReplica::shared());
        };
        let client = EtcdClient::new(&cfg.client(), metrics).context("--etcd-endpoints")?;
        Ok(Arc::new(EtcdElection::new(
            client,
            &cfg.prefix,
            &cfg.replica,
            cfg.timeout,
        )))
    }

    /// The etcd settings; `None` without etcd endpoints.
    fn etcd_config(&self, p: &PipelineConfig) -> anyhow::Result<Option<EtcdConfig>> {
        let endpoints: Vec<String> = self
            .etcd_endpoints
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() {
            return Ok(None);
        }
        let mut cfg = EtcdConfig::new(endpoints, p.span_cache_ttl());
        cfg.prefix = self.etcd_prefix.clone();
        if !cfg.prefix.starts_with('/') {
            bail!("--etcd-prefix must start with /");
        }
        if self.etcd_timeout.is_zero() {
            bail!("--etcd-timeout must be positive");
        }
        // clap enforces these pairs on the command line; a config built in
        // code is checked here, so no setting is ignored silently.
        if self.etcd_cert_file.is_some() != self.etcd_key_file.is_some() {
            bail!("--etcd-cert-file and --etcd-key-file go together");
        }
        if self.etcd_cert_file.is_some() && self.etcd_ca_file.is_none() {
            bail!("--etcd-cert-file needs --etcd-ca-file");
        }
        if self.etcd_username.is_some() != self.etcd_password_file.is_some() {
            bail!("--etcd-username and --etcd-password-file go together");
        }
        cfg.timeout = self.etcd_timeout;
        cfg.retry_for = self.etcd_retry_for;
        cfg.probe_interval = self.etcd_probe_interval;
        cfg.tls = self.etcd_ca_file.as_ref().map(|ca| EtcdTls {
            ca_file: ca.clone(),
            client_cert: self.etcd_cert_file.clone().zip(self.etcd_key_file.clone()),
        });
        if let (Some(user), Some(file)) = (&self.etcd_username, &self.etcd_password_file) {
            let password = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read --etcd-password-file {}", file.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string();
            cfg.auth = Some((user.clone(), password));
        }
        Ok(Some(cfg))
    }
}
