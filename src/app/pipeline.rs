//! The pipeline shared by `collect` and `replay`: its settings
//! ([`PipelineConfig`]) and the running pipeline ([`Pipeline`]) that turns
//! accepted audit events into exported spans.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use regex::Regex;

use crate::aggregate::redact::{DEFAULT_REDACT_PATHS, PathPattern, Redactor};
use crate::aggregate::span_cache::{LocalSpanCache, SpanCache};
use crate::aggregate::{self, Processor, ProcessorConfig};
use crate::analysis::changelog::{ChangelogWriter, DEFAULT_QUEUE as CHANGELOG_QUEUE};
use crate::export::{self, OutputSpec, config::ExportSettings};
use crate::flow::{ChangeSink, SentLinks};
use crate::metrics::Metrics;
use crate::model::Windowing;
use crate::source::audit::{AuditFilter, DEFAULT_EXCLUDED_RESOURCES, DEFAULT_VERBS};
use crate::source::spool::Spool;

/// How accepted audit events become spans: windows, rules, filters, caches
/// and workers. The defaults are those of `kascade collect`.
///
/// ```no_run
/// use std::time::Duration;
/// use kascade::app::PipelineConfig;
///
/// let config = PipelineConfig::default()
///     .window(Duration::from_secs(15 * 60))
///     .workers(4)
///     .exclude_user_agent("^kube-probe/");
/// let processor = config.processor_config()?;
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Width of the time window: each object gets one span per window.
    pub window: Duration,
    /// The relation rules: the built-in ones and a user's directory over them.
    pub rules: super::RuleSources,
    /// Audit verbs that become spans.
    pub verbs: Vec<String>,
    /// Resources ignored, as `resource` or `resource.group`.
    pub exclude_resources: Vec<String>,
    /// Events whose user agent matches this regex are ignored.
    pub exclude_user_agent: Option<String>,
    /// Values whose diff path matches this regex are redacted.
    pub redact_paths: String,
    /// A file holding the secret key of the redaction markers, shared by
    /// the processes whose markers must agree; `None`: a random key.
    pub redaction_key_file: Option<PathBuf>,
    /// Bytes of last-seen object states kept for diffs.
    pub state_cache_bytes: u64,
    /// Recently written objects whose last state is also kept parsed.
    pub state_hot_entries: usize,
    /// Object windows remembered by the span cache.
    pub span_cache_entries: u64,
    /// How long after its window ends an object window stays in the span cache.
    pub span_cache_grace: Duration,
    /// Accepted audit events that may wait for processing.
    pub queue_size: usize,
    /// Parallel workers (events of one object always go to the same worker);
    /// the number of cores by default.
    pub workers: usize,
    /// Most changed paths recorded per write.
    pub max_diff_changes: usize,
    /// Objects whose recent changes are kept as candidate causes.
    pub cascade_objects: u64,
    /// How long a change seen by a watch waits for the audit event of the
    /// same write (`collect` sets it from its watch settings).
    pub watch_audit_wait: Duration,
    /// A list-watch also feeds the pipeline.
    pub has_watch: bool,
    /// Entries of the audit/watch ledger.
    pub watch_ledger_entries: u64,
    /// What the dispatcher notes before a write is processed: what is
    /// queued (a live source), or the writes logged after it, waiting for
    /// them (`replay`, so that a file gives one answer).
    pub look_ahead: aggregate::LookAhead,
}

/// The fewest bytes a redaction key may have: a short key could be
/// guessed, and with it every weak secret behind a marker.
pub(super) const MIN_REDACTION_KEY_BYTES: usize = 16;

/// Reads a redaction key: the file's bytes without the whitespace that
/// ends it (an editor's or `echo`'s newline would otherwise make two
/// replicas' keys differ). Errors name the file, never its content.
fn read_redaction_key(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let mut key =
        std::fs::read(path).with_context(|| format!("--redaction-key-file {}", path.display()))?;
    let len = key.trim_ascii_end().len();
    key.truncate(len);
    if key.len() < MIN_REDACTION_KEY_BYTES {
        bail!(
            "--redaction-key-file {}: the key has {} bytes, at least {MIN_REDACTION_KEY_BYTES} are needed (make one with `openssl rand -hex 32 > {}`)",
            path.display(),
            key.len(),
            path.display()
        );
    }
    Ok(key)
}

