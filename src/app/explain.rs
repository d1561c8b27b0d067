//! `kascade explain`: findings over audit log files (and Event lists),
//! streamed through the processor with the explain collector as its sink.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, bail};

use super::PipelineConfig;
use super::lines::{Lines, LinesState, in_time_order, progress_bar, total_size};
use crate::analysis::explain::{self, ExplainCollector, Inputs, Report, Scope, Severity};
use crate::flow::{ChangeSink, EventRecord, K8sEvent, WatchChange, WatchKind};
use crate::offline::changes_with_watch_to_sinks;

/// How a report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExplainFormat {
    /// For a terminal.
    Text,
    /// For a CI job summary or a pull-request comment.
    Markdown,
    /// One JSON document.
    Json,
    /// One self-contained page.
    Html,
}

impl ExplainFormat {
    /// Every format, in the order the help lists them.
    pub const ALL: [ExplainFormat; 4] = [
        ExplainFormat::Text,
        ExplainFormat::Markdown,
        ExplainFormat::Json,
        ExplainFormat::Html,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ExplainFormat::Text => "text",
            ExplainFormat::Markdown => "markdown",
            ExplainFormat::Json => "json",
            ExplainFormat::Html => "html",
        }
    }
}

impl std::str::FromStr for ExplainFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s || (s == "md" && *f == ExplainFormat::Markdown))
            .ok_or_else(|| format!("unknown format {s:?} (text, markdown, json, html)"))
    }
}

/// Which findings make `kascade explain` exit with [`FINDINGS_EXIT_CODE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    /// Any error.
    Error,
    /// Any error or warning.
    Warning,
    /// Any finding at all.
    Info,
    /// None: the exit code says only whether the log could be read.
    Never,
}

impl FailOn {
    /// Every level, in the order the help lists them.
    pub const ALL: [FailOn; 4] = [FailOn::Error, FailOn::Warning, FailOn::Info, FailOn::Never];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FailOn::Error => "error",
            FailOn::Warning => "warning",
            FailOn::Info => "info",
            FailOn::Never => "never",
        }
    }

    fn threshold(self) -> Option<Severity> {
        match self {
            FailOn::Error => Some(Severity::Error),
            FailOn::Warning => Some(Severity::Warning),
            FailOn::Info => Some(Severity::Info),
            FailOn::Never => None,
        }
    }
}

/// The exit code when findings at or above `--fail-on` exist (1 is kept
/// for kascade's own failures, 2 for bad command lines).
pub const FINDINGS_EXIT_CODE: u8 = 3;

/// What `kascade explain` reads and writes.
#[derive(Clone, Debug)]
pub struct ExplainConfig {
    /// Audit log files (JSON lines; `.gz` decompressed), oldest first
    /// (they are put in time order when not).
    pub files: Vec<PathBuf>,
    /// Event lists (`kubectl get events -o json`) or JSON lines of Events.
    pub events: Vec<PathBuf>,
    /// kube-apiserver's own traces (OTLP/JSON lines), joined by audit ID.
    pub component_traces: Vec<PathBuf>,
    /// Captured watch streams (`{"type":…,"object":…}` per line).
    pub watch: Vec<PathBuf>,
    /// Cluster name the report names.
    pub cluster: String,

    /// The relation rules: the built-in ones and a user's directory over them.
    pub rules: super::RuleSources,
    /// The secret key of the redaction markers; `None`: a random key.
    pub redaction_key_file: Option<PathBuf>,
    /// What the report is about: namespaces, objects, a time range.
    pub scope: Scope,
    /// Written on stdout.
    pub format: ExplainFormat,
    /// Also written to files.
    pub outputs: Vec<(ExplainFormat, PathBuf)>,
    /// Which findings fail the run.
    pub fail_on: FailOn,
    /// Malformed lines listed at most (all are counted).
    pub max_errors_shown: usize,
}

impl Default for ExplainConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            events: Vec::new(),
            component_traces: Vec::new(),
            watch: Vec::new(),
            cluster: super::trace::TraceConfig::default().cluster,
            rules: Default::default(),
            redaction_key_file: None,
            scope: Scope::default(),
            format: ExplainFormat::Text,
            outputs: Vec::new(),
            fail_on: FailOn::Never,
            max_errors_shown: 5,
        }
    }
}

