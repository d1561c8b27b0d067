//! `kascade analyze`: propagation statistics over audit log files, streamed
//! through the processor's cause inference (memory stays flat however large
//! the input).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::lines::{Lines, LinesState};

use anyhow::{Context, bail};

use super::PipelineConfig;
use crate::analysis::cascade::{CascadeTracker, TrackerConfig};
use crate::analysis::foreground::{ForegroundScope, ForegroundSink};
use crate::analysis::plot::write_plots;
use crate::analysis::report::Report;
use crate::analysis::stats::PropagationStats;
use crate::offline::changes_to_sinks;

/// Output format of `kascade analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnalyzeFormat {
    /// Tables for a terminal.
    Text,
    /// One JSON document.
    Json,
    /// Comma-separated values, one row per propagation.
    Csv,
}

impl AnalyzeFormat {
    /// Every format, in the order the help lists them.
    pub const ALL: [AnalyzeFormat; 3] =
        [AnalyzeFormat::Text, AnalyzeFormat::Json, AnalyzeFormat::Csv];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AnalyzeFormat::Text => "text",
            AnalyzeFormat::Json => "json",
            AnalyzeFormat::Csv => "csv",
        }
    }
}

/// What `kascade analyze` reads and writes.
#[derive(Clone, Debug)]
pub struct AnalyzeConfig {
    /// Audit log files (JSON lines).
    pub files: Vec<PathBuf>,
    /// Cluster name recorded on every change.
    pub cluster: String,
    /// Written on stdout.
    pub format: AnalyzeFormat,
    /// Directory for the PNG and SVG plots.
    pub plot: Option<PathBuf>,
    /// The relation rules: the built-in ones and a user's directory over them.
    pub rules: super::RuleSources,
    /// Malformed lines listed on stderr at most (all are counted).
    pub max_errors_shown: usize,
    /// Which changes count (namespace, time, the cluster's background).
    pub scope: ForegroundScope,
}

impl Default for AnalyzeConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            cluster: super::trace::TraceConfig::default().cluster,
            format: AnalyzeFormat::Text,
            plot: None,
            rules: Default::default(),
            max_errors_shown: 20,
            scope: ForegroundScope::default(),
        }
    }
}

/// Reads the files through the processor and returns the report with the
/// statistics behind it (for plots); malformed lines go to stderr.
pub async fn analyze(
    config: &AnalyzeConfig,
) -> anyhow::Result<(Report, crate::analysis::stats::Stats)> {
    if config.files.is_empty() {
        bail!("no audit log files given");
    }
    if let (Some(from), Some(to)) = (config.scope.from, config.scope.to)
        && from > to
    {
        bail!(
            "--from {} is later than --to {}",
            humantime::format_rfc3339(from),
            humantime::format_rfc3339(to)
        );
    }
    let total = super::lines::total_size(&config.files)?;
    let bar = super::lines::progress_bar(total);
    let pipeline = PipelineConfig {
        rules: config.rules.clone(),
        ..PipelineConfig::offline()
    };
    let rules = Arc::new(pipeline.rules.load()?);
    let shared = Arc::new(Mutex::new(LinesState::default()));
    // Several apiservers' logs: read by one clock.
    let lines = Lines::new(config.files.clone(), bar.clone(), shared.clone()).correcting_clocks();
    let sink = Arc::new(PropagationStats::default());
    // Completion times: the cascade tracker tells the statistics of every
    // cascade that completed (by root kind and verb).
    let tracker = {
        let stats = sink.clone();
        Arc::new(
            CascadeTracker::new(
                TrackerConfig::default(),
                Arc::new(crate::metrics::CascadeMetrics::default()),
            )
            .with_completion_listener(Arc::new(move |kind, verb, took| {
                stats.record_completion(kind, verb, took)
            })),
        )
    };
    let foreground = Arc::new(ForegroundSink::new(
        config.scope.clone(),
        vec![sink.clone(), tracker.clone()],
    ));
    let errors = changes_to_sinks(
        lines,
        &config.cluster,
        rules,
        &pipeline.filter()?,
        pipeline.processor_config()?,
        pipeline.redactor()?,
        vec![foreground.clone()],
    )
    .await;
    tracker.flush();
    drop(tracker);
    bar.finish_and_clear();
    let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = st.io_error.take() {
        return Err(e);
    }
    // The first is located even when none are shown: the error below names it.
    let located = st.located(&errors[..errors.len().min(config.max_errors_shown.max(1))]);
    if let Some(e) = super::lines::no_audit_events(
        &config.files,
        st.non_empty,
        errors.len() as u64,
        located.first().map(String::as_str),
    ) {
        return Err(e);
    }
    super::lines::print_skipped(&located, errors.len(), config.max_errors_shown);
    super::lines::print_clock_notes(&st);
    let mut stats = Arc::try_unwrap(sink)
        .map(PropagationStats::into_stats)
        .unwrap_or_else(|s| s.snapshot());
    let mut report = Report::new(&mut stats, st.non_empty, errors.len() as u64, true);
    let left_out = foreground.left_out();
    if left_out.background_untracked > 0 {
        tracing::warn!(
            roots = left_out.background_untracked,
            "the cluster's start-up cascades beyond the bound were counted as the run's (no user's write for over a million cascades)"
        );
    }
    report.background = left_out.background;
    report.out_of_scope = left_out.out_of_scope;
    if let Some(o) = &config.scope.object
        && report.changes == 0
    {
        let seen = foreground.resources_seen();
        if let Err(e) = o
            .resource
            .resolve(seen.iter().map(|(g, r)| (g.as_str(), r.as_str())))
        {
            bail!("--object {}/{}: {e}", o.resource, o.name);
        }
    }
    if report.changes == 0 && left_out.out_of_scope > 0 {
        bail!(
            "no change of the audit log is in the scope asked for ({} left out): check --namespace, --object, --selector, --from and --to",
            left_out.out_of_scope
        );
    }
    Ok((report, stats))
}

/// Prints the report on stdout (and writes the plots).
pub async fn run(config: AnalyzeConfig) -> anyhow::Result<()> {
    let (report, stats) = analyze(&config).await?;
    if let Some(dir) = &config.plot {
        let files = write_plots(dir, &report, &stats)?;
        if !crate::terminal::quiet() {
            eprintln!("wrote {} plots to {}", files.len(), dir.display());
        }
    }
    let out = match config.format {
        AnalyzeFormat::Text => {
            let width = crate::terminal::stdout_width();
            let text = report.to_text(&stats, width);
            match width {
                Some(w) => crate::terminal::wrap_lines(&text, w),
                None => text,
            }
        }
        AnalyzeFormat::Json => report.to_json() + "\n",
        AnalyzeFormat::Csv => report.to_csv(),
    };
    crate::terminal::print(&out).context("writing the report")?;
    Ok(())
}
