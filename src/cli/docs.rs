//! `kascade completions SHELL` and `kascade man`: the command line
//! described for shells and for `man`, from the same definition as --help.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory as _;

use super::Cli;

/// The completion script for `shell` on stdout.
pub(crate) fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    // Generated into memory: clap_complete panics on a failed write, and a
    // closed stdout is the reader's choice, not a failure.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "kascade", &mut script);
    let script = String::from_utf8(script).context("the completion script is not UTF-8")?;
    crate::terminal::print(&script).context("writing the completion script")
}

/// The top man page on stdout, or with `dir` one page per (sub)command
/// written there; returns the files written.
pub(crate) fn man(dir: Option<&Path>) -> anyhow::Result<Vec<PathBuf>> {
    let Some(dir) = dir else {
        let page = render(Cli::command())?;
        crate::terminal::print(&page).context("writing the man page")?;
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the man page directory {}", dir.display()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Built, subcommands know their full names (`kascade-rules-check`).
    cmd.build();
    let mut written = Vec::new();
    let mut pending = vec![cmd];
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = dir.join(page(cmd.clone()).get_filename());
        let page = render(cmd)?;
        std::fs::write(&path, page)
            .with_context(|| format!("cannot write the man page {}", path.display()))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

/// The page of `cmd`, titled in capitals as man pages are (`KASCADE-TRACE`).
fn page(cmd: clap::Command) -> clap_mangen::Man {
    let mut cmd = cmd;
    cmd.build();
    let title = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_uppercase();
    clap_mangen::Man::new(cmd)
        .title(title)
        .source(format!("kascade {}", env!("CARGO_PKG_VERSION")))
}

fn render(cmd: clap::Command) -> anyhow::Result<String> {
    let mut text = Vec::new();
    page(cmd)
        .render(&mut text)
        .context("rendering the man page")?;
    String::from_utf8(text).context("the man page is not UTF-8")
}
