//! `kascade trace`: the assembled trace of one object from audit log files,
//! offline (the frontend's code over an in-memory store).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::bail;

use super::lines::{Lines, LinesState, no_audit_events, print_skipped, progress_bar, total_size};
use super::{AssemblyConfig, PipelineConfig, load_rules};
use crate::analysis::cascade::{InPart, render_text_in_part};
use crate::frontend::assemble::Scope;
use crate::frontend::display::Mode;
use crate::frontend::display::cascade::select_for_text;
use crate::frontend::offline::spilled_store_from_audit_lines;
use crate::frontend::raw::{TimeRange, from_nanos};
use crate::frontend::text::{TextOptions, render_text};
use crate::frontend::{Frontend, SearchQuery};

/// How `kascade trace` prints the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceFormat {
    /// A tree for the terminal.
    #[default]
    Text,
    /// The assembled trace as OTLP/JSON, in a display mode.
    OtlpJson,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 2] = [TraceFormat::Text, TraceFormat::OtlpJson];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Text => "text",
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
    /// Resource of the object, e.g. deployments.
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
    pub format: TraceFormat,
    /// Display mode for [`TraceFormat::OtlpJson`]; [`Mode::Cascade`] also
    /// in text (the cascades the object took part in).
    pub mode: Mode,
    /// Changed paths shown per write in text output.
    pub max_diff_lines: usize,
    /// Show the create/delete snapshots in text output.
    pub snapshots: bool,
    /// Directory of relation rule files; `None`: the built-in rules.
    pub rules: Option<PathBuf>,
    /// The secret key of the redaction markers; `None`: a random key.
    pub redaction_key_file: Option<PathBuf>,
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
            rules: None,
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
    // As `analyze` and `explain` read them: `.gz` too, a line that is not
    // UTF-8 skipped (not the whole file), errors named by file:line.
    let bar = progress_bar(total_size(&config.files)?);
    let shared = Arc::new(Mutex::new(LinesState::default()));
    let lines = Lines::new(config.files.clone(), bar.clone(), shared.clone());
    // The collector's pipeline at its defaults, with this window and these rules.
    let pipeline = PipelineConfig {
        window: config.assembly.window,
        rules: config.rules.clone(),
        redaction_key_file: config.redaction_key_file.clone(),
        ..PipelineConfig::default()
    };
    let rules = Arc::new(load_rules(pipeline.rules.as_deref())?);
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
    let store = Arc::new(store);
    let frontend = Frontend::new(store, config.assembly.frontend_config()?);
    let range = TimeRange::new(from_nanos(first), from_nanos(last));
    if let Some(cpid) = config.cpid {
        let Some(trace) = frontend.change_trace(cpid, range).await? else {
            bail!("no write of change {cpid} in the audit log");
        };
        // Every write, as the UI shows a change's trace.
        return print_cascades(&trace, config.format, &[]);
    }
    let mut tags = vec![
        ("cluster".to_string(), config.cluster.clone()),
        ("resource".to_string(), config.resource.clone()),
        ("namespace".to_string(), config.namespace.clone()),
        ("name".to_string(), config.name.clone()),
    ];
    if let Some(g) = &config.group {
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
        bail!(
            "no {} {}{} in the audit log (cluster {})",
            config.resource,
            if config.namespace.is_empty() {
                String::new()
            } else {
                format!("{}/", config.namespace)
            },
            config.name,
            config.cluster
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
        TraceFormat::Text => print!(
            "{}",
            render_text(
                &trace.assembly,
                &TextOptions {
                    max_diff_lines: config.max_diff_lines,
                    snapshots: config.snapshots,
                    max_siblings: config.assembly.max_siblings,
                }
            )
        ),
        TraceFormat::OtlpJson => {
            let data = opentelemetry_proto::tonic::trace::v1::TracesData {
                resource_spans: trace.resource_spans.clone(),
            };
            println!("{}", serde_json::to_string(&data)?);
        }
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
        TraceFormat::Text => {
            for note in trace.assembly.notes.iter() {
                println!("note: {note}");
            }
            print!("{}", render_text_in_part(&trace.cascades, in_part));
        }
        TraceFormat::OtlpJson => {
            let data = opentelemetry_proto::tonic::trace::v1::TracesData {
                resource_spans: trace.resource_spans.clone(),
            };
            println!("{}", serde_json::to_string(&data)?);
        }
    }
    Ok(())
}
