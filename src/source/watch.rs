//! List-watch sources: every listable, watchable resource of a cluster
//! (minus an exclude list) and its Kubernetes Events, via kube-rs watchers.
//!
//! Nothing is kept here: each object version goes to the processor, which
//! keeps the last state per object (bounded by `--state-cache-bytes`) and
//! turns consecutive versions into diffs. Watchers re-list with exponential
//! backoff after errors (including `410 Gone`), so a restarting apiserver
//! does not see a relist storm; a re-list only shows objects whose version
//! changed while kascade was not watching.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use kube::api::{Api, ApiResource};
use kube::discovery::{Discovery, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

mod object;
mod refusal;

use crate::flow::{
    FilterReason, Intake, K8sEvent, WatchChange, WatchKind, Work, precise_occurrence,
};
use crate::metrics::Metrics;
use object::{RawObject, note_deep_values, object_ref, to_value};
use refusal::{Refusal, is_forbidden};

/// Resources never watched: Events are consumed by their own watcher,
/// Leases change every few seconds and say nothing about the cascade.
pub(crate) const DEFAULT_WATCH_EXCLUDE: &[&str] = &[
    "events",
    "events.events.k8s.io",
    "leases.coordination.k8s.io",
];

#[derive(Clone, Debug)]
pub struct WatchConfig {
    pub cluster: String,
    pub kubeconfig: PathBuf,
    /// `resource` or `resource.group`; empty = every discoverable resource.
    pub include: HashSet<String>,
    pub exclude: HashSet<String>,
    /// Events older than this, listed when a watch (re)starts, are not shown.
    pub event_max_age: Duration,
    pub watch_events: bool,
    /// The admission source's admitted writes, shown as the writes of the
    /// versions this watch delivers (`--admission-listen`).
    pub(crate) admissions: Option<Arc<super::admission::Admissions>>,
}

/// For tests that start a watcher of their own (the collector builds its
/// configuration from `--watch-*`).
#[cfg(feature = "test-support")]
impl WatchConfig {
    /// Watches every resource of `cluster` through `kubeconfig`, and its
    /// Events (listed ones up to 10 minutes old).
    pub fn new(cluster: impl Into<String>, kubeconfig: impl Into<PathBuf>) -> Self {
        Self {
            cluster: cluster.into(),
            kubeconfig: kubeconfig.into(),
            include: HashSet::new(),
            exclude: HashSet::new(),
            event_max_age: Duration::from_secs(600),
            watch_events: true,
            admissions: None,
        }
    }

    /// Watches only these resources (`resource` or `resource.group`).
    pub fn include(mut self, resources: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.include = resources.into_iter().map(Into::into).collect();
        self
    }

    /// Watches Events too, or not.
    pub fn events(mut self, watch_events: bool) -> Self {
        self.watch_events = watch_events;
        self
    }
}

/// `name=path` of `--watch-cluster`.
pub(crate) fn parse_cluster_kubeconfig(s: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not CLUSTER=KUBECONFIG"))?;
    super::validate_cluster_name(name)?;
    if path.is_empty() {
        return Err(format!("{s:?}: empty kubeconfig path"));
    }
    Ok((name.to_string(), PathBuf::from(path)))
}

fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Why a cluster cannot be watched (the watcher retries; a bad kubeconfig
/// given on the command line is refused at start).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("--watch-cluster {cluster}={}: not a readable kubeconfig", .path.display())]
    Unreadable {
        cluster: String,
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cluster {cluster}: cannot read kubeconfig {}", .path.display())]
    Read {
        cluster: String,
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cluster {cluster}: bad kubeconfig {}", .path.display())]
    Bad {
        cluster: String,
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cluster {cluster}: cannot build a client")]
    Client {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("cluster {cluster}: API discovery failed")]
    Discovery {
        cluster: String,
        #[source]
        source: kube::Error,
    },
}

/// Fails early, naming the flag and file, when a kubeconfig cannot be used.
pub(crate) fn check_kubeconfig(cluster: &str, path: &std::path::Path) -> Result<(), WatchError> {
    kube::config::Kubeconfig::read_from(path).map_err(|source| WatchError::Unreadable {
        cluster: cluster.to_string(),
        path: path.to_path_buf(),
        source,
    })?;
    Ok(())
}

async fn client_for(cfg: &WatchConfig) -> Result<kube::Client, WatchError> {
    client_from_kubeconfig(&cfg.cluster, &cfg.kubeconfig).await
}

/// A client for `cluster` from the kubeconfig at `path` (its current
/// context), as the list-watch uses it (also `kascade doctor`).
pub(crate) async fn client_from_kubeconfig(
    cluster: &str,
    path: &std::path::Path,
) -> Result<kube::Client, WatchError> {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|source| WatchError::Read {
            cluster: cluster.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|source| WatchError::Bad {
            cluster: cluster.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
    kube::Client::try_from(config).map_err(|source| WatchError::Client {
        cluster: cluster.to_string(),
        source,
    })
}

/// What the list-watch of a cluster watches, as discovery lists it: the
/// listable, watchable resources (by `include`/`exclude`, as
/// `resource` or `resource.group`), and the Events resource (the
/// events.k8s.io view when served).
pub(crate) struct Watched {
    pub objects: Vec<ApiResource>,
    pub events: Option<ApiResource>,
}

/// Runs discovery and picks the resources the list-watch watches.
pub(crate) async fn watched_resources(
    cluster: &str,
    client: &kube::Client,
    include: &HashSet<String>,
    exclude: &HashSet<String>,
) -> Result<Watched, WatchError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|source| WatchError::Discovery {
            cluster: cluster.to_string(),
            source,
        })?;
    let mut objects = Vec::new();
    let mut events: Option<ApiResource> = None;
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || !caps.supports_operation(verbs::WATCH) {
                continue;
            }
            let name = resource_name(&ar);
            if ar.plural == "events" && (ar.group.is_empty() || ar.group == "events.k8s.io") {
                // Prefer the events.k8s.io view; both show the same objects.
                if events.as_ref().is_none_or(|e| e.group.is_empty()) {
                    events = Some(ar.clone());
                }
                continue;
            }
            if exclude.contains(&name) || exclude.contains(&ar.plural) {
                continue;
            }
            if !include.is_empty() && !include.contains(&name) && !include.contains(&ar.plural) {
                continue;
            }
            objects.push(ar);
        }
    }
    Ok(Watched { objects, events })
}

/// `resource` or `resource.group`, as `--watch-resources` names it.
pub(crate) fn watched_name(ar: &ApiResource) -> String {
    resource_name(ar)
}

/// Starts the watchers of one cluster; returns their tasks.
pub async fn start(
    cfg: WatchConfig,
    intake: Intake,
    metrics: Arc<Metrics>,
) -> Result<Vec<JoinHandle<()>>, WatchError> {
    let client = client_for(&cfg).await?;
    let Watched {
        objects,
        events: events_resource,
    } = watched_resources(&cfg.cluster, &client, &cfg.include, &cfg.exclude).await?;
    let mut tasks = Vec::new();
    let mut watched = Vec::new();
    for ar in objects {
        watched.push(resource_name(&ar));
        tasks.push(tokio::spawn(watch_objects(
            cfg.clone(),
            client.clone(),
            ar,
            intake.clone(),
            metrics.clone(),
        )));
    }
    if cfg.watch_events
        && let Some(ar) = events_resource
    {
        watched.push(resource_name(&ar));
        tasks.push(tokio::spawn(watch_events(
            cfg.clone(),
            client.clone(),
            ar,
            intake.clone(),
            metrics.clone(),
        )));
    }
    tracing::info!(cluster = %cfg.cluster, resources = watched.len(), "list-watch started");
    tracing::debug!(cluster = %cfg.cluster, ?watched, "watched resources");
    Ok(tasks)
}

/// Watches one cluster while this replica holds its watcher role (see
/// `coordination::election`: a lease in the shared etcd; without etcd,
/// always): N replicas watch each cluster once, and another replica takes
/// over when the holder goes away. While the election cannot tell, the
/// current state is kept (a watcher too many is better than none).
pub(crate) async fn supervise(
    cfg: WatchConfig,
    intake: Intake,
    metrics: Arc<Metrics>,
    roles: Arc<dyn crate::coordination::election::RoleElection>,
) {
    use crate::coordination::election::Leadership;
    let mut campaign = roles.campaign(&format!("watch/{}", cfg.cluster));
    let mut running: Option<Vec<JoinHandle<()>>> = None;
    // Also retries a failed start, and notices the intake closing.
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = campaign.changed() => {}
        }
        let held = match campaign.leadership() {
            Leadership::Leader => true,
            Leadership::Follower => false,
            Leadership::Unknown => running.is_some(),
        };
        match (held, running.is_some()) {
            (true, false) => match start(cfg.clone(), intake.clone(), metrics.clone()).await {
                Ok(tasks) => {
                    tracing::info!(cluster = %cfg.cluster, "this replica watches the cluster");
                    metrics
                        .watching
                        .get_or_create(&Metrics::cluster(&cfg.cluster))
                        .set(1);
                    running = Some(tasks);
                }
                Err(e) => {
                    tracing::warn!(cluster = %cfg.cluster, error = %crate::messages::error_chain(&e), "cannot start watching; retrying")
                }
            },
            (false, true) => {
                tracing::info!(cluster = %cfg.cluster, "another replica watches the cluster now; stopping");
                for t in running.take().into_iter().flatten() {
                    t.abort();
                }
                metrics
                    .watching
                    .get_or_create(&Metrics::cluster(&cfg.cluster))
                    .set(0);
            }
            _ => {}
        }
        if intake.is_closed() {
            for t in running.take().into_iter().flatten() {
                t.abort();
            }
            return;
        }
    }
}