/// The Events of an Event list file (an EventList / List JSON document, or
/// one Event per line), handed to the collector as the processor would. An
/// item that is no Event is skipped and said (`FILE: item N` or
/// `FILE:LINE`, and what it is), as a malformed audit line is; a file
/// without a single Event is an error (an audit log given to --events).
fn read_events(
    path: &PathBuf,
    cluster: &str,
    collector: &ExplainCollector,
    max_shown: usize,
) -> anyhow::Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    // Each item with where it is, for messages: `FILE: item N` of a list
    // document, `FILE:LINE` of JSON lines.
    let mut skipped: Vec<String> = Vec::new();
    let objects: Vec<(String, serde_json::Value)> =
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) => match v.get("items").and_then(|i| i.as_array()) {
                Some(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (format!("{}: item {}", path.display(), i + 1), item.clone()))
                    .collect(),
                None => vec![(format!("{}:1", path.display()), v)],
            },
            Err(_) => text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .filter_map(|(i, l)| {
                    let at = format!("{}:{}", path.display(), i + 1);
                    match serde_json::from_str(l) {
                        Ok(v) => Some((at, v)),
                        Err(e) => {
                            skipped.push(format!(
                                "{at}: not an Event list or JSON line: {}",
                                crate::messages::clip_message(e.to_string())
                            ));
                            None
                        }
                    }
                })
                .collect(),
        };
    let kinds = crate::aggregate::relations::KindRegistry::default();
    let mut n = 0;
    for (at, obj) in &objects {
        let Some(e) = K8sEvent::from_object(obj) else {
            skipped.push(format!("{at}: {}", not_a_kubernetes_event(obj)));
            continue;
        };
        let Some(at) = e.occurred else { continue };
        let involved = kinds.referenced_object(
            cluster,
            &e.involved.api_version,
            &e.involved.kind,
            &e.involved.namespace,
            &e.involved.name,
        );
        collector.event(&EventRecord {
            involved,
            event: e,
            at,
        });
        n += 1;
    }
    if n == 0
        && let Some(first) = skipped.first()
    {
        bail!("{first}");
    }
    super::lines::print_skipped(&skipped, skipped.len(), max_shown);
    Ok(n)
}

/// What an item of an `--events` file is instead of a Kubernetes Event.
fn not_a_kubernetes_event(obj: &serde_json::Value) -> String {
    const EXPECTED: &str = "a Kubernetes Event (kind \"Event\", apiVersion events.k8s.io/v1 or v1)";
    let text = |k: &str| obj.get(k).and_then(|x| x.as_str()).unwrap_or("");
    let (kind, api_version) = (text("kind"), text("apiVersion"));
    let found = if api_version == crate::flow::AUDIT_API_VERSION {
        return format!(
            "an audit event (kind {kind:?}, apiVersion {api_version}) where {EXPECTED} was expected; audit logs go in FILES, not --events"
        );
    } else if !obj.is_object() {
        match obj {
            serde_json::Value::Array(_) => "an array".to_string(),
            serde_json::Value::String(_) => "a string".to_string(),
            serde_json::Value::Number(_) => "a number".to_string(),
            serde_json::Value::Bool(_) => "a boolean".to_string(),
            _ => "null".to_string(),
        }
    } else if kind == "Event" || kind.is_empty() && obj.get("regarding").is_some() {
        return "an Event that names no object it is about (involvedObject or regarding, with kind and name, within Kubernetes' bounds)".to_string();
    } else if kind.is_empty() {
        "an object without kind".to_string()
    } else {
        crate::messages::clip_message(format!(
            "an object of kind {kind:?}, apiVersion {api_version:?}"
        ))
    };
    format!("{found} where {EXPECTED} was expected")
}

/// When a watch event's object last changed, as far as the object says
/// (a captured stream has no delivery times): the latest of its creation,
/// deletion, managed-fields and condition times.
fn changed_at(obj: &serde_json::Value) -> Option<SystemTime> {
    let mut times: Vec<&str> = Vec::new();
    let meta = &obj["metadata"];
    for key in ["creationTimestamp", "deletionTimestamp"] {
        times.extend(meta[key].as_str());
    }
    for list in [&meta["managedFields"], &obj["status"]["conditions"]] {
        for item in list.as_array().into_iter().flatten() {
            for key in [
                "time",
                "lastTransitionTime",
                "lastUpdateTime",
                "lastProbeTime",
            ] {
                times.extend(item[key].as_str());
            }
        }
    }
    times
        .into_iter()
        .filter_map(|t| humantime::parse_rfc3339_weak(t).ok())
        .max()
}

