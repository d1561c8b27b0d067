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

use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value};
use futures::StreamExt;
use kube::api::{Api, ApiResource, ObjectMeta};
use kube::discovery::{Discovery, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::model::ObjectRef;
use crate::pipeline::{
    FilterReason, Intake, K8sEvent, WatchChange, WatchKind, Work, precise_occurrence,
};

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

/// RBAC refuses this resource (for now: see [`Refusal`]).
fn is_forbidden(e: &watcher::Error) -> bool {
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
struct Refusal<'a> {
    cluster: &'a str,
    resource: &'a str,
    gauge: prometheus_client::metrics::gauge::Gauge,
    refused: bool,
    wait: Duration,
    /// Say the refusal as a warning, not as information.
    warn: bool,
}

impl<'a> Refusal<'a> {
    fn new(cluster: &'a str, resource: &'a str, metrics: &Metrics) -> Self {
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
    async fn refused(&mut self) {
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
    fn allowed(&mut self) {
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
                    tracing::warn!(cluster = %cfg.cluster, error = %crate::bounds::error_chain(&e), "cannot start watching; retrying")
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

fn object_ref(cluster: &str, ar: &ApiResource, obj: &RawObject) -> Option<ObjectRef> {
    Some(ObjectRef::new(
        cluster,
        ar.group.clone(),
        ar.plural.clone(),
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone()?,
    ))
}

/// An object as the apiserver listed or watched it: its JSON text kept as
/// sent, and the few `metadata` fields the watcher reads. serde_json, which
/// kube-rs decodes every list and watch event with, refuses a value nested
/// deeper than 128 levels (and the apiserver accepts 10,000): decoded into
/// an object model, such an object failed its whole list page, which was
/// asked again with backoff for ever, or, in a watch event, was lost. Kept
/// as text, it is skipped by a loop (no recursion), and bounded as an audit
/// event's objects are ([`depth::cap`]) when it is read.
#[derive(Clone, Debug)]
pub(crate) struct RawObject {
    metadata: ObjectMeta,
    text: Box<serde_json::value::RawValue>,
}

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// `metadata`'s fields the watcher reads (`managedFields`, which
        /// nest as deep as the object, are skipped unread).
        #[derive(serde::Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: Meta,
        }
        let text = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let head: Head = serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?;
        let Meta {
            name,
            namespace,
            uid,
            resource_version,
        } = head.metadata;
        Ok(RawObject {
            metadata: ObjectMeta {
                name,
                namespace,
                uid,
                resource_version,
                ..ObjectMeta::default()
            },
            text,
        })
    }
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The object as processing reads it: without `metadata.managedFields`,
/// every value nested deeper than [`depth::MAX_OBJECT_DEPTH`] a marker (as
/// in an audit event's objects), with its type when a list left it out;
/// and how many markers it holds.
fn to_value(ar: &ApiResource, obj: &RawObject) -> (Value, u32) {
    use crate::json::depth;
    let capped = depth::cap(obj.text.get(), depth::MAX_OBJECT_DEPTH, 0);
    let text = crate::pipeline::object_text(&capped.text);
    let markers = match (&text, capped.markers) {
        (_, 0) | (None, _) => 0,
        (Some(text), _) => depth::markers_in(text.get()),
    };
    let mut v = text.and_then(|t| t.parse().ok()).unwrap_or_default();
    // Items of a list carry no type; diffs and relations want it.
    let missing = |v: &Value, key| v.is_object() && v.get(key).is_none();
    let (api_version, kind) = (missing(&v, "apiVersion"), missing(&v, "kind"));
    if let Some(m) = v.as_object_mut().filter(|_| api_version || kind) {
        if api_version {
            m.insert(&"apiVersion", ar.api_version.as_str());
        }
        if kind {
            m.insert(&"kind", ar.kind.as_str());
        }
    }
    (v, markers)
}

/// Counts and says the values of a watched object left out as nested too
/// deep to read, as the audit path does for a write's objects.
fn note_deep_values(
    object: &ObjectRef,
    resource_version: Option<&str>,
    values: u32,
    metrics: &Metrics,
) {
    if values == 0 {
        return;
    }
    metrics
        .deep_values
        .get_or_create(&Metrics::cluster(&object.cluster))
        .inc_by(u64::from(values));
    tracing::warn!(
        cluster = %object.cluster,
        object = %object,
        resource_version = resource_version.unwrap_or_default(),
        values,
        "values nested deeper than {} levels of a watched object are shown as a marker (\"{}…\")",
        crate::json::depth::MAX_OBJECT_DEPTH,
        crate::json::depth::MARKER_PREFIX,
    );
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
                    continue;
                }
                Err(e) if is_forbidden(&e) => {
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
    let mut watch = ResourceWatch::new(client, &ar, &cfg.cluster, &resource, &metrics);
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
        if intake.submit_work(Work::Watch(change)).await.is_err() {
            return; // shutting down
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
mod tests {
    use super::*;
    use axum::http::{Request, Response};

    /// The custom resource `e2e/scenarios/deep.sh` writes (its `spec.tree`
    /// nests 9,000 levels, under the apiserver's 10,000), as the apiserver
    /// serves it: with the metadata it adds.
    fn deep_thing(resource_version: u32) -> String {
        let depth = 9000;
        format!(
            r#"{{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThing","metadata":{{"name":"deep","namespace":"deep-demo","uid":"5d6f0c1e-9d47-4bd4-a3a5-7f1d8b8f1c2e","resourceVersion":"{resource_version}","generation":1}},"spec":{{"tree":{}1{}}}}}"#,
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        )
    }

    /// An apiserver serving the list (the deep object beside a plain one),
    /// then one watch event modifying the deep object, then empty watches.
    fn client() -> kube::Client {
        let watched = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let watched = watched.clone();
            async move {
                let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                let body = if !watch {
                    let plain = r#"{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThing","metadata":{"name":"plain","namespace":"deep-demo","uid":"0b7a3c55-4f0e-4a57-9bd8-e0b0c4b5d1a2","resourceVersion":"99"},"spec":{"tree":1}}"#;
                    format!(
                        r#"{{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThingList","metadata":{{"resourceVersion":"100"}},"items":[{plain},{}]}}"#,
                        deep_thing(100)
                    )
                } else if !watched.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", deep_thing(101))
                } else {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    String::new()
                };
                Ok::<_, std::convert::Infallible>(Response::new(kube::client::Body::from(
                    body.into_bytes(),
                )))
            }
        });
        kube::Client::new(service, "default")
    }

    /// A listed or watched object nested deeper than serde_json's 128
    /// levels reaches processing, its deep part a marker counted as the
    /// audit path counts it; the watch goes on with no error.
    #[tokio::test]
    async fn an_object_nested_deeper_than_serde_json_reads_is_watched_with_a_marker() {
        let ar = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("e2e.kascade.io", "v1", "DeepThing"),
            "deepthings",
        );
        let metrics = Arc::new(Metrics::default());
        let (intake, mut rx) = Intake::new(16, metrics.queue_depth.clone());
        let cfg = WatchConfig {
            cluster: "c1".into(),
            kubeconfig: PathBuf::new(),
            include: HashSet::new(),
            exclude: HashSet::new(),
            event_max_age: Duration::from_secs(3600),
            watch_events: false,
        };
        let task = tokio::spawn(watch_objects(cfg, client(), ar, intake, metrics.clone()));
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let work = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "only {seen:?} reached processing; watch errors: {}",
                        metrics
                            .watch_errors
                            .get_or_create(&Metrics::cluster("c1"))
                            .get()
                    )
                })
                .expect("the watch goes on");
            let Work::Watch(change) = work else {
                continue;
            };
            let text = crate::json::to_text(&change.state);
            let name = change.object.name.clone();
            if name == "deep" {
                assert!(
                    text.contains(r#""<nested deeper than 64 levels: "#),
                    "{}",
                    &text[..text.len().min(300)]
                );
                assert!(text.contains(r#""kind":"DeepThing""#));
            }
            seen.push((name, change.kind));
        }
        task.abort();
        assert_eq!(
            seen,
            vec![
                ("plain".to_string(), WatchKind::Listed),
                ("deep".to_string(), WatchKind::Listed),
                ("deep".to_string(), WatchKind::Modified),
            ]
        );
        let label = Metrics::cluster("c1");
        assert_eq!(metrics.deep_values.get_or_create(&label).get(), 2);
        assert_eq!(metrics.watch_errors.get_or_create(&label).get(), 0);
    }
}