/// A list-watch of every object of `api`, re-listed with kube-runtime's
/// backoff after an error.
fn watch_stream(
    api: &Api<RawObject>,
) -> futures::stream::BoxStream<'static, watcher::Result<watcher::Event<RawObject>>> {
    watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed()
}

/// The changes of one resource, for as long as the apiserver serves them:
/// errors are counted and re-listed with backoff, refusals waited out (see
/// [`Refusal`]). Both watchers read their resource through it.
struct ResourceWatch<'a> {
    api: Api<RawObject>,
    stream: futures::stream::BoxStream<'static, watcher::Result<watcher::Event<RawObject>>>,
    rbac: Refusal<'a>,
    errors: prometheus_client::metrics::counter::Counter,
    cluster: &'a str,
    resource: &'a str,
    /// Told whether the watch delivers, each time that changes: its list
    /// answered (true), refused (false).
    on_access: Box<dyn FnMut(bool) + Send + 'a>,
    delivers: Option<bool>,
}

impl<'a> ResourceWatch<'a> {
    fn new(
        client: kube::Client,
        ar: &ApiResource,
        cluster: &'a str,
        resource: &'a str,
        metrics: &Metrics,
    ) -> Self {
        let api: Api<RawObject> = Api::all_with(client, ar);
        ResourceWatch {
            stream: watch_stream(&api),
            api,
            rbac: Refusal::new(cluster, resource, metrics),
            errors: metrics
                .watch_errors
                .get_or_create(&Metrics::cluster(cluster))
                .clone(),
            cluster,
            resource,
            on_access: Box::new(|_| {}),
            delivers: None,
        }
    }

