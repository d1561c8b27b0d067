//! `kascade analyze`: propagation statistics over audit log files, streamed
//! through the processor's cause inference (memory stays flat however large
//! the input).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

use super::{PipelineConfig, load_rules};
use crate::analysis::cascade::{CascadeTracker, TrackerConfig};
use crate::analysis::plot::write_plots;
use crate::analysis::report::Report;
use crate::analysis::stats::PropagationStats;
use crate::offline::changes_to_sinks;

/// Output format of `kascade analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnalyzeFormat {
    Text,
    Json,
    Csv,
}

impl AnalyzeFormat {
    pub const ALL: [AnalyzeFormat; 3] =
        [AnalyzeFormat::Text, AnalyzeFormat::Json, AnalyzeFormat::Csv];

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
    pub cluster: String,
    pub format: AnalyzeFormat,
    /// Directory for the PNG and SVG plots.
    pub plot: Option<PathBuf>,
    /// Relation rules directory (default: the built-in rules).
    pub rules: Option<PathBuf>,
    /// Malformed lines listed on stderr at most (all are counted).
    pub max_errors_shown: usize,
}

impl Default for AnalyzeConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            cluster: super::trace::TraceConfig::default().cluster,
            format: AnalyzeFormat::Text,
            plot: None,
            rules: None,
            max_errors_shown: 20,
        }
    }
}

/// The files' lines, one after the other, remembering where each file
/// starts so an error's line number can be given as file:line.
struct Lines {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<BufReader<Box<dyn Read>>>,
    buf: Vec<u8>,
    bar: ProgressBar,
    shared: Arc<Mutex<LinesState>>,
}

#[derive(Default)]
struct LinesState {
    /// (file, global index of its first line).
    starts: Vec<(PathBuf, u64)>,
    yielded: u64,
    non_empty: u64,
    io_error: Option<anyhow::Error>,
}

impl Lines {
    fn locate(state: &LinesState, global_line: u64) -> String {
        match state
            .starts
            .iter()
            .rev()
            .find(|(_, start)| *start < global_line)
        {
            Some((f, start)) => format!("{}:{}", f.display(), global_line - start),
            None => format!("line {global_line}"),
        }
    }
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        loop {
            if self.current.is_none() {
                let path = self.files.next()?;
                let file = match File::open(&path) {
                    Ok(f) => f,
                    Err(e) => {
                        let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                        st.io_error = Some(anyhow::anyhow!("cannot open {}: {e}", path.display()));
                        return None;
                    }
                };
                let reader: Box<dyn Read> = Box::new(self.bar.wrap_read(file));
                self.current = Some(BufReader::with_capacity(1 << 20, reader));
                let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                let at = st.yielded;
                st.starts.push((path, at));
            }
            let reader = self.current.as_mut()?;
            self.buf.clear();
            match reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => {
                    self.current = None;
                    continue;
                }
                Ok(_) => {
                    let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    st.yielded += 1;
                    if !self.buf.iter().all(u8::is_ascii_whitespace) {
                        st.non_empty += 1;
                    }
                    return Some(String::from_utf8_lossy(&self.buf).into_owned());
                }
                Err(e) => {
                    let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    let (f, _) = st.starts.last().cloned().unwrap_or_default();
                    st.io_error = Some(anyhow::anyhow!("cannot read {}: {e}", f.display()));
                    return None;
                }
            }
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
    let mut total = 0;
    for f in &config.files {
        total += std::fs::metadata(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .len();
    }
    // Drawn only when stderr is a terminal (indicatif hides it otherwise).
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .expect("static template"),
    );
    let pipeline = PipelineConfig {
        rules: config.rules.clone(),
        ..PipelineConfig::default()
    };
    let rules = Arc::new(load_rules(pipeline.rules.as_deref())?);
    let shared = Arc::new(Mutex::new(LinesState::default()));
    let lines = Lines {
        files: config.files.clone().into_iter(),
        current: None,
        buf: Vec::new(),
        bar: bar.clone(),
        shared: shared.clone(),
    };
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
    let errors = changes_to_sinks(
        lines,
        &config.cluster,
        rules,
        &pipeline.filter()?,
        pipeline.processor_config()?,
        pipeline.redactor()?,
        vec![sink.clone(), tracker.clone()],
    )
    .await;
    tracker.flush();
    drop(tracker);
    bar.finish_and_clear();
    let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = st.io_error.take() {
        return Err(e);
    }
    for e in errors.iter().take(config.max_errors_shown) {
        // `<global line>: <message>` from the offline pipeline.
        let (n, msg) = e.split_once(": ").unwrap_or(("0", e));
        let at = Lines::locate(&st, n.parse().unwrap_or(0));
        eprintln!("{at}: {msg} (skipped)");
    }
    if errors.len() > config.max_errors_shown {
        eprintln!(
            "… and {} more malformed lines (skipped)",
            errors.len() - config.max_errors_shown
        );
    }
    let mut stats = Arc::try_unwrap(sink)
        .map(PropagationStats::into_stats)
        .unwrap_or_else(|s| s.snapshot());
    let report = Report::new(&mut stats, st.non_empty, errors.len() as u64, true);
    Ok((report, stats))
}

/// Prints the report on stdout (and writes the plots).
pub async fn run(config: AnalyzeConfig) -> anyhow::Result<()> {
    let (report, stats) = analyze(&config).await?;
    if let Some(dir) = &config.plot {
        let files = write_plots(dir, &report, &stats)?;
        eprintln!("wrote {} plots to {}", files.len(), dir.display());
    }
    let out = match config.format {
        AnalyzeFormat::Text => report.to_text(&stats, 40),
        AnalyzeFormat::Json => report.to_json() + "\n",
        AnalyzeFormat::Csv => report.to_csv(),
    };
    use std::io::Write as _;
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing the report")?;
    Ok(())
}
