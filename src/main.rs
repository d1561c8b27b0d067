use kascade::app;
use kascade::cli::{Cli, Command, RulesCommand};

fn main() -> std::process::ExitCode {
    kascade::disable_transparent_huge_pages();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(kascade::json::depth::THREAD_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    let cli = Cli::parse_args();
    kascade::terminal::init(cli.manners());
    let telemetry = match kascade::telemetry::init(cli.log_format, cli.command.telemetry_role()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut findings = false;
    let mut broken = false;
    let result = match cli.command {
        Command::Explain(args) => app::explain::run(args.into()).await.map(|f| {
            findings = f;
        }),
        Command::Collect(args) => app::collect::run((*args).into()).await,
        Command::Replay(args) => app::replay::run(args.into()).await,
        Command::Frontend(args) => app::frontend::run(args.into()).await,
        Command::Trace(args) => app::trace::run(args.into()).await,
        Command::Analyze(args) => app::analyze::run(args.into()).await,
        Command::CpidWebhook(args) => app::cpid_webhook::run(args.into()).await,
        Command::Doctor(args) => app::doctor::run(args.into()).await.map(|b| {
            broken = b;
        }),
        Command::Rules {
            command:
                RulesCommand::Check {
                    dir,
                    no_builtin_rules,
                },
        } => app::run_rules_check(&dir, !no_builtin_rules),
        Command::Rules {
            command: RulesCommand::List { rules },
        } => app::run_rules_list(&rules.into()),
        Command::Completions { shell } => kascade::cli::docs::print_completions(shell),
        Command::Man { dir } => kascade::cli::docs::man(dir.as_deref()).map(|written| {
            if let Some(dir) = dir.filter(|_| !cli.quiet) {
                eprintln!("wrote {} man pages to {}", written.len(), dir.display());
            }
        }),
    };
    telemetry.shutdown();
    match result {
        Ok(()) if broken => std::process::ExitCode::from(app::doctor::BROKEN_EXIT_CODE),
        Ok(()) if findings => std::process::ExitCode::from(app::explain::FINDINGS_EXIT_CODE),
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", kascade::bounds::error_chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}
