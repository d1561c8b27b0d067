//! `kascade replay`: audit log files (JSON lines, as the apiserver's log
//! backend writes them) fed through the same pipeline as the webhook.

use std::path::PathBuf;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader, ReadBuf};

use super::audit::AuditFilter;
use super::exports::parse_line;
use crate::flow::{AdmitError, Intake};
use crate::metrics::{Metrics, RejectReason, Source};

/// Longest line kept: an audit event carries at most a request and a response
/// object (each under the apiserver's 3 MiB request limit). A longer line is
/// reported and skipped without being held in memory.
pub(crate) const MAX_LINE_BYTES: usize = 64 << 20;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// `what` names the file (and line).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A line that is no audit event, with `--strict`.
    #[error("{0}")]
    Malformed(String),
    #[error(transparent)]
    Admit(#[from] AdmitError),
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> ReplayError {
    move |source| ReplayError::Io { what, source }
}

#[derive(Debug, Default, Clone)]
pub struct ReplayStats {
    /// Lines that were not blank.
    pub lines: u64,
    pub accepted: u64,
    pub bad_lines: u64,
    /// The first malformed line, as `file:line: why`.
    pub first_bad: Option<String>,
    /// Events logged more than once, replayed once.
    pub repeats: u64,
    /// Events whose key the repeat filter let go (see
    /// [`Repeats`](super::repeats::Repeats)): a copy
    /// of one logged later would be replayed again.
    pub repeat_keys_forgotten: u64,
}

pub async fn replay_files(
    files: &[PathBuf],
    cluster: &str,
    filter: &AuditFilter,
    intake: &Intake,
    strict: bool,
    metrics: &Arc<Metrics>,
) -> Result<ReplayStats, ReplayError> {
    let mut total = 0;
    // `-` is standard input (its size is not known).
    let stdin = |f: &PathBuf| f.as_os_str() == "-";
    for f in files.iter().filter(|f| !stdin(f)) {
        total += std::fs::metadata(f)
            .map_err(io_error(format!("cannot read audit log {}", f.display())))?
            .len();
    }
    let bar = crate::terminal::progress_bar(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
        )
        .expect("static template"),
    );
    let to = ReplayInto {
        cluster,
        filter,
        intake,
        strict,
        metrics,
    };
    let mut feeder = LineFeeder::new(to, bar.clone());
    for f in files {
        let gzipped = f.extension().is_some_and(|e| e == "gz");
        let reader: Box<dyn AsyncRead + Send + Unpin> = if stdin(f) {
            Box::new(tokio::io::stdin())
        } else if gzipped {
            let file = std::fs::File::open(f)
                .map_err(io_error(format!("cannot open audit log {}", f.display())))?;
            Box::new(Inflated::of(file))
        } else {
            Box::new(
                tokio::fs::File::open(f)
                    .await
                    .map_err(io_error(format!("cannot open audit log {}", f.display())))?,
            )
        };
        let mut reader = BufReader::new(reader);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            // Bytes, not `lines()`: one undecodable line must not end the replay.
            let (consumed, too_long) = match next_line(&mut reader, &mut buf, MAX_LINE_BYTES).await
            {
                Ok(read) => read,
                // A gzipped log cut short (a CI artefact) is read up to
                // its damage, as `explain` reads it.
                Err(e) if gzipped => {
                    bar.suspend(|| {
                        tracing::warn!(
                            "{}: damaged after line {line_no} ({e}): read up to there",
                            f.display()
                        )
                    });
                    break;
                }
                Err(source) => {
                    return Err(ReplayError::Io {
                        what: format!("{}:{}: cannot read", f.display(), line_no + 1),
                        source,
                    });
                }
            };
            if consumed == 0 {
                break;
            }
            line_no += 1;
            bar.inc(consumed as u64);
            let line = if too_long {
                Err(format!("longer than {MAX_LINE_BYTES} bytes"))
            } else {
                crate::json::utf8(&buf).map_err(|e| format!("not UTF-8 ({e})"))
            };
            feeder
                .feed(line, || format!("{}:{line_no}", f.display()))
                .await?;
        }
    }
    Ok(feeder.finish())
}

/// Lines already merged from several files (by time, as the offline
/// commands read them), fed as [`replay_files`] feeds each file's:
/// `locate` names a line (`file:line`) by its number in the merge (from 1).
/// Reading and its progress are the caller's.
pub(crate) async fn replay_merged(
    mut lines: tokio::sync::mpsc::Receiver<String>,
    locate: impl Fn(u64) -> String,
    bar: ProgressBar,
    to: ReplayInto<'_>,
) -> Result<ReplayStats, ReplayError> {
    let mut feeder = LineFeeder::new(to, bar);
    let mut n = 0u64;
    while let Some(line) = lines.recv().await {
        n += 1;
        feeder.feed(Ok(&line), || locate(n)).await?;
    }
    Ok(feeder.finish())
}

/// Where replayed lines go, and how strictly they are read.
pub(crate) struct ReplayInto<'a> {
    /// Cluster name recorded on every span.
    pub cluster: &'a str,
    pub filter: &'a AuditFilter,
    pub intake: &'a Intake,
    /// Stop at the first malformed line.
    pub strict: bool,
    pub metrics: &'a Arc<Metrics>,
}