/// The number of cores (2 when it cannot be known).
fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(30 * 60),
            rules: Default::default(),
            verbs: DEFAULT_VERBS.iter().map(|s| s.to_string()).collect(),
            exclude_resources: DEFAULT_EXCLUDED_RESOURCES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            exclude_user_agent: None,
            redact_paths: DEFAULT_REDACT_PATHS.to_string(),
            redaction_key_file: None,
            state_cache_bytes: 128 << 20,
            state_hot_entries: 1024,
            span_cache_entries: 500_000,
            span_cache_grace: Duration::from_secs(5 * 60),
            queue_size: 4_000,
            workers: default_workers(),
            max_diff_changes: 100,
            cascade_objects: aggregate::causes::DEFAULT_CAUSE_OBJECTS,
            watch_audit_wait: Duration::from_secs(5),
            has_watch: false,
            watch_ledger_entries: aggregate::processor::DEFAULT_LEDGER_ENTRIES,
            look_ahead: aggregate::LookAhead::Batch,
        }
    }
}

impl PipelineConfig {
    /// Parsed states the offline commands keep (`analyze`, `explain`): at
    /// ≈ 13 KB each, ≈ 100 MB, within their 1 GiB where the collector's
    /// 1,024 fit its 256 MiB. With many rollouts under way at once, each
    /// object's next write comes after thousands of other objects' writes;
    /// a state that has left the hot tier is parsed again, and the one
    /// making room serialized and compressed (≈ 14 % of `analyze`'s
    /// instructions on the bench log with overlapping copies).
    pub const OFFLINE_STATE_HOT_ENTRIES: usize = 8192;

    /// The pipeline of the offline commands: the collector's defaults with
    /// [`Self::OFFLINE_STATE_HOT_ENTRIES`].
    pub fn offline() -> Self {
        Self {
            state_hot_entries: Self::OFFLINE_STATE_HOT_ENTRIES,
            ..Self::default()
        }
    }

    /// Sets the window width.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Adds the relation rules of this directory to the built-in ones
    /// (replacing those of the same name).
    pub fn rules(mut self, dir: impl Into<PathBuf>) -> Self {
        self.rules = super::RuleSources::with_dir(dir);
        self
    }

    /// Where the relation rules come from.
    pub fn rule_sources(mut self, sources: super::RuleSources) -> Self {
        self.rules = sources;
        self
    }

    /// Ignores events whose user agent matches `regex`.
    pub fn exclude_user_agent(mut self, regex: impl Into<String>) -> Self {
        self.exclude_user_agent = Some(regex.into());
        self
    }

    /// Keys the redaction markers with the secret in this file (see
    /// [`Self::redactor`]) instead of a random key.
    pub fn redaction_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.redaction_key_file = Some(path.into());
        self
    }

    /// Sets the number of parallel workers.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets how many accepted events may wait for processing.
    pub fn queue_size(mut self, queue_size: usize) -> Self {
        self.queue_size = queue_size;
        self
    }

    /// The audit filter these settings describe.
    pub fn filter(&self) -> anyhow::Result<AuditFilter> {
        let exclude_user_agents = self
            .exclude_user_agent
            .as_deref()
            .map(Regex::new)
            .transpose()
            .context("--exclude-user-agent is not a valid regex")?;
        Ok(AuditFilter {
            verbs: self.verbs.iter().cloned().collect(),
            exclude_resources: self.exclude_resources.iter().cloned().collect(),
            exclude_user_agents,
        })
    }

    /// The processor's settings.
    pub fn processor_config(&self) -> anyhow::Result<ProcessorConfig> {
        if self.window < Duration::from_secs(1) {
            bail!("--window must be at least 1s");
        }
        Ok(ProcessorConfig {
            windowing: Windowing::new(self.window),
            state_cache_bytes: self.state_cache_bytes,
            hot_states: self.state_hot_entries,
            max_diff_changes: self.max_diff_changes,
            watch_audit_wait: self.watch_audit_wait,
            has_watch: self.has_watch,
            ledger_entries: self.watch_ledger_entries,
            cause_objects: self.cascade_objects,
            changes_only: false,
        })
    }

    /// The redactor of diff values, keyed by `redaction_key_file` when set.
    pub fn redactor(&self) -> anyhow::Result<Redactor> {
        let redact = PathPattern::new(&self.redact_paths)
            .map_err(|e| anyhow::anyhow!("--redact-paths {:?}: {e}", self.redact_paths))?;
        Ok(match &self.redaction_key_file {
            Some(path) => Redactor::keyed(Some(redact), &read_redaction_key(path)?),
            None => Redactor::new(Some(redact)),
        })
    }

    /// The span cache of one process.
    pub fn local_span_cache(&self, metrics: &Metrics) -> LocalSpanCache {
        LocalSpanCache::new(self.span_cache_entries, self.span_cache_ttl()).count_evictions(metrics)
    }

    /// How long an object window stays in a span cache.
    pub fn span_cache_ttl(&self) -> Duration {
        self.window + self.span_cache_grace
    }
}

