//! Sends mergelogs to kascade in the background: batched, bounded, retried
//! on transient failures, counted when dropped; a reconcile never waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::{DEFAULT_MAX_ANCESTORS, Mergelog, MergelogBatch};

/// The tracer's configuration. `Default` sends nothing (no endpoint); use
/// [`Config::new`] and the builders.
///
/// ```
/// use std::time::Duration;
/// let config = kascade_cpid::Config::new("https://kascade.kascade.svc:9443")
///     .controller("config-roller")
///     .token("secret-from-a-mounted-file")
///     .flush_interval(Duration::from_millis(200));
/// assert_eq!(config.max_ancestors, kascade_cpid::DEFAULT_MAX_ANCESTORS);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL of a kascade collector; mergelogs go to `{endpoint}/cpid/mergelogs`.
    pub endpoint: Option<String>,
    /// Bearer token (the collector's `--webhook-token-file`).
    pub token: Option<String>,
    /// PEM CA bundle to trust for an `https` endpoint.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate and private key, for a collector that
    /// requires mutual TLS (`--tls-client-ca-file`).
    pub identity_pem: Option<Vec<u8>>,
    /// Recorded in each mergelog: who merged.
    pub controller: String,
    /// Ancestors stamped on each object.
    pub max_ancestors: usize,
    /// Mergelogs waiting to be sent; beyond it they are dropped and counted.
    pub buffer: usize,
    /// Mergelogs per request.
    pub batch_size: usize,
    /// How long the first mergelog of a batch waits for company.
    pub flush_interval: Duration,
    /// One request's deadline.
    pub request_timeout: Duration,
    /// Attempts after the first for a batch that failed transiently.
    pub retries: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: None,
            token: None,
            ca_pem: None,
            identity_pem: None,
            controller: String::new(),
            max_ancestors: DEFAULT_MAX_ANCESTORS,
            buffer: 4096,
            batch_size: 256,
            flush_interval: Duration::from_millis(500),
            request_timeout: Duration::from_secs(5),
            retries: 3,
        }
    }
}

impl Config {
    /// Sends mergelogs to the collector at `endpoint`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Config {
            endpoint: Some(endpoint.into().trim_end_matches('/').to_string()),
            ..Config::default()
        }
    }
    /// Names the controller in its mergelogs.
    pub fn controller(mut self, name: impl Into<String>) -> Self {
        self.controller = name.into();
        self
    }
    /// Authenticates with a bearer token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// Trusts this PEM CA bundle for `https`.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }
    /// Presents this client certificate (PEM certificate followed by its
    /// PEM private key) for mutual TLS.
    pub fn identity_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.identity_pem = Some(pem.into());
        self
    }
    /// Ancestors stamped on each object (0 turns the optimisation off).
    pub fn max_ancestors(mut self, n: usize) -> Self {
        self.max_ancestors = n;
        self
    }
    /// Mergelogs that may wait to be sent.
    pub fn buffer(mut self, n: usize) -> Self {
        self.buffer = n.max(1);
        self
    }
    /// Mergelogs per request.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }
    /// How long a batch waits to fill.
    pub fn flush_interval(mut self, d: Duration) -> Self {
        self.flush_interval = d;
        self
    }
    /// One request's deadline.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }
    /// Retries of a transiently failed batch.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }
}

#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1);
    }
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) no_change: Counter,
    pub(crate) inherited: Counter,
    pub(crate) covered: Counter,
    pub(crate) merged: Counter,
    pub(crate) malformed: Counter,
    pub(crate) dropped_no_endpoint: Counter,
    sent: Counter,
    dropped_buffer_full: Counter,
    dropped_undeliverable: Counter,
    failed_requests: Counter,
}

/// The tracer's counters (export them as the controller's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Reconciles that observed no CPID.
    pub no_change: u64,
    /// Reconciles that passed one CPID on.
    pub inherited: u64,
    /// Merges avoided because one CPID's ancestors covered the others.
    pub covered: u64,
    /// New CPIDs minted for merges (each one mergelog).
    pub merged: u64,
    /// Annotations ignored as malformed.
    pub malformed: u64,
    /// Mergelogs delivered (answered 2xx).
    pub sent: u64,
    /// Mergelogs dropped because the buffer was full.
    pub dropped_buffer_full: u64,
    /// Mergelogs dropped after the retries failed or the server refused them.
    pub dropped_undeliverable: u64,
    /// Mergelogs dropped because no endpoint is configured.
    pub dropped_no_endpoint: u64,
    /// Requests that failed (each may have been retried).
    pub failed_requests: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            no_change: self.no_change.get(),
            inherited: self.inherited.get(),
            covered: self.covered.get(),
            merged: self.merged.get(),
            malformed: self.malformed.get(),
            sent: self.sent.get(),
            dropped_buffer_full: self.dropped_buffer_full.get(),
            dropped_undeliverable: self.dropped_undeliverable.get(),
            dropped_no_endpoint: self.dropped_no_endpoint.get(),
            failed_requests: self.failed_requests.get(),
        }
    }
}

enum Command {
    Send(Mergelog),
    Flush(oneshot::Sender<()>),
}

