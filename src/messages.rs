//! Text kascade writes about input and errors: untrusted input quoted and
//! cut (never echoed whole: a 1 MiB tag value in a gRPC status or a log line
//! helps nobody and can break the answer), messages sent back clipped,
//! error chains on one line, and repeated warnings let through at most once
//! per interval.

/// Characters of an input quoted in an error message.
pub(crate) const QUOTE_CHARS: usize = 200;
/// Longest error message sent back (HTTP body, gRPC status message).
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// `s` as a quoted string for an error message, cut after [`QUOTE_CHARS`]
/// characters with its full length noted: `"aaaa…" (1048576 bytes)`.
pub(crate) fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_CHARS) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &s[..cut], s.len()),
    }
}

/// A message sent back to a client, cut at [`MAX_MESSAGE_BYTES`]: the last
/// guard for messages that embed input or answers of other services.
pub(crate) fn clip_message(mut msg: String) -> String {
    if msg.len() > MAX_MESSAGE_BYTES {
        let total = msg.len();
        let mut cut = MAX_MESSAGE_BYTES;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push_str(&format!("… ({total} bytes)"));
    }
    msg
}

/// The error and its causes on one line, as anyhow's `{:#}` writes them,
/// without a cause the line already says: some errors quote their source
/// in their own message and give it as their source too (kube's kubeconfig
/// errors and hyper's connect errors do), which read `…: No such file or
/// directory (os error 2): No such file or directory (os error 2)`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// Lets a repeated warning through at most once per interval (the rest are
/// only counted, in a metric the caller keeps).
pub(crate) struct LogEvery {
    every: std::time::Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl LogEvery {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        LogEvery {
            every,
            last: std::sync::Mutex::new(None),
        }
    }

    /// True for the first call, then for the first call after each interval.
    pub(crate) fn should_log(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= self.every);
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        // kube's own error for a kubeconfig that is not there.
        let e = kube::config::Kubeconfig::read_from("/nonexistent/kubeconfig").unwrap_err();
        let line = error_chain(&e);
        assert_eq!(
            line.matches("No such file or directory").count(),
            1,
            "{line}"
        );
        // Context and causes are all there, in order, as with anyhow's `{:#}`.
        let wrapped = anyhow::Error::new(e).context("--watch-cluster x: not a readable kubeconfig");
        let line = error_chain(wrapped.as_ref());
        assert!(
            line.starts_with(
                "--watch-cluster x: not a readable kubeconfig: failed to read kubeconfig from"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("No such file or directory (os error 2)"),
            "{line}"
        );
        assert_eq!(
            line.matches("No such file or directory").count(),
            1,
            "{line}"
        );
    }

    #[test]
    fn long_inputs_are_quoted_cut_with_their_length() {
        assert_eq!(quote("pods"), "\"pods\"");
        let long = "é".repeat(1 << 19);
        let q = quote(&long);
        assert!(q.len() < 500, "{}", q.len());
        assert!(q.ends_with("… (1048576 bytes)"), "{q}");
        assert!(q.starts_with(&format!("\"{}", "é".repeat(QUOTE_CHARS))));
    }

    #[test]
    fn messages_are_clipped_on_a_char_boundary() {
        assert_eq!(clip_message("short".into()), "short");
        let m = clip_message("ü".repeat(MAX_MESSAGE_BYTES));
        assert!(m.len() <= MAX_MESSAGE_BYTES + 20);
        assert!(m.ends_with(&format!("… ({} bytes)", 2 * MAX_MESSAGE_BYTES)));
    }
}