/// Each line through the source's parsing and filter into the intake,
/// counted; an event logged more than once (a file given twice, rotated
/// logs that overlap) is fed once.
struct LineFeeder<'a> {
    to: ReplayInto<'a>,
    bar: ProgressBar,
    source: crate::metrics::SourceLabel,
    /// The events fed already (bounded).
    seen: super::repeats::Repeats,
    stats: ReplayStats,
}

impl<'a> LineFeeder<'a> {
    fn new(to: ReplayInto<'a>, bar: ProgressBar) -> Self {
        LineFeeder {
            to,
            bar,
            source: Metrics::source(Source::Replay),
            seen: super::repeats::Repeats::default(),
            stats: ReplayStats::default(),
        }
    }

    /// One line (or why it could not be read as text); `locate` names it.
    async fn feed(
        &mut self,
        line: Result<&str, String>,
        locate: impl FnOnce() -> String,
    ) -> Result<(), ReplayError> {
        if line.as_ref().is_ok_and(|l| l.trim().is_empty()) {
            return Ok(());
        }
        self.stats.lines += 1;
        self.to
            .metrics
            .events_received
            .get_or_create(&self.source)
            .inc();
        let ev = match line.and_then(parse_line) {
            Ok(ev) => ev,
            Err(e) => {
                self.stats.bad_lines += 1;
                self.to
                    .metrics
                    .events_rejected
                    .get_or_create(&Metrics::rejected(RejectReason::Malformed))
                    .inc();
                let msg = format!("{}: {e}", locate());
                if self.to.strict {
                    self.bar.abandon();
                    return Err(ReplayError::Malformed(msg));
                }
                self.bar.suspend(|| tracing::warn!("{msg} (skipped)"));
                self.stats.first_bad.get_or_insert(msg);
                return Ok(());
            }
        };
        if !self.seen.first_time(ev.once_key(), ev.stage_timestamp) {
            self.stats.repeats += 1;
            return Ok(());
        }
        if let Some(item) = super::accept(ev, self.to.cluster, self.to.filter, self.to.metrics) {
            self.stats.accepted += 1;
            self.to
                .metrics
                .events_accepted
                .get_or_create(&self.source)
                .inc();
            self.to.intake.submit(item).await?;
        }
        if self.stats.lines.is_multiple_of(1024) {
            self.bar
                .set_message(format!("{} events", self.stats.accepted));
        }
        Ok(())
    }

    fn finish(mut self) -> ReplayStats {
        self.bar
            .finish_with_message(format!("{} events", self.stats.accepted));
        self.stats.repeat_keys_forgotten = self.seen.forgotten();
        self.seen.warn_if_forgotten();
        if self.stats.repeats > 0 {
            tracing::warn!(
                repeats = self.stats.repeats,
                "audit events logged more than once (the same auditID and stage: a file given twice, or overlapping logs) were replayed once"
            );
        }
        self.stats
    }
}

/// A gzipped file, inflated on a thread of its own (flate2 reads
/// blocking) and read here in chunks.
struct Inflated {
    chunks: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Inflated {
    fn of(file: std::fs::File) -> Self {
        let (tx, chunks) = tokio::sync::mpsc::channel(4);
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut gz = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file));
            loop {
                let mut chunk = vec![0; 1 << 16];
                let sent = match gz.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(n) => {
                        chunk.truncate(n);
                        tx.blocking_send(Ok(chunk))
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                };
                // The reader is gone (the replay stopped).
                if sent.is_err() {
                    return;
                }
            }
        });
        Inflated {
            chunks,
            chunk: Vec::new(),
            at: 0,
        }
    }
}

impl AsyncRead for Inflated {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        loop {
            if self.at < self.chunk.len() {
                let n = buf.remaining().min(self.chunk.len() - self.at);
                let at = self.at;
                buf.put_slice(&self.chunk[at..at + n]);
                self.at += n;
                return std::task::Poll::Ready(Ok(()));
            }
            match std::task::ready!(self.chunks.poll_recv(cx)) {
                Some(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Some(Err(e)) => return std::task::Poll::Ready(Err(e)),
                None => return std::task::Poll::Ready(Ok(())),
            }
        }
    }
}

/// Reads one line into `buf` without its line ending, keeping at most `max`
/// bytes of it. Returns the bytes consumed (0 at the end of the input) and
/// whether the line was longer than `max` (its rest is read and dropped).
async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(usize, bool)> {
    buf.clear();
    let mut consumed = 0;
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            break;
        }
        let newline = memchr::memchr(b'\n', available);
        let content = &available[..newline.unwrap_or(available.len())];
        let room = max - buf.len();
        if content.len() > room {
            too_long = true;
        }
        buf.extend_from_slice(&content[..content.len().min(room)]);
        let used = newline.map_or(available.len(), |i| i + 1);
        reader.consume(used);
        consumed += used;
        if newline.is_some() {
            break;
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok((consumed, too_long))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_as_bytes_and_bounded() {
        let input: &[u8] = b"first\r\n\xff\xfe bad\n0123456789abc\nlast";
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        loop {
            let (n, too_long) = next_line(&mut reader, &mut buf, 10).await.unwrap();
            if n == 0 {
                break;
            }
            lines.push((buf.clone(), n, too_long));
        }
        assert_eq!(
            lines,
            vec![
                (b"first".to_vec(), 7, false),
                (b"\xff\xfe bad".to_vec(), 7, false),
                (b"0123456789".to_vec(), 14, true),
                (b"last".to_vec(), 4, false),
            ]
        );
    }
}