    /// Calls `f` with whether the watch delivers, each time that changes.
    fn on_access(mut self, f: impl FnMut(bool) + Send + 'a) -> Self {
        self.on_access = Box::new(f);
        self
    }

    fn access(&mut self, delivers: bool) {
        if self.delivers != Some(delivers) {
            self.delivers = Some(delivers);
            (self.on_access)(delivers);
        }
    }

    /// Refusals said as warnings, not as information.
    fn refusals_warned(mut self) -> Self {
        self.rbac.warn = true;
        self
    }

    /// The next object listed, changed or deleted; `None` once the
    /// watcher's stream ends.
    async fn next(&mut self) -> Option<(WatchKind, RawObject)> {
        loop {
            let (kind, obj) = match self.stream.next().await? {
                Ok(watcher::Event::Apply(o)) => (WatchKind::Modified, o),
                Ok(watcher::Event::InitApply(o)) => (WatchKind::Listed, o),
                Ok(watcher::Event::Delete(o)) => (WatchKind::Deleted, o),
                // `Init` comes before the list is asked for; `InitDone`
                // after it was answered.
                Ok(watcher::Event::Init) => continue,
                Ok(watcher::Event::InitDone) => {
                    self.rbac.allowed();
                    self.access(true);
                    continue;
                }
                Err(e) if is_forbidden(&e) => {
                    self.access(false);
                    // No watch held open while waiting.
                    self.stream = futures::stream::empty().boxed();
                    self.rbac.refused().await;
                    self.stream = watch_stream(&self.api);
                    continue;
                }
                Err(e) => {
                    self.errors.inc();
                    tracing::warn!(cluster = %self.cluster, resource = %self.resource, error = %e, "watch failed; re-listing with backoff");
                    continue;
                }
            };
            self.rbac.allowed();
            self.access(true);
            return Some((kind, obj));
        }
    }
}

