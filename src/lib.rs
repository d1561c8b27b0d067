//! kascade: the Kubernetes control plane as distributed traces.
//!
//! Data flow: `source` (audit webhook, audit files, list-watch) → `aggregate`
//! (windows, span cache, diffs, relations, rules) → `export` (OTLP,
//! OTLP/JSON); what passes between them is defined in `flow`.
//!
//! The library's API is small: [`main`] runs the command line, and [`app`]
//! holds each subcommand as a config (with `Default` and builders) and its
//! `run`, for embedding one in another program. Everything else is
//! internal; the crate's own tests, benches and fuzz targets reach it
//! through the `test-support` feature (`src/test_support.rs`).

#![cfg_attr(not(feature = "test-support"), warn(missing_docs))]
// Checked with the crate's own tests, benches and fuzz targets in view
// (`cargo clippy --all-targets` turns `test-support` on): whatever they do
// not reach and the API does not name is `pub(crate)` or private. Without
// them (the binary's build) nothing is dead: what only they use is built
// only with `test-support`.
#![cfg_attr(feature = "test-support", warn(unreachable_pub))]

mod aggregate;
mod analysis;
pub mod app;
mod bounds;
mod cli;
mod client_tls;
mod component_spans;
mod coordination;
mod cpid_webhook;
mod doctor;
mod export;
mod flow;
mod frontend;
mod internal_events;
mod json;
mod judgement;
mod messages;
mod metrics;
mod model;
mod offline;
mod output_file;
mod resources;
mod self_trace;
mod source;
mod span_model;
mod telemetry;
mod terminal;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support;

use cli::{Cli, Command, RulesCommand};

/// Runs the `kascade` command line (the binary's whole `main`): parses the
/// arguments, starts the runtime and logging, runs the subcommand and
/// returns its exit code.
pub fn main() -> std::process::ExitCode {
    disable_transparent_huge_pages();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(crate::json::depth::THREAD_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime.block_on(run_command_line()),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run_command_line() -> std::process::ExitCode {
    let cli = Cli::parse_args();
    crate::terminal::init(cli.manners());
    let telemetry = match crate::telemetry::init(cli.log_format, cli.command.telemetry_role()) {
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
        Command::Completions { shell } => crate::cli::docs::print_completions(shell),
        Command::Man { dir } => crate::cli::docs::man(dir.as_deref()).map(|written| {
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
            eprintln!("error: {}", crate::messages::error_chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

// The pipeline allocates many small strings per event, and memory freed
// on one thread is often allocated on another (the webhook decodes, the
// shards free). jemalloc, purging freed pages from a background thread,
// measured as fast per event as mimalloc and kept the collector's peak RSS
// 40–60 MiB lower (measured with the collector benchmark, docs/benchmarks.md).
// Not in the crate's unit tests: they link the library a second time (the
// dev-dependency that turns `test-support` on), whose allocator they use.
#[cfg(not(test))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Has jemalloc's background thread return freed pages to the OS once they
/// have been unused for `ms` milliseconds (jemalloc's default is 10 s),
/// in every arena, present and future — unless `_RJEM_MALLOC_CONF` is set,
/// whose settings are then left as they are. `kascade frontend` frees tens
/// of MB at the end of each assembly; kept 10 s, they stood beside the
/// trace cache and doubled its resident size (docs/benchmarks.md, *The frontend's peak
/// memory*). Returns the setting in force afterwards.
pub fn return_freed_pages_after(ms: u32) -> Result<isize, tikv_jemalloc_ctl::Error> {
    use tikv_jemalloc_ctl::raw;
    if std::env::var_os("_RJEM_MALLOC_CONF").is_none() {
        let ms = ms as isize;
        // SAFETY: the names are jemalloc's `ssize_t` settings, written as
        // `isize`.
        unsafe { raw::write(b"arenas.dirty_decay_ms\0", ms)? };
        // The arenas made already, one by one (there is no "all" for this
        // setting); an index not made yet is refused, and takes the default
        // just set when it is. Only to shorten: the arena of huge
        // allocations returns them at once (0) and keeps doing so.
        for i in 0..tikv_jemalloc_ctl::arenas::narenas::read()? {
            let name = format!("arena.{i}.dirty_decay_ms\0");
            // SAFETY: as above.
            unsafe {
                if raw::read::<isize>(name.as_bytes()).is_ok_and(|now| now > ms) {
                    raw::write(name.as_bytes(), ms)?;
                }
            }
        }
    }
    // SAFETY: an `ssize_t` setting read as `isize`.
    unsafe { raw::read(b"arenas.dirty_decay_ms\0") }
}

/// Turns transparent huge pages off for this process (Linux), unless
/// `KASCADE_ALLOW_THP` is set: a 2 MiB page partly used by long-lived small
/// objects stays resident whole — the collector's peak RSS was ≈ 50 MiB
/// higher with them, for no measurable speed (see docs/benchmarks.md). Call
/// first thing in `main`, before the runtime allocates much.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("KASCADE_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and only
        // sets a flag on this process.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}
