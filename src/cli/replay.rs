//! Flags of `kascade replay`.

use std::path::PathBuf;

use clap::Args;

use super::{ExportArgs, PipelineArgs};
use crate::app::ReplayConfig;
use crate::app::replay::DEFAULT_CLUSTER;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Audit log files, one JSON event per line.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Cluster name recorded on every span.
    #[arg(long, default_value = DEFAULT_CLUSTER, env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// Fail on the first malformed line instead of reporting and skipping it.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: Box<ExportArgs>,
}

impl From<ReplayArgs> for ReplayConfig {
    fn from(a: ReplayArgs) -> Self {
        ReplayConfig {
            files: a.files,
            cluster: a.cluster,
            strict: a.strict,
            pipeline: a.pipeline.into(),
            export: (*a.export).into(),
        }
    }
}