/// The changes of captured watch streams (`kubectl get -w -o json`, or the
/// raw `?watch=1` stream the e2e harness keeps), in file order.
fn read_watch(path: &PathBuf, cluster: &str) -> anyhow::Result<Vec<WatchChange>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let kinds = crate::aggregate::relations::KindRegistry::default();
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("{}:{}", path.display(), i + 1);
        let ev: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not a watch event", at()))?;
        let kind = match ev["type"].as_str() {
            Some("ADDED") => WatchKind::Added,
            Some("MODIFIED") => WatchKind::Modified,
            Some("DELETED") => WatchKind::Deleted,
            Some("BOOKMARK") | Some("ERROR") => continue,
            other => bail!(
                "{}: watch event type {other:?}, expected ADDED, MODIFIED or DELETED",
                at()
            ),
        };
        let state = ev["object"].clone();
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let (Some(api_version), Some(kind_name), Some(name)) = (
            state["apiVersion"].as_str(),
            state["kind"].as_str(),
            state["metadata"]["name"].as_str(),
        ) else {
            bail!(
                "{}: the object has no apiVersion, kind or metadata.name",
                at()
            );
        };
        let object = kinds.referenced_object(
            cluster,
            api_version,
            kind_name,
            &text(&state["metadata"]["namespace"]),
            name,
        );
        let Some(observed) = changed_at(&state) else {
            bail!("{}: the object carries no time (creationTimestamp)", at());
        };
        let state = crate::json::parse(&state.to_string())
            .with_context(|| format!("{}: the object is not JSON kascade reads", at()))?;
        out.push(WatchChange {
            object,
            kind,
            state,
            observed,
        });
    }
    Ok(out)
}

