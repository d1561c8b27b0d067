//! The command line: clap's argument structs only, one file per
//! subcommand. Each maps onto its config in `crate::app` (which holds the
//! defaults the help shows, and the wiring that runs it).

pub(crate) mod analyze;
pub(crate) mod collect;
pub(crate) mod cpid_webhook;
pub(crate) mod docs;
pub(crate) mod doctor;
pub(crate) mod explain;
pub(crate) mod frontend;
pub(crate) mod pipeline;
pub(crate) mod replay;
pub(crate) mod rules;
pub(crate) mod trace;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub(crate) use analyze::AnalyzeArgs;
pub(crate) use collect::CollectArgs;
pub(crate) use cpid_webhook::CpidWebhookArgs;
pub(crate) use doctor::DoctorArgs;
pub(crate) use explain::ExplainArgs;
pub(crate) use frontend::{AssemblyArgs, FrontendArgs};
pub(crate) use pipeline::{ExportArgs, PipelineArgs};
pub(crate) use replay::ReplayArgs;
pub(crate) use rules::{RulesArgs, RulesCommand};
pub(crate) use trace::TraceArgs;

#[derive(Parser, Debug)]
#[command(
    name = "kascade",
    version,
    about = "Kubernetes control-plane activity as distributed traces"
)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        env = "KASCADE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// Colour logs and the explain report: `auto` on a terminal unless NO_COLOR is set (not empty), `always`, `never`.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value_t = ColorChoice::Auto,
        env = "KASCADE_COLOR"
    )]
    pub color: ColorChoice,
    /// Only warnings and errors on stderr: no INFO logs, progress bars or summaries (caps RUST_LOG at warn).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// What `--color` (its last use before `--`) or `KASCADE_COLOR` asks of
/// clap, which colours its help and errors before the flags are parsed.
/// Anything it cannot read is left to clap's `auto` (a terminal, unless
/// NO_COLOR), and to the parse to refuse.
fn color_asked(
    args: impl Iterator<Item = std::ffi::OsString>,
    env: Option<&str>,
) -> clap::ColorChoice {
    let mut asked = env.map(str::to_owned);
    let mut args = args.map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if let Some(value) = arg.strip_prefix("--color=") {
            asked = Some(value.to_owned());
        } else if arg == "--color" {
            asked = args.next();
        }
    }
    match asked.as_deref() {
        Some("always") => clap::ColorChoice::Always,
        Some("never") => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    }
}

pub(crate) use crate::telemetry::LogFormat;
pub(crate) use crate::terminal::ColorChoice;

impl Cli {
    /// Parses this process's command line, exiting on an error or after
    /// `--help`/`--version` as clap does; clap's own help and errors are
    /// coloured as `--color` asks, like everything else.
    pub fn parse_args() -> Self {
        let color = color_asked(
            std::env::args_os().skip(1),
            std::env::var("KASCADE_COLOR").ok().as_deref(),
        );
        let mut command = Cli::command().color(color);
        let matches = command.get_matches_mut();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut command).exit())
    }

    /// The terminal manners the flags ask for.
    pub fn manners(&self) -> crate::terminal::Manners {
        crate::terminal::Manners {
            color: self.color,
            quiet: self.quiet,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Receive the kube-apiserver audit webhook and export object traces.
    Collect(Box<CollectArgs>),
    /// Feed audit log files (JSON lines) through the pipeline, flush, exit.
    Replay(ReplayArgs),
    /// Serve assembled object traces to the Jaeger UI (Jaeger remote storage API v2) and /redirect.
    Frontend(FrontendArgs),
    /// Print the assembled trace of one object from audit log files, offline.
    Trace(TraceArgs),
    /// Propagation statistics from audit log files: hop latency per edge class, histograms, plots.
    Analyze(AnalyzeArgs),
    /// What went wrong, from audit log files: failed writes, Warning Events, unfinished cascades, root cause first.
    Explain(ExplainArgs),
    /// Mutating admission webhook: a fresh change propagation ID (CPID) on each user write that carries none.
    CpidWebhook(CpidWebhookArgs),
    /// Why no (or poor) data arrives: audit events per cluster, cluster names, audit level, list-watch RBAC, clock skew, export health, frontend; each problem with its fix.
    Doctor(DoctorArgs),
    /// The relation rules: check rule files, list the effective rules.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// Print the shell completion script for SHELL on stdout (e.g. `kascade completions bash > /etc/bash_completion.d/kascade`).
    Completions {
        /// The shell the script is for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, or write one page per subcommand into a directory.
    Man {
        /// Write kascade.1 and kascade-SUBCOMMAND.1 for every subcommand into DIR (created if missing) instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// A value enum whose variants and names the library defines (`ALL`,
/// `name()`), so the library needs no clap.
macro_rules! value_enum_by_name {
    ($t:ty) => {
        impl clap::ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                &<$t>::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()))
            }
        }
    };
}
pub(crate) use value_enum_by_name;

impl Command {
    /// What this subcommand is for self-tracing (its default service name,
    /// and the object spans' service it must not use).
    pub fn telemetry_role(&self) -> crate::telemetry::Role<'_> {
        let (component, object_service) = match self {
            Command::Collect(a) => (
                "collect",
                Some((a.export.service_name.as_str(), "--service-name")),
            ),
            Command::Replay(a) => (
                "replay",
                Some((a.export.service_name.as_str(), "--service-name")),
            ),
            Command::Frontend(a) => ("frontend", Some((a.raw_service.as_str(), "--raw-service"))),
            Command::Trace(_) => ("trace", None),
            Command::Analyze(_) => ("analyze", None),
            Command::Explain(_) => ("explain", None),
            Command::CpidWebhook(_) => ("cpid-webhook", None),
            Command::Doctor(_) => ("doctor", None),
            Command::Rules { .. } => ("rules", None),
            Command::Completions { .. } => ("completions", None),
            Command::Man { .. } => ("man", None),
        };
        crate::telemetry::Role {
            component,
            object_service,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_a_default_service_of_its_own() {
        use clap::Parser as _;
        let cases = [
            (
                vec!["kascade", "collect"],
                "collect",
                Some("--service-name"),
            ),
            (
                vec!["kascade", "replay", "x.log"],
                "replay",
                Some("--service-name"),
            ),
            (
                vec!["kascade", "frontend", "--jaeger-url", "http://j:16686"],
                "frontend",
                Some("--raw-service"),
            ),
        ];
        for (argv, component, flag) in cases {
            let cli = Cli::try_parse_from(&argv).unwrap();
            let role = cli.command.telemetry_role();
            assert_eq!(role.component, component);
            assert_eq!(role.object_service.map(|(_, f)| f), flag);
            assert_ne!(
                role.object_service.map(|(s, _)| s.to_string()),
                Some(format!("kascade-{component}"))
            );
        }
    }
}
