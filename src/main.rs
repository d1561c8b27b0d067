use clap::Parser;
use kascade::app;
use kascade::cli::{Cli, Command, LogFormat, RulesCommand};
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Collect(args) => app::collect::run((*args).into()).await,
        Command::Replay(args) => app::replay::run(args.into()).await,
        Command::Frontend(args) => app::frontend::run(args.into()).await,
        Command::Trace(args) => app::trace::run(args.into()).await,
        Command::Rules {
            command: RulesCommand::Check { dir },
        } => app::run_rules_check(&dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