/// A running pipeline: the intake for sources, and what to await on shutdown.
pub struct Pipeline {
    /// Where sources hand accepted events, watch changes and Events.
    pub intake: crate::flow::Intake,
    /// The processor the shards run.
    pub processor: Arc<Processor>,
    /// The span cache in use.
    pub spans: Arc<dyn SpanCache>,
    /// The pipeline's metrics.
    pub metrics: Arc<Metrics>,
    shutdown: crate::flow::Shutdown,
    export_shutdown: crate::flow::Shutdown,
    aggregate_done: tokio::task::JoinHandle<()>,
    export_done: tokio::task::JoinHandle<()>,
    /// How far export has got (what the spool may release).
    pub export_progress: Arc<export::ExportProgress>,
    /// The durable intake, when `collect` runs with one.
    pub spool: Option<Arc<Spool>>,
    /// `--output changelog=PATH`, finished after the processor.
    changelog: Option<Arc<ChangelogWriter>>,
}

impl Pipeline {
    /// Starts the pipeline with a span cache of its own.
    pub fn start(
        p: &PipelineConfig,
        e: &ExportSettings,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let spans = Arc::new(p.local_span_cache(&metrics));
        Self::start_with(p, e, spans, metrics)
    }

    /// `start` with the given span cache (`collect` may share it through etcd).
    pub fn start_with(
        p: &PipelineConfig,
        e: &ExportSettings,
        spans: Arc<dyn SpanCache>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        Self::start_with_sinks(p, e, spans, metrics, Vec::new(), None)
    }

    /// `start_with`, also handing every change record to `sinks` (and to
    /// the change log when `--output changelog=PATH` is given).
    pub fn start_with_sinks(
        p: &PipelineConfig,
        e: &ExportSettings,
        spans: Arc<dyn SpanCache>,
        metrics: Arc<Metrics>,
        mut sinks: Vec<Arc<dyn ChangeSink>>,
        sent_links: Option<Arc<SentLinks>>,
    ) -> anyhow::Result<Self> {
        // Settings read from files first: an error leaves no output behind.
        let redactor = p.redactor()?;
        let mut changelog = None;
        for spec in &e.outputs {
            if let OutputSpec::Changelog(path) = spec {
                if changelog.is_some() {
                    anyhow::bail!("--output changelog= given twice");
                }
                let writer = Arc::new(ChangelogWriter::create(
                    path,
                    CHANGELOG_QUEUE,
                    metrics.clone(),
                )?);
                sinks.push(writer.clone());
                changelog = Some(writer);
            }
        }
        let span_outputs: Vec<OutputSpec> = e
            .outputs
            .iter()
            .filter(|o| o.takes_spans())
            .cloned()
            .collect();
        let rules = Arc::new(p.rules.load()?);
        tracing::info!(rules = rules.len(), "relation rules loaded");
        let cfg = p.processor_config()?;
        let export_progress = Arc::new(export::ExportProgress::default());
        if let Some(journal) = &sent_links {
            export_progress.write_ahead_to(journal.clone());
        }
        let (span_tx, export_shutdown, export_done) = export::start(
            e.resolve()?,
            &span_outputs,
            metrics.clone(),
            export_progress.clone(),
        )?;
        let processor = Processor::new(
            cfg,
            redactor,
            rules,
            spans.clone(),
            span_tx,
            metrics.clone(),
        )
        .with_export_progress(export_progress.clone());
        let processor = match sent_links {
            Some(journal) => processor.with_sent_links(journal),
            None => processor,
        };
        let processor = sinks
            .into_iter()
            .fold(processor, |p, sink| p.with_change_sink(sink));
        let processor = Arc::new(processor);
        let (intake, shutdown, aggregate_done) = aggregate::start(
            processor.clone(),
            p.queue_size.max(1),
            p.workers,
            p.look_ahead,
            metrics.clone(),
        );
        Ok(Self {
            intake,
            processor,
            spans,
            metrics,
            export_progress,
            spool: None,
            changelog,
            shutdown,
            export_shutdown,
            aggregate_done,
            export_done,
        })
    }

    /// Processes everything already accepted, exports it, and stops.
    pub async fn finish(self) {
        let Pipeline {
            intake,
            processor,
            shutdown,
            export_shutdown,
            aggregate_done,
            export_done,
            spool,
            changelog,
            ..
        } = self;
        shutdown.close();
        drop(intake);
        let _ = aggregate_done.await;
        // Every worker has ended, so nothing more is sent to the exporter.
        drop(processor);
        if let Some(changelog) = changelog {
            match changelog.finish() {
                Ok(lines) => tracing::info!(lines, "change log written"),
                Err(e) => tracing::error!("{e:#}"),
            }
        }
        export_shutdown.close();
        let _ = export_done.await;
        // Everything accepted was exported (or dropped and counted).
        if let Some(spool) = spool {
            spool.release_all();
        }
    }
}
