//! The command line: clap's argument structs only, one file per
//! subcommand. Each maps onto its config in `crate::app` (which holds the
//! defaults the help shows, and the wiring that runs it).

pub mod collect;
pub mod frontend;
pub mod pipeline;
pub mod replay;
pub mod trace;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use collect::{CollectArgs, SpanCacheArgs, WatchArgs};
pub use frontend::{AssemblyArgs, FrontendArgs};
pub use pipeline::{ExportArgs, PipelineArgs};
pub use replay::ReplayArgs;
pub use trace::TraceArgs;

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
    #[command(subcommand)]
    pub command: Command,
}

/// How kascade's own logs are written (on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
    /// Work with relation rule files.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Validate every rule file in DIR; exits non-zero naming each bad rule.
    Check {
        /// Directory of *.yaml rule files.
        dir: PathBuf,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
