//! A resource RBAC refuses to list or watch: counted, said once, and
//! watched again with backoff.

use std::time::Duration;

use kube::runtime::watcher;

use crate::metrics::Metrics;

/// RBAC refuses this resource (for now: see [`Refusal`]).
pub(super) fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// First wait before a refused resource is listed again; it doubles up to
/// [`REFUSED_RETRY_MAX`].
const REFUSED_RETRY_FIRST: Duration = Duration::from_secs(1);
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(300);

/// A resource RBAC refuses to list or watch is not given up: an apiserver
/// that has just started answers 403 to everything until its authorizer
/// has synced (a second or two), and an operator may grant the resource
/// later. The watch is started again with backoff; while refused, the
/// resource is counted in `kascade_watch_forbidden_resources` and said
/// once in the log, and said again once allowed.
pub(super) struct Refusal<'a> {
    cluster: &'a str,
    resource: &'a str,
    gauge: prometheus_client::metrics::gauge::Gauge,
    refused: bool,
    wait: Duration,
    /// Say the refusal as a warning, not as information.
    pub(super) warn: bool,
}

impl<'a> Refusal<'a> {
    pub(super) fn new(cluster: &'a str, resource: &'a str, metrics: &Metrics) -> Self {
        Refusal {
            cluster,
            resource,
            gauge: metrics
                .watch_forbidden
                .get_or_create(&Metrics::cluster(cluster))
                .clone(),
            refused: false,
            wait: REFUSED_RETRY_FIRST,
            warn: false,
        }
    }

    /// After a 403: counts and logs the refusal the first time, then waits
    /// before the watch starts again.
    pub(super) async fn refused(&mut self) {
        if !self.refused {
            self.refused = true;
            self.gauge.inc();
            const SAID: &str =
                "not allowed to list/watch it (RBAC); not watching it, checking again with backoff";
            let retry_max_s = REFUSED_RETRY_MAX.as_secs();
            if self.warn {
                tracing::warn!(
                    cluster = self.cluster,
                    resource = self.resource,
                    retry_max_s,
                    "{SAID}"
                );
            } else {
                tracing::info!(
                    cluster = self.cluster,
                    resource = self.resource,
                    retry_max_s,
                    "{SAID}"
                );
            }
        }
        tokio::time::sleep(self.wait).await;
        self.wait = (self.wait * 2).min(REFUSED_RETRY_MAX);
    }

    /// The apiserver answered: the resource is allowed (again).
    pub(super) fn allowed(&mut self) {
        if self.refused {
            self.refused = false;
            self.gauge.dec();
            tracing::info!(
                cluster = self.cluster,
                resource = self.resource,
                "now allowed to list/watch it (RBAC); watching it"
            );
        }
        self.wait = REFUSED_RETRY_FIRST;
    }
}

impl Drop for Refusal<'_> {
    /// A watcher stopped (its role lost, shutdown) no longer counts.
    fn drop(&mut self) {
        if self.refused {
            self.gauge.dec();
        }
    }
}
