use clap::Parser;
use kascade::cli::{Cli, Command, RulesCommand};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let telemetry = match kascade::telemetry::init(
        cli.log_format,
        kascade::telemetry::Role::of(&cli.command),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Collect(args) => kascade::cli::run_collect(*args).await,
        Command::Replay(args) => kascade::cli::run_replay(args).await,
        Command::Frontend(args) => kascade::cli_frontend::run_frontend(args).await,
        Command::Trace(args) => kascade::cli_frontend::run_trace(args).await,
        Command::Rules {
            command: RulesCommand::Check { dir },
        } => kascade::cli::run_rules_check(&dir),
    };
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
