//! `kascade replay`: audit log files through the pipeline, then flush and exit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::{Pipeline, PipelineConfig};
use crate::export::{self, config::ExportSettings};
use crate::metrics::Metrics;
use crate::source::{replay, validate_cluster_name};

/// The files to replay and how.
///
/// ```no_run
/// use kascade::app::replay::{self, ReplayConfig};
/// use kascade::app::OutputSpec;
///
/// # async fn run() -> anyhow::Result<()> {
/// let mut config = ReplayConfig::new(["audit.log"]).cluster("ci-4711");
/// config.export = config.export.output(OutputSpec::OtlpJson("spans.jsonl".into()));
/// replay::run(config).await
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// Audit log files, one JSON event per line.
    pub files: Vec<PathBuf>,
    /// Cluster name recorded on every span.
    pub cluster: String,
    /// Fail on the first malformed line instead of reporting and skipping it.
    pub strict: bool,
    /// How long the OTLP receiver may be unreachable: before reading, and
    /// (at most `--export-retry-for`) when it is lost midway.
    pub otlp_wait: Duration,
    /// The processing pipeline: windows, redaction, rules, bounds.
    pub pipeline: PipelineConfig,
    /// Where spans go (OTLP, OTLP/JSON files) and how they are batched.
    pub export: ExportSettings,
}

/// The cluster name when none is given.
pub const DEFAULT_CLUSTER: &str = "default";

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            cluster: DEFAULT_CLUSTER.to_string(),
            strict: false,
            otlp_wait: Duration::from_secs(30),
            pipeline: PipelineConfig::default(),
            export: ExportSettings::default(),
        }
    }
}

