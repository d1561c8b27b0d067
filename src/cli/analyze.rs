//! Flags of `kascade analyze`.

use std::path::PathBuf;
use std::time::SystemTime;

use clap::Args;

use crate::analysis::foreground::ForegroundScope;
use crate::app::analyze::{AnalyzeConfig, AnalyzeFormat};

super::value_enum_by_name!(AnalyzeFormat);

fn analyze() -> AnalyzeConfig {
    AnalyzeConfig::default()
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Audit log files (JSON lines), as for `kascade trace`.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Cluster name given to the audit log's objects.
    #[arg(long, default_value_t = analyze().cluster, env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// `text` (a table and histogram bars), `json` or `csv`.
    #[arg(long, value_enum, default_value_t = analyze().format)]
    pub format: AnalyzeFormat,
    /// Write a PNG and an SVG histogram per edge class (and per completion class) into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub rules: super::RulesArgs,
    /// Only this namespace's objects (and the cluster-scoped ones its cascades write).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Only this object's cascades: RESOURCE/NAME (`deploy/web`, `deployments.apps/web`; with --namespace): its own changes and, from each, the rest of the cascade that made it.
    #[arg(long, value_name = "RESOURCE/NAME")]
    pub object: Option<crate::resources::ObjectArg>,
    /// Only the cascades of objects with these labels (`app=web,tier!=db`, as kubectl takes them): their own changes and, from each, the rest of the cascade that made it.
    #[arg(long, short = 'l', value_parser = |s: &str| crate::analysis::explain::parse_selector(s).map(|sel| (s.to_string(), sel)))]
    pub selector: Option<(String, crate::aggregate::rules::LabelSelector)>,
    /// Leave out what was requested before this time (RFC 3339).
    #[arg(long, value_parser = super::explain::parse_time)]
    pub from: Option<SystemTime>,
    /// Leave out what was requested after this time (RFC 3339).
    #[arg(long, value_parser = super::explain::parse_time)]
    pub to: Option<SystemTime>,
    /// Count the cascades the cluster started before any user's (its start-up), left out by default.
    #[arg(long)]
    pub with_background: bool,
}

impl From<AnalyzeArgs> for AnalyzeConfig {
    fn from(a: AnalyzeArgs) -> Self {
        AnalyzeConfig {
            files: a.files,
            cluster: a.cluster,
            format: a.format,
            plot: a.plot,
            rules: a.rules.into(),
            scope: ForegroundScope {
                namespace: a.namespace,
                object: a.object,
                selector: a.selector,
                from: a.from,
                to: a.to,
                with_background: a.with_background,
            },
            ..AnalyzeConfig::default()
        }
    }
}
