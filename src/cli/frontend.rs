//! Flags of `kascade frontend`, and the assembly flags it shares with `trace`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use humantime::Duration;

use crate::app::{AssemblyConfig, FrontendServerConfig};
use crate::frontend::assemble::Scope;

super::value_enum_by_name!(Scope);

fn assembly() -> AssemblyConfig {
    AssemblyConfig::default()
}

/// How linked objects are followed and shown (shared by `frontend` and
/// `trace`; the window, the default scope and the raw reads are each
/// subcommand's own flags).
#[derive(Args, Debug, Clone)]
pub struct AssemblyArgs {
    /// Levels of links followed up and down from the searched object.
    #[arg(long, default_value_t = assembly().max_depth, env = "KASCADE_MAX_DEPTH")]
    pub max_depth: usize,
    /// Objects in one assembled trace; further links are noted (the UI shows the notes on the root span).
    #[arg(long, default_value_t = assembly().max_objects, env = "KASCADE_MAX_OBJECTS")]
    pub max_objects: usize,
    /// Bytes of object histories one assembly loads (a Pod's are about 40 KB); further links are noted (the UI shows the notes on the root span). The searched object and its owners are loaded whatever it says, so it must be at least 1.
    #[arg(
        long,
        default_value_t = assembly().max_trace_bytes,
        value_parser = clap::value_parser!(u64).range(1..),
        env = "KASCADE_MAX_TRACE_BYTES"
    )]
    pub max_trace_bytes: u64,
    /// Link classes whose targets are shared by many objects: shown below, never climbed from (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = assembly().shared_classes,
        env = "KASCADE_SHARED_CLASSES"
    )]
    pub shared_classes: Vec<String>,
    /// Link classes whose objects are grouped under a virtual span named by the class (comma-separated).
    #[arg(long, value_delimiter = ',', env = "KASCADE_GROUP_CLASSES")]
    pub group_classes: Vec<String>,
    /// Objects of one resource and link class shown under one object (a ReplicaSet's Pods), and in mode cascade writes of one verb and resource caused by one write; beyond it the failed, the slowest to get ready and the longest-lived (latest to settle) are shown and one span (one line in text) summarises the rest. 0 shows all.
    #[arg(long, default_value_t = assembly().max_siblings, env = "KASCADE_MAX_SIBLINGS")]
    pub max_siblings: usize,
}

impl AssemblyArgs {
    /// The assembly settings: these flags over `base` (the subcommand's
    /// window, default scope and raw reads).
    pub(crate) fn over(self, base: AssemblyConfig) -> AssemblyConfig {
        AssemblyConfig {
            max_depth: self.max_depth,
            max_objects: self.max_objects,
            max_trace_bytes: self.max_trace_bytes,
            shared_classes: self.shared_classes,
            group_classes: self.group_classes,
            max_siblings: self.max_siblings,
            ..base
        }
    }
}

fn frontend() -> FrontendServerConfig {
    FrontendServerConfig::default()
}

