//! What the offline commands say of their input besides the lines: the
//! progress bar, the total size, an input with no audit event, the clock
//! notes and the malformed lines skipped.

use std::path::PathBuf;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};

use super::{LinesState, STDIN};

/// A progress bar over `total` bytes, drawn only when stderr is a terminal
/// (and not under `--quiet`).
pub(in crate::app) fn progress_bar(total: u64) -> ProgressBar {
    let bar = crate::terminal::progress_bar(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .expect("static template"),
    );
    bar
}

/// The total size of `files` (for the progress bar; standard input counts
/// nothing); fails naming the first file that cannot be read.
pub(in crate::app) fn total_size(files: &[PathBuf]) -> anyhow::Result<u64> {
    let mut total = 0;
    for f in files.iter().filter(|f| f.as_os_str() != STDIN) {
        total += std::fs::metadata(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .len();
    }
    Ok(total)
}

/// The error of an input that holds no audit event at all, or `None`: the
/// files have no line but blank ones (`lines` 0), or every line is
/// malformed (`first_malformed` the first, as `file:line: why`). A wrong
/// path or an empty artefact must not read as "nothing went wrong".
pub(in crate::app) fn no_audit_events(
    files: &[PathBuf],
    lines: u64,
    malformed: u64,
    first_malformed: Option<&str>,
) -> Option<anyhow::Error> {
    let why = if lines == 0 {
        if files.len() == 1 {
            "the file is empty".to_string()
        } else {
            "the files are empty".to_string()
        }
    } else if malformed == lines {
        first_malformed
            .unwrap_or("every line is malformed")
            .to_string()
    } else {
        return None;
    };
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    Some(anyhow::anyhow!(
        "no audit events in {}: {why}",
        names.join(", ")
    ))
}

/// Says on stderr (unless `--quiet`) how the files' clocks were corrected
/// ([`Lines::correcting_clocks`]), for the commands whose output has no
/// place for notes.
pub(in crate::app) fn print_clock_notes(st: &LinesState) {
    if !crate::terminal::quiet() {
        for note in st.clock_notes() {
            eprintln!("note: {note}");
        }
    }
}

/// Says the malformed lines skipped on stderr: the first `max_shown` of
/// `located` (as `file:line: why`), then how many more of `malformed` there
/// were.
pub(in crate::app) fn print_skipped(located: &[String], malformed: usize, max_shown: usize) {
    for e in located.iter().take(max_shown) {
        eprintln!("{e} (skipped)");
    }
    if malformed > max_shown {
        eprintln!(
            "… and {} more malformed lines (skipped)",
            malformed - max_shown
        );
    }
}
