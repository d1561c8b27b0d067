//! Flags of `kascade trace`.

use std::path::PathBuf;

use clap::Args;

use humantime::Duration;

use super::AssemblyArgs;
use crate::app::{AssemblyConfig, TraceConfig, TraceFormat};
use crate::frontend::assemble::Scope;
use crate::frontend::display::Mode;

super::value_enum_by_name!(Mode);
super::value_enum_by_name!(TraceFormat);

fn trace() -> TraceConfig {
    TraceConfig::default()
}

#[derive(Args, Debug)]
// Virtual spans exist in OTLP only: the text and JSON trees show objects.
#[command(mut_arg("group_classes", |a| a.help(
    "Link classes whose objects are grouped under a virtual span named by the class, in --format otlp-json (comma-separated)"
)))]
pub struct TraceArgs {
    /// Audit log files (JSON lines) to build the trace from.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The object: RESOURCE/NAME (`deploy/web`, `deployments.apps/web`; with --namespace), as `explain --object`.
    #[arg(long, value_name = "RESOURCE/NAME", conflicts_with_all = ["resource", "name"])]
    pub object: Option<crate::resources::ObjectArg>,
    /// Resource of the object, as kubectl takes it: plural, singular, kind or short name, optionally with its group (`deployments`, `deployment`, `Deployment`, `deploy`, `deployments.apps`); custom resources by the names the audit log gives them.
    #[arg(long, required_unless_present_any = ["cpid", "object"], requires = "name")]
    pub resource: Option<String>,
    /// Name of the object.
    #[arg(long, required_unless_present_any = ["cpid", "object"], requires = "resource")]
    pub name: Option<String>,
    /// Instead of an object: the writes of one change, by its change
    /// propagation ID (the `kascade.io/cpid` annotation), as cascades.
    #[arg(long, conflicts_with_all = ["resource", "name", "object"], value_parser = parse_cpid)]
    pub cpid: Option<kascade_cpid::Cpid>,
    /// Namespace of the object. Omitted: the one namespace holding an object of that name, as explain finds it (several: an error naming them), else cluster-scoped.
    #[arg(long, short = 'n', default_value_t = trace().namespace)]
    pub namespace: String,
    /// API group of the object (empty for the core group); default: the resource's, or any.
    #[arg(long)]
    pub group: Option<String>,
    /// Cluster name given to the audit log's objects.
    #[arg(long, default_value_t = trace().cluster, env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// Scope of the tree.
    #[arg(long, value_enum, default_value_t = trace().assembly.default_scope)]
    pub scope: Scope,
    /// `text` (a tree for the terminal), `json` (the object tree as plain JSON, see docs/trace-json.md) or `otlp-json` (the assembled trace in a display mode).
    #[arg(long, value_enum, default_value_t = trace().format)]
    pub format: TraceFormat,
    /// Display mode for --format otlp-json; text shows `tracing` (the object tree) and `cascade` (the cascades the object took part in), json `tracing` only.
    #[arg(long, value_enum, default_value_t = trace().mode)]
    pub mode: Mode,
    /// Changed paths shown per write in text output.
    #[arg(long, default_value_t = trace().max_diff_lines)]
    pub max_diff_lines: usize,
    /// Show the create/delete snapshots in text output.
    #[arg(long)]
    pub snapshots: bool,
    /// kube-apiserver's own traces of the requests (OTLP/JSON, one TracesData per line), repeatable:
    /// each traced write gets a line of its admission webhooks, conversions and etcd calls with their times.
    #[arg(long, value_name = "FILE")]
    pub component_traces: Vec<PathBuf>,
    #[command(flatten)]
    pub rules: super::RulesArgs,
    /// File holding the secret key of the redaction markers (as `collect --redaction-key-file`): a value gets the marker the collector sharing that key gave it; default: a random key.
    #[arg(long, env = "KASCADE_REDACTION_KEY_FILE")]
    pub redaction_key_file: Option<PathBuf>,
    /// Width of the time windows the object spans are built in (as the collector's --window); whole minutes.
    #[arg(long, default_value_t = trace().assembly.window.into(), env = "KASCADE_WINDOW")]
    pub window: Duration,
    #[command(flatten)]
    pub assembly: AssemblyArgs,
}

fn parse_cpid(s: &str) -> Result<kascade_cpid::Cpid, String> {
    kascade_cpid::Cpid::parse(s.trim()).map_err(|e| e.to_string())
}

impl From<TraceArgs> for TraceConfig {
    fn from(a: TraceArgs) -> Self {
        TraceConfig {
            files: a.files,
            resource: a
                .object
                .as_ref()
                .map(|o| o.resource.to_string())
                .or(a.resource)
                .unwrap_or_default(),
            name: a.object.map(|o| o.name).or(a.name).unwrap_or_default(),
            cpid: a.cpid,
            namespace: a.namespace,
            group: a.group,
            cluster: a.cluster,
            scope: Some(a.scope),
            format: a.format,
            mode: a.mode,
            max_diff_lines: a.max_diff_lines,
            snapshots: a.snapshots,
            component_traces: a.component_traces,
            rules: a.rules.into(),
            redaction_key_file: a.redaction_key_file,
            assembly: a.assembly.over(AssemblyConfig {
                window: a.window.into(),
                ..AssemblyConfig::default()
            }),
        }
    }
}
