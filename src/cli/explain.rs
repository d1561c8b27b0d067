//! Flags of `kascade explain`.

use std::path::PathBuf;
use std::time::SystemTime;

use clap::Args;

use crate::analysis::explain::{ObjectFilter, Scope, parse_selector};
use crate::app::explain::{ExplainConfig, ExplainFormat, FailOn};

super::value_enum_by_name!(ExplainFormat);
super::value_enum_by_name!(FailOn);

fn explain() -> ExplainConfig {
    ExplainConfig::default()
}

pub(super) fn parse_time(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("{s:?}: {e} (expected RFC 3339, e.g. 2026-11-23T10:00:00Z)"))
}

fn parse_output(s: &str) -> Result<(ExplainFormat, PathBuf), String> {
    let (format, path) = s
        .split_once('=')
        .filter(|(_, p)| !p.is_empty())
        .ok_or_else(|| format!("{s:?}: expected FORMAT=PATH, e.g. html=report.html"))?;
    Ok((format.parse()?, PathBuf::from(path)))
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Audit log files (JSON lines, `.gz` too), as for `kascade trace`; rotated logs in any order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Event list (`kubectl get events -A -o json`, or one Event per line), when the audit log lacks them.
    #[arg(long, value_name = "FILE")]
    pub events: Vec<PathBuf>,
    /// kube-apiserver's own traces of the requests (OTLP/JSON, one TracesData per line: the
    /// OpenTelemetry Collector's file exporter, or Jaeger's /api/v3/traces answers), repeatable:
    /// a slow write names the part that took its time, a webhook that failed open is a finding.
    #[arg(long, value_name = "FILE")]
    pub component_traces: Vec<PathBuf>,
    /// Captured watch stream (`{"type":…,"object":…}` per line), for states the audit log lacks.
    #[arg(long, value_name = "FILE")]
    pub watch: Vec<PathBuf>,
    /// Only this namespace (and what its objects use: nodes, volumes).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Only objects with these labels and what they own (`app=web,tier!=db`).
    #[arg(long, short = 'l', value_parser = |s: &str| parse_selector(s).map(|sel| (s.to_string(), sel)))]
    pub selector: Option<(String, crate::aggregate::rules::LabelSelector)>,
    /// Only this object and what it owns: RESOURCE/NAME (`deploy/web`, `deployments.apps/web`; with --namespace), the resource as `trace --resource` takes it.
    #[arg(long, value_name = "RESOURCE/NAME")]
    pub object: Option<ObjectFilter>,
    /// Leave out what happened before this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub from: Option<SystemTime>,
    /// Leave out what happened after this time (RFC 3339); the state then counts as the end.
    #[arg(long, value_parser = parse_time)]
    pub to: Option<SystemTime>,
    /// What to print on stdout: `text` (coloured on a terminal; NO_COLOR respected), `markdown`, `json`, `html`.
    #[arg(long, value_enum, default_value_t = explain().format)]
    pub format: ExplainFormat,
    /// Also write the report as FORMAT to PATH (repeatable): `--output html=report.html`.
    #[arg(long, value_name = "FORMAT=PATH", value_parser = parse_output)]
    pub output: Vec<(ExplainFormat, PathBuf)>,
    /// Exit with code 3 when a finding of at least this severity exists.
    #[arg(long, value_enum, default_value_t = explain().fail_on)]
    pub fail_on: FailOn,
    /// Cluster name given to the audit log's objects.
    #[arg(long, default_value_t = explain().cluster, env = "KASCADE_CLUSTER")]
    pub cluster: String,
    #[command(flatten)]
    pub rules: super::RulesArgs,
    /// File holding the secret key of the redaction markers (as `collect --redaction-key-file`): a value gets the marker the collector sharing that key gave it; default: a random key.
    #[arg(long, env = "KASCADE_REDACTION_KEY_FILE")]
    pub redaction_key_file: Option<PathBuf>,
}

impl From<ExplainArgs> for ExplainConfig {
    fn from(a: ExplainArgs) -> Self {
        ExplainConfig {
            files: a.files,
            events: a.events,
            component_traces: a.component_traces,
            watch: a.watch,
            cluster: a.cluster,
            rules: a.rules.into(),
            redaction_key_file: a.redaction_key_file,
            scope: Scope {
                namespace: a.namespace,
                selector: a.selector,
                object: a.object,
                from: a.from,
                to: a.to,
            },
            format: a.format,
            outputs: a.output,
            fail_on: a.fail_on,
            ..ExplainConfig::default()
        }
    }
}