#[derive(Args, Debug)]
// The UI's search tag is the frontend's only.
#[command(mut_arg("max_siblings", |a| a.help(
    "Objects of one resource and link class shown under one object (a ReplicaSet's Pods), and in mode cascade writes of one verb and resource caused by one write; beyond it the failed, the slowest to get ready and the longest-lived (latest to settle) are shown and one span summarises the rest, which the search tag siblings=all shows. 0 shows all"
)))]
pub struct FrontendArgs {
    /// Address of the Jaeger remote storage API v2 (gRPC) that Jaeger query uses.
    #[arg(long, default_value_t = frontend().grpc_listen, env = "KASCADE_GRPC_LISTEN")]
    pub grpc_listen: SocketAddr,
    /// Address of /redirect, /healthz and /readyz.
    #[arg(long, default_value_t = frontend().http_listen, env = "KASCADE_HTTP_LISTEN")]
    pub http_listen: SocketAddr,
    /// Query URL of the Jaeger that stores the collector's raw spans.
    #[arg(long, default_value_t = frontend().jaeger_url, env = "KASCADE_JAEGER_URL")]
    pub jaeger_url: String,
    /// Remote-storage gRPC endpoint of that Jaeger (its `remote_storage`
    /// extension, e.g. http://jaeger-raw:17271): raw traces are then read
    /// many per request instead of one HTTP GET each from --jaeger-url.
    #[arg(long, env = "KASCADE_JAEGER_GRPC_URL")]
    pub jaeger_grpc_url: Option<String>,
    /// CA certificates (PEM) trusted for an https:// --jaeger-url or --jaeger-grpc-url instead of the system's.
    #[arg(long, env = "KASCADE_JAEGER_CA_FILE")]
    pub jaeger_ca_file: Option<PathBuf>,
    /// Service name of the raw spans (the collector's --service-name).
    #[arg(long, default_value_t = frontend().raw_service, env = "KASCADE_RAW_SERVICE")]
    pub raw_service: String,
    /// Timeout of one raw read.
    #[arg(long, default_value_t = frontend().raw_timeout.into(), env = "KASCADE_RAW_TIMEOUT")]
    pub raw_timeout: Duration,
    /// Raw object windows per search. A change's (cpid=) windows are
    /// searched past it by splitting the time range, up to --max-objects.
    #[arg(long, default_value_t = frontend().raw_search_limit, env = "KASCADE_RAW_SEARCH_LIMIT")]
    pub raw_search_limit: usize,
    /// Service name of kube-apiserver's own traces in the raw store (sent to `kascade collect
    /// --component-traces-listen`): each write shown gets its request's spans, joined by audit ID.
    /// Empty: no join.
    #[arg(long, default_value_t = frontend().component_service, env = "KASCADE_COMPONENT_SERVICE")]
    pub component_service: String,
    /// Service name of the kubelets' own traces in the raw store (sent to `kascade collect
    /// --component-traces-listen`): each Pod shown gets its pod syncs, joined by the Pod's uid.
    /// Empty: no join.
    #[arg(long, default_value_t = frontend().kubelet_service, env = "KASCADE_KUBELET_SERVICE")]
    pub kubelet_service: String,
    /// Public URL of the Jaeger UI backed by this frontend (target of /redirect).
    #[arg(long, default_value_t = frontend().ui_url, env = "KASCADE_UI_URL")]
    pub ui_url: String,
    /// Cluster assumed by /redirect links that name none.
    #[arg(long, default_value_t = frontend().default_cluster, env = "KASCADE_DEFAULT_CLUSTER")]
    pub default_cluster: String,
    /// Clusters listed as operations before a search has seen them (comma-separated).
    #[arg(long, value_delimiter = ',', env = "KASCADE_CLUSTERS")]
    pub clusters: Vec<String>,
    /// How long an assembled trace stays cached for reloads.
    #[arg(long, default_value_t = frontend().cache_ttl.into(), env = "KASCADE_CACHE_TTL")]
    pub cache_ttl: Duration,
    /// Bytes of assembled traces kept in the cache (the server keeps a
    /// trace's encoded answer only: about 20 MB for a 1,000-Pod Deployment;
    /// a trace larger than this is answered, not kept; 0 keeps none).
    #[arg(long, default_value_t = frontend().cache_bytes, env = "KASCADE_CACHE_BYTES")]
    pub cache_bytes: u64,
    /// Longest the assembly of one trace (its raw reads included) may take
    /// before the request fails with DeadlineExceeded.
    #[arg(long, default_value_t = frontend().assembly_timeout.into(), env = "KASCADE_ASSEMBLY_TIMEOUT")]
    pub assembly_timeout: Duration,
    /// Traces assembled at once (requests for one trace share its assembly); further ones wait, within --assembly-timeout.
    #[arg(
        long,
        default_value_t = frontend().max_assemblies,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..),
        env = "KASCADE_MAX_ASSEMBLIES"
    )]
    pub max_assemblies: usize,
    /// Searches reading the raw Jaeger at once; further ones queue up to --search-wait, then fail
    /// saying the frontend is busy. The same search in flight (same tags, a time range equal to the
    /// second, as the UI's lookback searches of many users are) shares one read.
    #[arg(
        long,
        default_value_t = frontend().max_searches,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..),
        env = "KASCADE_MAX_SEARCHES"
    )]
    pub max_searches: usize,
    /// Longest a search waits for one of --max-searches.
    #[arg(long, default_value_t = frontend().search_wait.into(), env = "KASCADE_SEARCH_WAIT")]
    pub search_wait: Duration,
    /// Bytes one search's answer may stream; it stops before a trace that would pass them,
    /// with a message saying so.
    #[arg(long, default_value_t = frontend().max_search_bytes, env = "KASCADE_MAX_SEARCH_BYTES")]
    pub max_search_bytes: u64,
    /// Window width the collector uses (its --window); whole minutes.
    #[arg(long, default_value_t = assembly().window.into(), env = "KASCADE_WINDOW")]
    pub window: Duration,
    /// Scope when the search does not name one.
    #[arg(long, value_enum, default_value_t = assembly().default_scope, env = "KASCADE_DEFAULT_SCOPE")]
    pub default_scope: Scope,
    /// Raw reads in flight at once.
    #[arg(long, default_value_t = assembly().concurrency, env = "KASCADE_CONCURRENCY")]
    pub concurrency: usize,
    #[command(flatten)]
    pub assembly: AssemblyArgs,
}

impl From<FrontendArgs> for FrontendServerConfig {
    fn from(a: FrontendArgs) -> Self {
        FrontendServerConfig {
            grpc_listen: a.grpc_listen,
            http_listen: a.http_listen,
            jaeger_url: a.jaeger_url,
            jaeger_grpc_url: a.jaeger_grpc_url,
            jaeger_ca_file: a.jaeger_ca_file,
            raw_service: a.raw_service,
            raw_timeout: a.raw_timeout.into(),
            raw_search_limit: a.raw_search_limit,
            component_service: a.component_service,
            kubelet_service: a.kubelet_service,
            ui_url: a.ui_url,
            default_cluster: a.default_cluster,
            clusters: a.clusters,
            cache_ttl: a.cache_ttl.into(),
            cache_bytes: a.cache_bytes,
            assembly_timeout: a.assembly_timeout.into(),
            max_assemblies: a.max_assemblies,
            max_searches: a.max_searches,
            search_wait: a.search_wait.into(),
            max_search_bytes: a.max_search_bytes,
            assembly: a.assembly.over(AssemblyConfig {
                window: a.window.into(),
                default_scope: a.default_scope,
                concurrency: a.concurrency,
                ..AssemblyConfig::default()
            }),
        }
    }
}