async fn watch_objects(
    cfg: WatchConfig,
    client: kube::Client,
    ar: ApiResource,
    intake: Intake,
    metrics: Arc<Metrics>,
) {
    let resource = resource_name(&ar);
    let label = Metrics::cluster(&cfg.cluster);
    // Admitted writes of the resource are held for the watch only while
    // it delivers.
    let admissions = cfg.admissions.clone();
    let (cluster, group, plural) = (cfg.cluster.clone(), ar.group.clone(), ar.plural.clone());
    let mut watch = ResourceWatch::new(client, &ar, &cfg.cluster, &resource, &metrics).on_access(
        move |delivers| {
            if let Some(a) = &admissions {
                a.watching(&cluster, &group, &plural, delivers);
            }
        },
    );
    while let Some((kind, obj)) = watch.next().await {
        let Some(object) = object_ref(&cfg.cluster, &ar, &obj) else {
            continue;
        };
        metrics.watch_changes.get_or_create(&label).inc();
        let (state, deep) = to_value(&ar, &obj);
        note_deep_values(
            &object,
            obj.metadata.resource_version.as_deref(),
            deep,
            &metrics,
        );
        let change = WatchChange {
            object,
            kind,
            state,
            observed: SystemTime::now(),
        };
        let admitted = cfg.admissions.as_ref().and_then(|a| a.paired(&change));
        if intake.submit_work(Work::Watch(change)).await.is_err() {
            return; // shutting down
        }
        if let (Some(a), Some(write)) = (&cfg.admissions, admitted) {
            a.submit(write).await;
        }
    }
}

async fn watch_events(
    cfg: WatchConfig,
    client: kube::Client,
    ar: ApiResource,
    intake: Intake,
    metrics: Arc<Metrics>,
) {
    let resource = resource_name(&ar);
    let label = Metrics::cluster(&cfg.cluster);
    // Without Events a failed rollout's reasons are missing: said louder.
    let mut watch =
        ResourceWatch::new(client, &ar, &cfg.cluster, &resource, &metrics).refusals_warned();
    while let Some((kind, obj)) = watch.next().await {
        // An Event deleted (expired) changes nothing already shown.
        let listed = match kind {
            WatchKind::Listed => true,
            WatchKind::Added | WatchKind::Modified => false,
            WatchKind::Deleted => continue,
        };
        let Some(own) = object_ref(&cfg.cluster, &ar, &obj) else {
            continue;
        };
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let Some(event) = event_of(&obj) else {
            continue;
        };
        metrics.watch_changes.get_or_create(&label).inc();
        let now = SystemTime::now();
        let at = precise_occurrence(event.occurred, now);
        if listed && now.duration_since(at).unwrap_or_default() > cfg.event_max_age {
            metrics
                .events_filtered
                .get_or_create(&Metrics::filtered(FilterReason::EventTooOld))
                .inc();
            continue;
        }
        let work = Work::Event {
            own,
            uid,
            event: Box::new(event),
            at,
        };
        if intake.submit_work(work).await.is_err() {
            return;
        }
    }
}

/// A watched Event as processing reads it; `None` when it is not one.
fn event_of(obj: &RawObject) -> Option<K8sEvent> {
    // Events nest a few levels; bounded all the same before the recursive
    // parse.
    let text = crate::json::depth::cap(obj.text.get(), crate::json::depth::MAX_OBJECT_DEPTH, 0);
    K8sEvent::from_object(&serde_json::from_str(&text.text).unwrap_or_default())
}

/// The list-watch's decoding without an apiserver, for the fuzz targets
/// (fuzz/); built only by `cargo fuzz` (`--cfg fuzzing`).
#[cfg(fuzzing)]
pub(crate) mod fuzzing {
    use super::*;

    /// One line of a watch stream or one list page, decoded as kube's client
    /// decodes them (`WatchEvent` or `ObjectList` of [`RawObject`]), and each
    /// object then read as the watchers read it, as a Deployment and as an
    /// Event: its reference, its state with what nests too deep marked, and
    /// the Event. The objects read and the markers in their states.
    pub fn decode(data: &[u8]) -> (usize, u32) {
        let objects: Vec<RawObject> =
            match serde_json::from_slice::<kube::core::WatchEvent<RawObject>>(data) {
                Ok(
                    kube::core::WatchEvent::Added(o)
                    | kube::core::WatchEvent::Modified(o)
                    | kube::core::WatchEvent::Deleted(o),
                ) => vec![o],
                Ok(_) => Vec::new(),
                Err(_) => serde_json::from_slice::<kube::core::ObjectList<RawObject>>(data)
                    .map(|l| l.items)
                    .unwrap_or_default(),
            };
        let types = [
            ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment"),
                "deployments",
            ),
            ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("", "v1", "Event"),
                "events",
            ),
        ];
        let mut markers = 0;
        for obj in &objects {
            for ar in &types {
                let _ = object_ref("fuzz", ar, obj);
                markers = to_value(ar, obj).1;
            }
            let _ = event_of(obj);
        }
        (objects.len(), markers)
    }
}

#[cfg(test)]
mod tests;