/// Reads the inputs and builds the report; malformed lines are counted in
/// it (with a few examples) and listed on stderr.
pub async fn explain(config: &ExplainConfig) -> anyhow::Result<Report> {
    if config.files.is_empty() {
        bail!("no audit log files given");
    }
    if let (Some(from), Some(to)) = (config.scope.from, config.scope.to)
        && from > to
    {
        bail!(
            "--from {} is later than --to {}: the time range holds nothing",
            humantime::format_rfc3339_seconds(from),
            humantime::format_rfc3339_seconds(to)
        );
    }
    let total = total_size(&config.files)?;
    let (files, note) = in_time_order(config.files.clone());
    if let Some(note) = note.filter(|_| !crate::terminal::quiet()) {
        eprintln!("{note}");
    }
    let bar = progress_bar(total);
    let pipeline = PipelineConfig {
        rules: config.rules.clone(),
        redaction_key_file: config.redaction_key_file.clone(),
        ..PipelineConfig::offline()
    };
    let rules = Arc::new(pipeline.rules.load()?);
    let shared = Arc::new(Mutex::new(LinesState::default()));
    // Several logs (several apiservers'): read by one clock.
    let mut lines = Lines::new(files.clone(), bar.clone(), shared.clone()).correcting_clocks();
    // One namespace: lines that do not mention it are not parsed at all.
    if let Some(ns) = &config.scope.namespace {
        lines = lines.containing(&format!("\"{ns}\""));
    }
    let mut collector = ExplainCollector::on_own_thread(config.scope.clone());
    if !config.component_traces.is_empty() {
        collector = collector.with_components(super::trace::read_component_traces(
            &config.component_traces,
        )?);
    }
    let collector = Arc::new(collector);
    let mut watch = Vec::new();
    for path in &config.watch {
        watch.extend(read_watch(path, &config.cluster)?);
    }
    let watched = watch.len();
    let errors = changes_with_watch_to_sinks(
        lines,
        watch,
        &config.cluster,
        rules,
        &pipeline.filter()?,
        pipeline.processor_config()?,
        pipeline.redactor()?,
        vec![collector.clone() as Arc<dyn ChangeSink>],
    )
    .await;
    bar.finish_and_clear();
    let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = st.io_error.take() {
        return Err(e);
    }
    let located = st.located(&errors);
    // Lines outside `--namespace` are not parsed: they are neither events
    // nor malformed. Empty audit logs are fine beside watch or Event dumps.
    let parsed = st.non_empty - st.skipped;
    let other_inputs = watched > 0 || !config.events.is_empty();
    if (parsed > 0 || st.non_empty == 0 && !other_inputs)
        && let Some(e) = super::lines::no_audit_events(
            &files,
            parsed,
            errors.len() as u64,
            located.first().map(String::as_str),
        )
    {
        return Err(e);
    }
    super::lines::print_skipped(&located, located.len(), config.max_errors_shown);
    for path in &config.events {
        read_events(path, &config.cluster, &collector, config.max_errors_shown)?;
    }
    let resources_seen = collector.resources_seen();
    let collector = Arc::try_unwrap(collector)
        .map_err(|_| anyhow::anyhow!("the pipeline still holds the explain collector"))?;
    let clock_notes = st.clock_notes();
    let inputs = Inputs {
        files: files
            .iter()
            .chain(&config.events)
            .chain(&config.watch)
            .map(|f| f.display().to_string())
            .collect(),
        notes: clock_notes,
        lines: st.non_empty,
        malformed: errors.len() as u64,
        malformed_examples: located.into_iter().take(config.max_errors_shown).collect(),
        ..Inputs::default()
    };
    let report = explain::report(collector, inputs);
    let time = |t: &str| humantime::parse_rfc3339_weak(t).ok();
    if let (Some(first), Some(last)) = (time(&report.inputs.from), time(&report.inputs.to)) {
        let after = config.scope.from.filter(|f| *f > last);
        let before = config.scope.to.filter(|t| *t < first);
        if let Some((flag, t)) = after.map(|f| ("--from", f)).or(before.map(|t| ("--to", t))) {
            bail!(
                "{flag} {} is outside the log, which runs from {} to {}: nothing in scope",
                humantime::format_rfc3339_seconds(t),
                report.inputs.from,
                report.inputs.to
            );
        }
    }
    // A scope that matches nothing (a typo, a time range outside the log)
    // must not read as "no problems found".
    let scope = config.scope.describe();
    let names_objects = config.scope.object.is_some() || config.scope.selector.is_some();
    let nothing =
        report.inputs.events_in_scope == 0 || names_objects && report.inputs.objects_in_scope == 0;
    // A resource nothing in the log is: say so, with the names it may mean.
    if let Some(o) = &config.scope.object
        && let Err(e) = o
            .resource
            .resolve(resources_seen.iter().map(|(g, r)| (g.as_str(), r.as_str())))
    {
        bail!("--object {}/{}: {e}", o.resource, o.name);
    }
    if nothing && scope != "everything" {
        bail!(
            "nothing in scope ({scope}) among the {} audit lines of {}: check the namespace, object, selector and time range",
            report.inputs.lines,
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(report)
}

/// The report in `format`; `color` for the terminal.
pub fn render(report: &Report, format: ExplainFormat, color: bool) -> String {
    match format {
        ExplainFormat::Text => explain::render_text(report, color),
        ExplainFormat::Markdown => explain::render_markdown(report),
        ExplainFormat::Json => report.to_json() + "\n",
        ExplainFormat::Html => explain::html::render_html(report),
    }
}

/// Writes the report where asked; whether findings at or above
/// `--fail-on` exist.
pub async fn run(config: ExplainConfig) -> anyhow::Result<bool> {
    let report = explain(&config).await?;
    if config.format != ExplainFormat::Text {
        for n in &report.inputs.notes {
            eprintln!("note: {n}");
        }
    }
    for (format, path) in &config.outputs {
        crate::output_file::write(path, render(&report, *format, false)).with_context(|| {
            format!(
                "cannot write the {} report to {}",
                format.name(),
                path.display()
            )
        })?;
    }
    let text = match config.format {
        ExplainFormat::Text => crate::terminal::fit_to_stdout(render(
            &report,
            config.format,
            crate::terminal::colors(crate::terminal::Stream::Stdout),
        )),
        _ => render(&report, config.format, false),
    };
    crate::terminal::print(&text).context("writing the report")?;
    Ok(config
        .fail_on
        .threshold()
        .is_some_and(|t| report.worst().is_some_and(|w| w >= t)))
}
