use clap::Parser;
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
        Command::Collect(args) => kascade::cli::run_collect(*args).await,
        Command::Replay(args) => kascade::cli::run_replay(args).await,
        Command::Frontend(args) => kascade::cli_frontend::run_frontend(args).await,
        Command::Trace(args) => kascade::cli_frontend::run_trace(args).await,
        Command::Rules {
            command: RulesCommand::Check { dir },
        } => kascade::cli::run_rules_check(&dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
