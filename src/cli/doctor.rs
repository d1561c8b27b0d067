//! Flags of `kascade doctor`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::app::doctor::{DoctorConfig, DoctorFormat};

fn defaults() -> DoctorConfig {
    DoctorConfig::default()
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DoctorFormatArg {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The collector's admin listener (`kascade collect --admin-listen`), whose GET /intake tells what arrived.
    #[arg(long, value_name = "URL", default_value_t = defaults().admin_url, env = "KASCADE_DOCTOR_ADMIN")]
    pub admin: String,
    /// The cluster to check, as the webhook path names it (/audit/NAME); default: the collector's --cluster.
    #[arg(long, env = "KASCADE_DOCTOR_CLUSTER")]
    pub cluster: Option<String>,
    /// Kubeconfig of the identity the collector list-watches the cluster with (its --watch-cluster NAME=KUBECONFIG): list/watch permissions and the apiserver's clock are checked through it.
    #[arg(long, env = "KASCADE_DOCTOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The frontend's HTTP address (`kascade frontend --http-listen`): checks that it reaches its raw store.
    #[arg(long, value_name = "URL", env = "KASCADE_DOCTOR_FRONTEND")]
    pub frontend: Option<String>,
    /// Resources the collector's watch leaves out, as its --watch-exclude (not checked for permissions).
    #[arg(long, value_delimiter = ',', default_values_t = defaults().watch_exclude, env = "KASCADE_WATCH_EXCLUDE")]
    pub watch_exclude: Vec<String>,
    /// Largest clock difference between apiserver and collector judged harmless.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s", env = "KASCADE_DOCTOR_MAX_CLOCK_SKEW")]
    pub max_clock_skew: Duration,
    /// How long each request may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s", env = "KASCADE_DOCTOR_TIMEOUT")]
    pub timeout: Duration,
    /// Output: `text` (each problem with its fix) or `json` (docs/doctor.md).
    #[arg(long, value_enum, default_value = "text")]
    pub format: DoctorFormatArg,
    /// Also write what was gathered to FILE as JSON (no credentials), e.g. for a bug report.
    #[arg(long, value_name = "FILE")]
    pub save_inputs: Option<PathBuf>,
}

impl From<DoctorArgs> for DoctorConfig {
    fn from(a: DoctorArgs) -> Self {
        DoctorConfig {
            admin_url: a.admin,
            cluster: a.cluster.unwrap_or_default(),
            kubeconfig: a.kubeconfig,
            frontend_url: a.frontend,
            watch_exclude: a.watch_exclude,
            format: match a.format {
                DoctorFormatArg::Text => DoctorFormat::Text,
                DoctorFormatArg::Json => DoctorFormat::Json,
            },
            max_clock_skew: a.max_clock_skew,
            timeout: a.timeout,
            save_inputs: a.save_inputs,
        }
    }
}