impl ReplayConfig {
    /// Replays `files` with the default settings (cluster `default`).
    pub fn new<P: Into<PathBuf>>(files: impl IntoIterator<Item = P>) -> Self {
        Self {
            files: files.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Sets the cluster name recorded on every span.
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// Fails on the first malformed line.
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }
}

/// Replays the files, exports every span, and reports what happened on
/// stderr; an error when a file cannot be read (or, strict, has a bad line)
/// or when spans could not be exported.
pub async fn run(config: ReplayConfig) -> anyhow::Result<()> {
    validate_cluster_name(&config.cluster).map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
    let metrics = Arc::new(Metrics::default());
    let filter = config.pipeline.filter()?;

    // A file has no latency to protect: each line waits for the lines
    // logged after it, so the causes found do not depend on how fast the
    // file is read.
    let pipeline_config = PipelineConfig {
        look_ahead: crate::aggregate::LookAhead::Full,
        ..config.pipeline.clone()
    };
    // A receiver lost midway: the batch then sending is retried for
    // `otlp_wait` at most, the rest are dropped at once and reading stops
    // (below), rather than `--export-retry-for` (5 minutes) per batch.
    let export_settings = ExportSettings {
        retry_for: config.export.retry_for.min(config.otlp_wait),
        give_up_once_lost: true,
        ..config.export.clone()
    };
    let pipeline = Pipeline::start(&pipeline_config, &export_settings, metrics.clone())?;
    // Spans of a file have nowhere else to go: an absent receiver is said
    // before reading, not after each batch's retries. (Started first, the
    // pipeline has checked the exporter's settings and files.)
    if let Some(otlp) = config.export.resolve()?.otlp
        && let Err(e) =
            wait_for_receiver(&otlp.endpoint, &otlp.endpoint_source, config.otlp_wait).await
    {
        pipeline.finish().await;
        return Err(e);
    }
    let reading = async {
        if config.files.len() < 2 {
            return replay::replay_files(
                &config.files,
                &config.cluster,
                &filter,
                &pipeline.intake,
                config.strict,
                &metrics,
            )
            .await
            .map_err(anyhow::Error::from);
        }
        // Several files (rotated logs, several apiservers' logs): merged by
        // time, as the offline commands read them, so that every write is
        // processed after the changes it followed, and read by one clock.
        let bar = super::lines::progress_bar(super::lines::total_size(&config.files)?);
        let shared = Arc::new(std::sync::Mutex::new(super::lines::LinesState::default()));
        let lines = super::lines::Lines::new(config.files.clone(), bar.clone(), shared.clone())
            .correcting_clocks();
        bar.suspend(|| {
            super::lines::print_clock_notes(&shared.lock().unwrap_or_else(|e| e.into_inner()))
        });
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let reader = std::thread::spawn(move || {
            for line in lines {
                if tx.blocking_send(line).is_err() {
                    return; // replay stopped reading
                }
            }
        });
        let locate = |n| shared.lock().unwrap_or_else(|e| e.into_inner()).locate(n);
        let to = replay::ReplayInto {
            cluster: &config.cluster,
            filter: &filter,
            intake: &pipeline.intake,
            strict: config.strict,
            metrics: &metrics,
        };
        let stats = replay::replay_merged(rx, locate, bar, to).await?;
        let _ = reader.join();
        if let Some(e) = shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .io_error
            .take()
        {
            return Err(e);
        }
        Ok(stats)
    };
    let result = tokio::select! {
        result = reading => Some(result),
        () = receiver_lost(&metrics) => None,
    };
    pipeline.finish().await;
    let stopped_reading = result.is_none();
    let stats = result.transpose()?;
    let exported = export::spans_exported(&metrics);
    let dropped = export::spans_dropped(&metrics);
    if let Some(stats) = &stats
        && (dropped > 0 || !crate::terminal::quiet())
    {
        eprintln!(
            "replayed {} lines: {} events accepted, {} malformed lines skipped; {} spans exported{}",
            stats.lines,
            stats.accepted,
            stats.bad_lines,
            exported,
            if dropped > 0 {
                format!(", {dropped} DROPPED")
            } else {
                String::new()
            }
        );
    }
    if export::spans_dropped_for(&metrics, export::DropReason::RetriesExhausted) > 0 {
        let target = match export_settings.resolve()?.otlp {
            Some(otlp) => format!(
                "the OTLP receiver at {} ({})",
                otlp.endpoint, otlp.endpoint_source
            ),
            None => "the output".to_string(),
        };
        bail!(
            "{target} stopped taking spans: {dropped} spans could not be exported after {} of retries ({exported} were){}{}",
            humantime::format_duration(export_settings.retry_for),
            if stopped_reading {
                "; replay stopped reading"
            } else {
                ""
            },
            if config.export.retry_for > config.otlp_wait {
                "; --otlp-wait retries longer"
            } else {
                ""
            }
        );
    }
    if dropped > 0 {
        bail!("{dropped} spans could not be exported");
    }
    let Some(stats) = stats else {
        bail!("replay stopped reading: its output gave up on its receiver");
    };
    if let Some(e) = super::lines::no_audit_events(
        &config.files,
        stats.lines,
        stats.bad_lines,
        stats.first_bad.as_deref(),
    ) {
        return Err(e);
    }
    Ok(())
}

/// Returns once an output has given up on its receiver (a batch's retries
/// exhausted): reading on would only drop the rest
/// (`ExportSettings::give_up_once_lost`). A span dropped for another reason
/// (refused as too large) does not stop the replay.
async fn receiver_lost(metrics: &Metrics) {
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    while export::spans_dropped_for(metrics, export::DropReason::RetriesExhausted) == 0 {
        poll.tick().await;
    }
}

/// Longest pause between two attempts to reach the receiver.
const MAX_PAUSE: Duration = Duration::from_secs(8);

/// Connects to the receiver of `endpoint` (TCP) until it answers or `wait`
/// is over (one attempt at least), pausing twice as long after each
/// failure; the error names the address, where it came from and why.
async fn wait_for_receiver(endpoint: &str, source: &str, wait: Duration) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(endpoint)
        .with_context(|| format!("OTLP endpoint {endpoint:?} ({source}) is not a URL"))?;
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        bail!("OTLP endpoint {endpoint:?} ({source}) names no host and port");
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(500);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let connect = tokio::net::TcpStream::connect((host, port));
        let why = match tokio::time::timeout(left.clamp(Duration::from_secs(1), MAX_PAUSE), connect)
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer".to_string(),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            bail!(
                "cannot reach the OTLP receiver at {endpoint} ({source}): {why} ({attempts} attempts in {}); --otlp-wait waits longer, --output otlp-json=PATH writes a file instead",
                humantime::format_duration(wait)
            );
        }
        tracing::warn!(endpoint, error = %why, retry_in = ?pause.min(left), "cannot reach the OTLP receiver yet");
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
