//! The command line's manners on a terminal: colour only where it can be
//! seen (`--color`, `NO_COLOR`), nothing but warnings and errors on stderr
//! when asked (`--quiet`), human text wrapped to the terminal's width
//! (`COLUMNS`), and a reader of stdout that goes away (`| head`) ending the
//! output quietly.
//!
//! The choices are the process's, like the terminal itself: `main` sets
//! them once ([`init`]) before anything is printed; a library user who does
//! not gets colour on terminals and progress output.

use std::ffi::OsString;
use std::io::{IsTerminal as _, Write as _};
use std::sync::OnceLock;

/// When kascade colours its output (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set and not empty (or `TERM=dumb`).
    #[default]
    Auto,
    /// Also when piped or redirected.
    Always,
    /// Nowhere.
    Never,
}

/// What the command line asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Manners {
    pub color: ColorChoice,
    /// Only warnings and errors on stderr: no INFO logs, no progress bars,
    /// no summaries.
    pub quiet: bool,
}

static MANNERS: OnceLock<Manners> = OnceLock::new();

/// Sets the process's manners; the first call wins.
pub(crate) fn init(manners: Manners) {
    let _ = MANNERS.set(manners);
}

fn manners() -> Manners {
    MANNERS.get().copied().unwrap_or_default()
}

/// Whether `--quiet` was given.
pub(crate) fn quiet() -> bool {
    manners().quiet
}

/// A progress bar over `total` (drawn by indicatif only when stderr is a
/// terminal), hidden under `--quiet`.
pub(crate) fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if quiet() {
        indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::hidden(),
        )
    } else {
        indicatif::ProgressBar::new(total)
    }
}

/// The streams kascade writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Whether to colour what is written to `stream`.
pub(crate) fn colors(stream: Stream) -> bool {
    let is_terminal = match stream {
        Stream::Stdout => std::io::stdout().is_terminal(),
        Stream::Stderr => std::io::stderr().is_terminal(),
    };
    color_wanted(manners().color, is_terminal, &|k| std::env::var_os(k))
}

/// `auto` colours a terminal unless `NO_COLOR` is set and not empty
/// (no-color.org) or the terminal says it has no colours (`TERM=dumb`).
fn color_wanted(
    choice: ColorChoice,
    is_terminal: bool,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            is_terminal
                && env("NO_COLOR").is_none_or(|v| v.is_empty())
                && env("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// The width stdout's human text is wrapped to: `COLUMNS` when it is set
/// to a number, else the terminal's when stdout is one; `None` (one line
/// per item, for grep and CI logs) otherwise.
pub(crate) fn stdout_width() -> Option<usize> {
    width_from(std::env::var("COLUMNS").ok().as_deref(), || {
        if std::io::stdout().is_terminal() {
            console::Term::stdout()
                .size_checked()
                .map(|(_, cols)| usize::from(cols))
        } else {
            None
        }
    })
}

fn width_from(columns: Option<&str>, terminal: impl FnOnce() -> Option<usize>) -> Option<usize> {
    // A COLUMNS that is not a width (empty, 0, text) is the shell's
    // business, not an error of kascade's: the terminal decides then.
    match columns.and_then(|c| c.trim().parse::<usize>().ok()) {
        Some(w) if w > 0 => Some(w),
        _ => terminal().filter(|w| *w > 0),
    }
}

/// Human text for stdout, wrapped to [`stdout_width`] when there is one.
pub(crate) fn fit_to_stdout(text: String) -> String {
    match stdout_width() {
        Some(width) => wrap_lines(&text, width),
        None => text,
    }
}

/// Characters of the tree drawn in front of a line (`├─ `, `│  `) and its
/// indentation.
const TREE: &[char] = &[' ', '│', '├', '└', '─'];

/// Continuation lines go this much deeper than the tree they belong to,
/// so they do not read as a line of their own.
const CONTINUATION_INDENT: &str = "    ";

/// Text kept per continuation line however deep the tree (a deeper tree
/// overflows the width rather than wrap one word per line).
const MIN_TEXT_WIDTH: usize = 24;

/// `text` with each line wider than `width` wrapped at spaces (a word
/// wider than a line is broken). A continuation line keeps the tree in
/// front of its line (`├─` becomes `│`, `└─` blank), a `│` where the
/// line's own children follow below it, and is indented further.
pub(crate) fn wrap_lines(text: &str, width: usize) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if textwrap::core::display_width(line) <= width {
            out.push_str(line);
            continue;
        }
        let body_at = line.find(|c| !TREE.contains(&c)).unwrap_or(line.len());
        let (prefix, body) = line.split_at(body_at);
        let continuation = continuation_prefix(prefix, lines.get(i + 1).copied());
        let options = textwrap::Options::new(
            width.max(textwrap::core::display_width(&continuation) + MIN_TEXT_WIDTH),
        )
        .initial_indent(prefix)
        .subsequent_indent(&continuation)
        // First fit never goes past the width (optimal fit may, to even
        // out the lines).
        .wrap_algorithm(textwrap::WrapAlgorithm::FirstFit)
        .word_separator(textwrap::WordSeparator::AsciiSpace)
        // Names and times hold hyphens (`rollout-demo/web-7d876db474`,
        // `2026-11-23T…`): a line breaks between words, never inside one
        // (unless the word alone is wider than the line).
        .word_splitter(textwrap::WordSplitter::NoHyphenation);
        for (j, part) in textwrap::wrap(body, options).iter().enumerate() {
            if j > 0 {
                out.push('\n');
            }
            out.push_str(part);
        }
    }
    out
}

