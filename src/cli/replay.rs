//! Flags of `kascade replay`.

use std::path::PathBuf;

use clap::Args;

use super::{ExportArgs, PipelineArgs};
use crate::app::ReplayConfig;
use crate::app::replay::DEFAULT_CLUSTER;

#[derive(Args, Debug)]
// The pipeline's flags are `collect`'s too; what a full queue does is not.
#[command(
    mut_arg("queue_size", |a| a.help(
        "Audit events read ahead of processing; a full queue pauses reading"
    )),
    mut_arg("redaction_key_file", |a| a.help(
        "File holding a secret key (at least 16 bytes) for the redaction markers, so that replays and collectors sharing it show one value with one marker; default: a random key per run"
    )),
)]
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
    /// How long the OTLP receiver (--output otlp) may be unreachable: before reading, tried with growing pauses, then replay fails naming the address; lost midway, a batch is retried this long (at most --export-retry-for), then replay stops reading and fails, counting the spans not exported.
    #[arg(long, default_value_t = ReplayConfig::default().otlp_wait.into(), env = "KASCADE_OTLP_WAIT")]
    pub otlp_wait: humantime::Duration,
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
            otlp_wait: a.otlp_wait.into(),
            pipeline: a.pipeline.into(),
            export: (*a.export).into(),
        }
    }
}
