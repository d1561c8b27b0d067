//! `kascade trace`: the assembled trace of one object from audit log files,
//! offline (the frontend's code over an in-memory store).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, bail};

use super::lines::{Lines, LinesState, no_audit_events, print_skipped, progress_bar, total_size};
use super::{AssemblyConfig, PipelineConfig};
use crate::analysis::cascade::{InPart, render_text_in_part};
use crate::frontend::assemble::Scope;
use crate::frontend::display::Mode;
use crate::frontend::display::cascade::select_for_text;
use crate::frontend::offline::spilled_store_from_audit_lines;
use crate::frontend::raw::{TimeRange, from_nanos};
use crate::frontend::text::{TextOptions, render_text};
use crate::frontend::tree_json::render_json;
use crate::frontend::{Frontend, SearchQuery};
use crate::resources::ResourceArg;
use crate::terminal::fit_to_stdout;

/// How `kascade trace` prints the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceFormat {
    /// A tree for the terminal.
    #[default]
    Text,
    /// The object tree as plain JSON (docs/trace-json.md).
    Json,
    /// The assembled trace as OTLP/JSON, in a display mode.
    OtlpJson,
}

impl TraceFormat {
    /// Every format, in the order the help lists them.
    pub const ALL: [TraceFormat; 3] = [TraceFormat::Text, TraceFormat::Json, TraceFormat::OtlpJson];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Text => "text",
            TraceFormat::Json => "json",
            TraceFormat::OtlpJson => "otlp-json",
        }
    }
}

/// The object to show, where to find it, and how to print it.
///
/// ```no_run
/// use kascade::app::trace::{self, TraceConfig};
///
/// # async fn run() -> anyhow::Result<()> {
/// let config = TraceConfig::new(["audit.log"], "deployments", "hello").namespace("default");
/// trace::run(config).await
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    /// Audit log files (JSON lines) to build the trace from.
    pub files: Vec<PathBuf>,
    /// Resource of the object as kubectl takes it (`deployments`, `deploy`,
    /// `Deployment`, `deployments.apps`), or as the audit log names a
    /// custom resource.
    pub resource: String,
    /// Name of the object.
    pub name: String,
    /// A change instead of an object: its writes and those of the changes
    /// merged from it, as cascades (`resource`/`name` unused).
    pub cpid: Option<kascade_cpid::Cpid>,
    /// Namespace of the object (empty for cluster-scoped objects).
    pub namespace: String,
    /// API group of the object (empty for the core group); `None`: any.
    pub group: Option<String>,
    /// Cluster name given to the audit log's objects.
    pub cluster: String,
    /// Scope of the tree; `None`: the assembly's default scope.
    pub scope: Option<Scope>,
    /// Written on stdout.
    pub format: TraceFormat,
    /// Display mode for [`TraceFormat::OtlpJson`]; text shows
    /// the tracing mode (the object tree) and the cascade mode (the
    /// cascades the object took part in), JSON the tracing mode only.
    pub mode: Mode,
    /// Changed paths shown per write in text output.
    pub max_diff_lines: usize,
    /// Show the create/delete snapshots in text output.
    pub snapshots: bool,
    /// kube-apiserver's own traces (OTLP/JSON lines), joined by audit ID.
    pub component_traces: Vec<PathBuf>,
    /// The relation rules: the built-in ones and a user's directory over them.
    pub rules: super::RuleSources,
    /// The secret key of the redaction markers; `None`: a random key.
    pub redaction_key_file: Option<PathBuf>,
    /// How the trace is assembled: bounds and display defaults.
    pub assembly: AssemblyConfig,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            resource: String::new(),
            name: String::new(),
            cpid: None,
            namespace: String::new(),
            group: None,
            cluster: "default".to_string(),
            scope: None,
            format: TraceFormat::Text,
            mode: Mode::Tracing,
            max_diff_lines: 8,
            snapshots: false,
            component_traces: Vec::new(),
            rules: Default::default(),
            redaction_key_file: None,
            assembly: AssemblyConfig::default(),
        }
    }
}