/// The indentation of a continuation of the line drawn behind `prefix`,
/// `next` the line after it.
fn continuation_prefix(prefix: &str, next: Option<&str>) -> String {
    let mut out: String = prefix
        .chars()
        .map(|c| match c {
            '├' => '│',
            '└' | '─' => ' ',
            c => c,
        })
        .collect();
    // The line's children hang from the column where its text starts.
    let child_below = next
        .and_then(|n| n.chars().nth(prefix.chars().count()))
        .is_some_and(|c| matches!(c, '│' | '├' | '└'));
    out.push(if child_below { '│' } else { ' ' });
    out.push_str(CONTINUATION_INDENT);
    out
}

/// Writes `text` on stdout. A reader that has gone away (`kascade … | head`)
/// ends the output: that is not an error, the rest is not written, and the
/// command exits as it would have.
pub(crate) fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn colour_under_auto_only_on_a_terminal_and_without_no_color() {
        use ColorChoice::*;
        assert!(color_wanted(Auto, true, &env(&[])));
        assert!(!color_wanted(Auto, false, &env(&[])));
        assert!(!color_wanted(Auto, true, &env(&[("NO_COLOR", "1")])));
        // no-color.org: an empty NO_COLOR does not count.
        assert!(color_wanted(Auto, true, &env(&[("NO_COLOR", "")])));
        assert!(!color_wanted(Auto, true, &env(&[("TERM", "dumb")])));
        assert!(color_wanted(Always, false, &env(&[("NO_COLOR", "1")])));
        assert!(!color_wanted(Never, true, &env(&[])));
    }

    #[test]
    fn columns_wins_over_the_terminal_unless_it_is_no_width() {
        assert_eq!(width_from(Some("80"), || Some(200)), Some(80));
        assert_eq!(width_from(Some("0"), || Some(200)), Some(200));
        assert_eq!(width_from(Some("wide"), || None), None);
        assert_eq!(width_from(None, || None), None);
    }

    /// The cascade tree `kascade trace --mode cascade` prints for the
    /// rollout-stuck fixture (its first lines, as printed).
    const CASCADE: &str = "\
+0.000s  kascade-e2e-admin create deployments rollout-demo/web 201  → InProgress: generation 1 not yet observed by the controller  ★
└─ +0.020s  system:serviceaccount:kube-system:deployment-controller create replicasets rollout-demo/web-7d876db474 201  [deployments → replicasets create, hop 11.052ms]  ★
   ├─ +0.042s  system:serviceaccount:kube-system:replicaset-controller create pods rollout-demo/web-7d876db474-5tfnd 201  [replicasets → pods create, hop 17.769ms]
   │  └─ +0.054s  system:kube-scheduler create binding pods rollout-demo/web-7d876db474-5tfnd 201  [pods binding, hop 5.244ms]  → InProgress: Pending
   └─ +0.066s  system:serviceaccount:kube-system:replicaset-controller update status replicasets rollout-demo/web-7d876db474 200";

    #[test]
    fn wrapped_tree_lines_keep_the_tree_and_fit() {
        let wrapped = wrap_lines(CASCADE, 60);
        for line in wrapped.lines() {
            assert!(
                textwrap::core::display_width(line) <= 60,
                "{line:?} in\n{wrapped}"
            );
        }
        let lines: Vec<&str> = wrapped.lines().collect();
        // The root's children hang below it: its continuation carries the
        // tree's line down to them.
        assert!(lines[1].starts_with("│    "), "{wrapped}");
        // A last child's continuation has no line of its parent's level…
        let last = lines.iter().position(|l| l.starts_with("└─ ")).unwrap();
        assert!(lines[last + 1].starts_with("   │    "), "{wrapped}");
        // …and a leaf's none of its own.
        let leaf = lines
            .iter()
            .position(|l| l.starts_with("   │  └─ "))
            .unwrap();
        assert!(lines[leaf + 1].starts_with("   │         "), "{wrapped}");
        // All the text is still there, in order (a word wider than a
        // continuation line, `system:serviceaccount:…`, broken).
        let printed = |t: &str| {
            t.chars()
                .filter(|c| !c.is_whitespace() && !TREE.contains(c))
                .collect::<String>()
        };
        assert_eq!(printed(&wrapped), printed(CASCADE));
    }

    #[test]
    fn short_lines_and_blank_lines_are_left_as_they_are() {
        let text = "kascade explain everything: 1 error\n\n       when   now\n";
        assert_eq!(wrap_lines(text, 40), text);
    }
}