/// The handle of the background task that delivers mergelogs.
#[derive(Clone)]
pub struct MergelogSender {
    tx: mpsc::Sender<Command>,
    counters: Arc<Counters>,
    last_full_warning: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl MergelogSender {
    pub(crate) fn spawn(config: &Config, counters: Arc<Counters>) -> Self {
        let (tx, rx) = mpsc::channel(config.buffer);
        let task = Delivery::new(config, counters.clone());
        tokio::spawn(task.run(rx, config.batch_size, config.flush_interval));
        MergelogSender {
            tx,
            counters,
            last_full_warning: Default::default(),
        }
    }

    /// Queues a mergelog; when the buffer is full it is dropped and counted
    /// (warned about at most every 10 s).
    pub fn send(&self, m: Mergelog) {
        if self.tx.try_send(Command::Send(m)).is_err() {
            self.counters.dropped_buffer_full.inc();
            let mut last = self
                .last_full_warning
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    dropped_so_far = self.counters.dropped_buffer_full.get(),
                    "mergelog buffer full: dropping mergelogs (is kascade reachable?)"
                );
            }
        }
    }

    /// Resolves once everything queued before it was delivered or dropped.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

struct Delivery {
    client: Option<reqwest::Client>,
    url: String,
    token: Option<String>,
    retries: u32,
    counters: Arc<Counters>,
}

/// Whether a failed request may succeed if sent again.
enum Failure {
    Transient(String),
    Refused(String),
}

impl Delivery {
    fn new(config: &Config, counters: Arc<Counters>) -> Self {
        let mut builder = reqwest::Client::builder().timeout(config.request_timeout);
        let mut setup_error = None;
        if let Some(pem) = &config.ca_pem {
            match reqwest::Certificate::from_pem_bundle(pem) {
                Ok(certs) => {
                    for c in certs {
                        builder = builder.add_root_certificate(c);
                    }
                }
                Err(e) => setup_error = Some(format!("CA bundle: {e}")),
            }
        }
        if let Some(pem) = &config.identity_pem {
            match reqwest::Identity::from_pem(pem) {
                Ok(id) => builder = builder.identity(id),
                Err(e) => setup_error = Some(format!("client certificate and key: {e}")),
            }
        }
        let client = match (setup_error, builder.build()) {
            (None, Ok(c)) => Some(c),
            (Some(e), _) => {
                tracing::error!(error = %e, "mergelog sender disabled: every mergelog will be dropped");
                None
            }
            (None, Err(e)) => {
                tracing::error!(error = %e, "mergelog sender disabled: every mergelog will be dropped");
                None
            }
        };
        Delivery {
            client,
            url: format!(
                "{}/cpid/mergelogs",
                config.endpoint.as_deref().unwrap_or_default()
            ),
            token: config.token.clone(),
            retries: config.retries,
            counters,
        }
    }

    async fn run(self, mut rx: mpsc::Receiver<Command>, batch_size: usize, wait: Duration) {
        let mut batch: Vec<Mergelog> = Vec::new();
        let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
        while let Some(first) = rx.recv().await {
            let deadline = tokio::time::Instant::now() + wait;
            let mut next = Some(first);
            loop {
                match next.take() {
                    Some(Command::Send(m)) => batch.push(m),
                    Some(Command::Flush(done)) => {
                        flushes.push(done);
                        break;
                    }
                    None => {}
                }
                if batch.len() >= batch_size {
                    break;
                }
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(c)) => next = Some(c),
                    Ok(None) | Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.deliver(std::mem::take(&mut batch)).await;
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }

    async fn deliver(&self, batch: Vec<Mergelog>) {
        let n = batch.len() as u64;
        let Some(client) = &self.client else {
            self.counters.dropped_undeliverable.add(n);
            return;
        };
        let body = MergelogBatch { mergelogs: batch };
        let mut backoff = Duration::from_millis(200);
        for attempt in 0..=self.retries {
            let mut req = client.post(&self.url).json(&body);
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            let failure = match req.send().await {
                Ok(r) if r.status().is_success() => {
                    self.counters.sent.add(n);
                    return;
                }
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    let msg = format!("{status}: {}", text.chars().take(300).collect::<String>());
                    if status.is_client_error()
                        && status != reqwest::StatusCode::TOO_MANY_REQUESTS
                        && status != reqwest::StatusCode::REQUEST_TIMEOUT
                    {
                        Failure::Refused(msg)
                    } else {
                        Failure::Transient(msg)
                    }
                }
                Err(e) => Failure::Transient(e.to_string()),
            };
            self.counters.failed_requests.inc();
            match failure {
                Failure::Refused(error) => {
                    tracing::warn!(url = %self.url, %error, mergelogs = n, "kascade refused mergelogs: dropped");
                    break;
                }
                Failure::Transient(error) if attempt == self.retries => {
                    tracing::warn!(url = %self.url, %error, mergelogs = n, attempts = attempt + 1, "mergelogs undeliverable: dropped");
                }
                Failure::Transient(error) => {
                    tracing::debug!(url = %self.url, %error, attempt, "mergelog request failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        self.counters.dropped_undeliverable.add(n);
    }
}
