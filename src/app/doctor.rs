//! `kascade doctor`: gathers (crate::doctor::probe), judges
//! (crate::doctor::checks) and prints (crate::doctor::report).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::doctor::{checks, probe, report};

/// Exit code when a check failed (as `explain --fail-on` with findings).
pub const BROKEN_EXIT_CODE: u8 = 3;

/// How `kascade doctor` writes its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoctorFormat {
    /// One line per check, for a terminal.
    Text,
    /// The checks and what they gathered, as one JSON document.
    Json,
}

/// What `kascade doctor` probes and how it reports.
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// The collector's admin address, whose `/intake` tells what arrived.
    pub admin_url: String,
    /// Empty: the collector's `--cluster`.
    pub cluster: String,
    /// Kubeconfig of the identity the collector list-watches with: its
    /// list/watch permissions and the apiserver's clock are checked through
    /// it; `None`: not checked.
    pub kubeconfig: Option<PathBuf>,
    /// The frontend's HTTP address: checks that it reaches its raw store.
    pub frontend_url: Option<String>,
    /// Resources the collector's watch leaves out (as `--watch-exclude`).
    pub watch_exclude: Vec<String>,
    /// How the report is written.
    pub format: DoctorFormat,
    /// Largest clock difference between apiserver and collector judged
    /// harmless.
    pub max_clock_skew: Duration,
    /// Longest any one probe may take.
    pub timeout: Duration,
    /// Also write what was gathered here (JSON, no credentials).
    pub save_inputs: Option<PathBuf>,
}

impl Default for DoctorConfig {
    fn default() -> Self {
        DoctorConfig {
            admin_url: "http://127.0.0.1:8091".to_string(),
            cluster: String::new(),
            kubeconfig: None,
            frontend_url: None,
            watch_exclude: crate::source::watch::DEFAULT_WATCH_EXCLUDE
                .iter()
                .map(|s| s.to_string())
                .collect(),
            format: DoctorFormat::Text,
            max_clock_skew: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
            save_inputs: None,
        }
    }
}

/// Runs the checks and prints them; `Ok(true)` when something is broken.
pub async fn run(config: DoctorConfig) -> anyhow::Result<bool> {
    if let Some(path) = &config.kubeconfig {
        crate::source::watch::check_kubeconfig("(doctor)", path).map_err(|e| {
            anyhow::anyhow!(
                "--kubeconfig {}: {}",
                path.display(),
                crate::messages::error_chain(&e)
            )
        })?;
    }
    let admin_url = config.admin_url.trim_end_matches('/').to_string();
    reqwest::Url::parse(&admin_url).with_context(|| {
        format!(
            "--admin {}: not a URL (e.g. http://127.0.0.1:8091)",
            crate::messages::quote(&admin_url)
        )
    })?;
    if let Some(f) = &config.frontend_url {
        reqwest::Url::parse(f).with_context(|| {
            format!(
                "--frontend {}: not a URL (e.g. http://127.0.0.1:8094)",
                crate::messages::quote(f)
            )
        })?;
    }
    let targets = probe::Targets {
        admin_url,
        cluster: config.cluster.clone(),
        kubeconfig: config.kubeconfig.clone(),
        frontend_url: config.frontend_url.clone(),
        watch_exclude: config.watch_exclude.iter().cloned().collect::<HashSet<_>>(),
        timeout: config.timeout,
    };
    let inputs = probe::gather(&targets).await?;
    if let Some(path) = &config.save_inputs {
        let text = serde_json::to_string_pretty(&inputs).expect("inputs serialize") + "\n";
        std::fs::write(path, text)
            .with_context(|| format!("cannot write --save-inputs {}", path.display()))?;
    }
    let max_skew_ms = i64::try_from(config.max_clock_skew.as_millis()).unwrap_or(i64::MAX);
    let found = checks::judge(&inputs, max_skew_ms);
    let cluster = checks::judged_cluster(&inputs);
    let out = match config.format {
        DoctorFormat::Text => report::text(&cluster, &inputs.admin_url, &found),
        DoctorFormat::Json => report::json(&cluster, &found),
    };
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e).context("cannot write the report");
    }
    Ok(checks::broken(&found))
}