impl TraceConfig {
    /// The trace of the object `resource`/`name` in `files`.
    pub fn new<P: Into<PathBuf>>(
        files: impl IntoIterator<Item = P>,
        resource: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            files: files.into_iter().map(Into::into).collect(),
            resource: resource.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    /// Sets the object's namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Prints the assembled trace as OTLP/JSON in display mode `mode`.
    pub fn otlp_json(mut self, mode: Mode) -> Self {
        self.format = TraceFormat::OtlpJson;
        self.mode = mode;
        self
    }
}

/// Malformed lines named on stderr; the rest are counted.
const MAX_ERRORS_SHOWN: usize = 10;

/// Builds the trace from the files and prints it on stdout.
pub async fn run(config: TraceConfig) -> anyhow::Result<()> {
    check_mode(config.format, config.mode)?;
    // A bad resource is refused before the files are read.
    let resource = if config.cpid.is_none() {
        let arg: ResourceArg = config
            .resource
            .parse()
            .map_err(|e| anyhow::anyhow!("--resource {e}"))?;
        Some(match &config.group {
            Some(g) => arg.in_group(g).map_err(anyhow::Error::msg)?,
            None => arg,
        })
    } else {
        None
    };
    // As `analyze` and `explain` read them: `.gz` too, a line that is not
    // UTF-8 skipped (not the whole file), errors named by file:line.
    let bar = progress_bar(total_size(&config.files)?);
    let shared = Arc::new(Mutex::new(LinesState::default()));
    // Several apiservers' logs: read by one clock.
    let lines = Lines::new(config.files.clone(), bar.clone(), shared.clone()).correcting_clocks();
    // The collector's pipeline at its defaults, with this window and these rules.
    let pipeline = PipelineConfig {
        window: config.assembly.window,
        rules: config.rules.clone(),
        redaction_key_file: config.redaction_key_file.clone(),
        ..PipelineConfig::default()
    };
    let rules = Arc::new(pipeline.rules.load()?);
    // Spans spilled to a temporary file: memory holds their index, not a
    // large log's every history.
    let (store, errors) = spilled_store_from_audit_lines(
        lines,
        &config.cluster,
        rules,
        &pipeline.filter()?,
        pipeline.processor_config()?,
        pipeline.redactor()?,
    )
    .await?;
    bar.finish_and_clear();
    let (located, non_empty) = {
        let mut st = shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = st.io_error.take() {
            return Err(e);
        }
        super::lines::print_clock_notes(&st);
        let shown = &errors[..errors.len().min(MAX_ERRORS_SHOWN)];
        (st.located(shown), st.non_empty)
    };
    if let Some(e) = no_audit_events(
        &config.files,
        non_empty,
        errors.len() as u64,
        located.first().map(String::as_str),
    ) {
        return Err(e);
    }
    print_skipped(&located, errors.len(), MAX_ERRORS_SHOWN);
    let Some((first, last)) = store.time_span() else {
        bail!(
            "no write in the audit log (kascade shows creates, updates, patches and deletes at stage ResponseComplete)"
        );
    };
    let seen = store.resources();
    let store = Arc::new(store);
    let frontend = Frontend::new(store.clone(), config.assembly.frontend_config()?);
    let range = TimeRange::new(from_nanos(first), from_nanos(last));
    if let Some(cpid) = config.cpid {
        let Some(trace) = frontend.change_trace(cpid, range).await? else {
            bail!("no write of change {cpid} in the audit log");
        };
        // Every write, as the UI shows a change's trace.
        return print_cascades(&trace, config.format, &[]);
    }
    let Some(resource) = resource else {
        bail!("no resource given");
    };
    let resolved = resource
        .resolve(seen.iter().map(|(g, r)| (g.as_str(), r.as_str())))
        .map_err(anyhow::Error::msg)?;
    let holders = store.namespaces_of(&resolved.resource, resolved.group.as_deref(), &config.name);
    // No -n: the object wherever it is, as explain finds it; a name held in
    // several namespaces is the user's to choose.
    let namespace = if config.namespace.is_empty() && !holders.contains("") {
        match holders.iter().collect::<Vec<_>>().as_slice() {
            [] => String::new(),
            [only] => (*only).clone(),
            several => bail!(
                "{} {} is in {} namespaces ({}): pick one with -n",
                resolved.resource,
                config.name,
                several.len(),
                several
                    .iter()
                    .map(|ns| ns.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    } else {
        config.namespace.clone()
    };
    let mut tags = vec![
        ("cluster".to_string(), config.cluster.clone()),
        ("resource".to_string(), resolved.resource.clone()),
        ("namespace".to_string(), namespace.clone()),
        ("name".to_string(), config.name.clone()),
    ];
    if let Some(g) = &resolved.group {
        tags.push(("group".to_string(), g.clone()));
    }
    let found = frontend
        .search(&SearchQuery {
            mode: config.mode,
            scope: config.scope.unwrap_or(config.assembly.default_scope),
            all_siblings: false,
            tags,
            range,
            limit: 10,
        })
        .await?;
    let Some(trace) = found.first() else {
        // The object in other namespaces (or cluster-scoped) is one flag away.
        let elsewhere: Vec<String> = holders
            .into_iter()
            .filter(|ns| *ns != namespace)
            .map(|ns| {
                if ns.is_empty() {
                    "cluster-scoped (no -n)".to_string()
                } else {
                    format!("-n {ns}")
                }
            })
            .collect();
        bail!(
            "no {} {}{} in the audit log (cluster {}){}",
            resolved.resource,
            if namespace.is_empty() {
                String::new()
            } else {
                format!("{namespace}/")
            },
            config.name,
            config.cluster,
            if elsewhere.is_empty() {
                String::new()
            } else {
                format!("; there is one with {}", elsewhere.join(", "))
            }
        );
    };
    match config.format {
        TraceFormat::Text if config.mode == Mode::Cascade => {
            let searched = trace
                .assembly
                .nodes
                .get(trace.assembly.searched)
                .map(|n| &n.history.object);
            let in_part: Vec<InPart> = trace
                .cascades
                .iter()
                .map(|c| select_for_text(c, searched, config.assembly.max_siblings))
                .collect();
            return print_cascades(trace, config.format, &in_part);
        }
        TraceFormat::Text => print(fit_to_stdout(render_text(
            &trace.assembly,
            &TextOptions {
                max_diff_lines: config.max_diff_lines,
                snapshots: config.snapshots,
                max_siblings: config.assembly.max_siblings,
                components: read_component_traces(&config.component_traces)?,
            },
        )))?,
        TraceFormat::Json => print(
            render_json(
                &trace.assembly,
                &read_component_traces(&config.component_traces)?,
            )? + "\n",
        )?,
        TraceFormat::OtlpJson => print_otlp_json(trace)?,
    }
    Ok(())
}

/// The assembled trace as one line of OTLP/JSON.
fn print_otlp_json(trace: &crate::frontend::AssembledTrace) -> anyhow::Result<()> {
    let data = opentelemetry_proto::tonic::trace::v1::TracesData {
        resource_spans: trace.resource_spans.clone(),
    };
    print(serde_json::to_string(&data)? + "\n")
}

/// Writes the trace on stdout (a closed stdout ends it quietly).
fn print(text: String) -> anyhow::Result<()> {
    crate::terminal::print(&text).context("writing the trace")
}

/// Refuses a display mode the format cannot show (rather than showing
/// another one silently).
fn check_mode(format: TraceFormat, mode: Mode) -> anyhow::Result<()> {
    let shown: &[Mode] = match format {
        TraceFormat::Text => &[Mode::Tracing, Mode::Cascade],
        TraceFormat::Json => &[Mode::Tracing],
        TraceFormat::OtlpJson => &Mode::ALL,
    };
    if !shown.contains(&mode) {
        let names: Vec<&str> = shown.iter().map(|m| m.name()).collect();
        bail!(
            "--mode {} cannot be shown as --format {}, which shows {}; --format otlp-json shows every mode",
            mode.name(),
            format.name(),
            names.join(" and ")
        );
    }
    Ok(())
}

/// A trace shown as cascades: notes and the cascades' text (each in part
/// as `in_part` says), or OTLP/JSON.
fn print_cascades(
    trace: &crate::frontend::AssembledTrace,
    format: TraceFormat,
    in_part: &[InPart],
) -> anyhow::Result<()> {
    match format {
        TraceFormat::Json => bail!(
            "--format json shows an object tree, not cascades (--cpid, --mode cascade): use --format text or otlp-json"
        ),
        TraceFormat::Text => {
            let mut text = String::new();
            for note in trace.assembly.notes.iter() {
                if crate::frontend::assemble::is_fold_note(note) {
                    continue; // about Events, which cascades do not show
                }
                text.push_str(&format!("note: {note}\n"));
            }
            // A change's trace (`--cpid`) searched no object.
            let searched = trace
                .assembly
                .nodes
                .get(trace.assembly.searched)
                .map(|n| &n.history.object);
            text.push_str(&render_text_in_part(&trace.cascades, in_part, searched));
            print(fit_to_stdout(text))
        }
        TraceFormat::OtlpJson => print_otlp_json(trace),
    }
}

/// kube-apiserver's own traces from `--component-traces` files, by audit ID.
/// A file's text, inflated when its name ends in `.gz`.
fn read_text(path: &std::path::Path) -> std::io::Result<String> {
    if path.extension().is_some_and(|e| e == "gz") {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(path)?),
            &mut text,
        )?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

pub(crate) fn read_component_traces(
    files: &[PathBuf],
) -> anyhow::Result<crate::component_spans::ComponentSpans> {
    let mut spans = Vec::new();
    for path in files {
        let text = read_text(path)
            .with_context(|| format!("cannot read --component-traces {}", path.display()))?;
        spans.extend(
            crate::component_spans::spans_from_otlp_json_lines(&text)
                .map_err(|e| anyhow::anyhow!("--component-traces {}: {e}", path.display()))?,
        );
    }
    Ok(crate::component_spans::ComponentSpans::from_spans(spans))
}
