//! Audit log files read as one stream of lines for the offline commands
//! (`analyze`, `explain`; and for `replay` too, the refusal of an input
//! without audit events): a progress bar over the bytes, `.gz` files
//! decompressed, each line's file:line kept for error messages, and an
//! optional cheap filter that skips lines before they are parsed.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar over `total` bytes, drawn only when stderr is a terminal
/// (and not under `--quiet`).
pub fn progress_bar(total: u64) -> ProgressBar {
    let bar = crate::terminal::progress_bar(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .expect("static template"),
    );
    bar
}

/// The name that reads standard input (`kascade explain -`), as a pipe
/// gives it: `zcat audit.log.gz | kascade explain -`.
pub const STDIN: &str = "-";

/// The total size of `files` (for the progress bar; standard input counts
/// nothing); fails naming the first file that cannot be read.
pub fn total_size(files: &[PathBuf]) -> anyhow::Result<u64> {
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
pub fn no_audit_events(
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

/// Says the malformed lines skipped on stderr: the first `max_shown` of
/// `located` (as `file:line: why`), then how many more of `malformed` there
/// were.
pub fn print_skipped(located: &[String], malformed: usize, max_shown: usize) {
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

/// The files' lines, one after the other, remembering where each file
/// starts so an error's line number can be given as file:line. A line the
/// filter rejects is yielded empty (the pipeline skips empty lines), so
/// line numbers stay right.
pub struct Lines {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<BufReader<Box<dyn Read + Send>>>,
    buf: Vec<u8>,
    bar: ProgressBar,
    shared: Arc<Mutex<LinesState>>,
    keep: Option<memchr::memmem::Finder<'static>>,
    /// The current file is gzipped: a read error there is damage (a CI
    /// artefact cut short), read up to, not the end of the input.
    gzipped: bool,
}

/// What reading found, shared with the caller.
#[derive(Default)]
pub struct LinesState {
    /// (file, global index of its first line).
    starts: Vec<(PathBuf, u64)>,
    yielded: u64,
    /// Lines read that were not blank.
    pub non_empty: u64,
    /// Lines the filter skipped.
    pub skipped: u64,
    pub io_error: Option<anyhow::Error>,
    /// Gzipped files read only up to damage, as `file: why`.
    pub damaged: Vec<String>,
}

impl LinesState {
    /// `file:line` of a global line number (1-based).
    pub fn locate(&self, global_line: u64) -> String {
        match self
            .starts
            .iter()
            .rev()
            .find(|(_, start)| *start < global_line)
        {
            Some((f, start)) => format!("{}:{}", f.display(), global_line - start),
            None => format!("line {global_line}"),
        }
    }

    /// The pipeline's `<global line>: <message>` errors as
    /// `file:line: message`.
    pub fn located(&self, errors: &[String]) -> Vec<String> {
        errors
            .iter()
            .map(|e| {
                let (n, msg) = e.split_once(": ").unwrap_or(("0", e));
                format!("{}: {msg}", self.locate(n.parse().unwrap_or(0)))
            })
            .collect()
    }
}

impl Lines {
    pub fn new(files: Vec<PathBuf>, bar: ProgressBar, shared: Arc<Mutex<LinesState>>) -> Self {
        Lines {
            files: files.into_iter(),
            current: None,
            buf: Vec::new(),
            bar,
            shared,
            keep: None,
            gzipped: false,
        }
    }

    /// Only lines containing `needle` go through; the others are yielded empty.
    pub fn containing(mut self, needle: &str) -> Self {
        self.keep = Some(memchr::memmem::Finder::new(needle.as_bytes()).into_owned());
        self
    }

    fn open(&mut self, path: PathBuf) -> Option<()> {
        if path.as_os_str() == STDIN {
            self.gzipped = false;
            let read = self.bar.wrap_read(std::io::stdin());
            self.current = Some(BufReader::with_capacity(1 << 20, Box::new(read)));
            let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let at = st.yielded;
            st.starts.push((path, at));
            return Some(());
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                st.io_error = Some(anyhow::anyhow!("cannot open {}: {e}", path.display()));
                return None;
            }
        };
        let read = self.bar.wrap_read(file);
        self.gzipped = path.extension().is_some_and(|e| e == "gz");
        let reader: Box<dyn Read + Send> = if self.gzipped {
            Box::new(flate2::read::MultiGzDecoder::new(read))
        } else {
            Box::new(read)
        };
        self.current = Some(BufReader::with_capacity(1 << 20, reader));
        let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let at = st.yielded;
        st.starts.push((path, at));
        Some(())
    }
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        loop {
            if self.current.is_none() {
                let path = self.files.next()?;
                self.open(path)?;
            }
            let reader = self.current.as_mut()?;
            self.buf.clear();
            match read_line(reader, &mut self.buf) {
                Ok(0) => {
                    self.current = None;
                    continue;
                }
                Ok(_) => {
                    let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    st.yielded += 1;
                    if self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Some(String::new());
                    }
                    st.non_empty += 1;
                    if let Some(keep) = &self.keep
                        && keep.find(&self.buf).is_none()
                    {
                        st.skipped += 1;
                        return Some(String::new());
                    }
                    // Valid UTF-8 (every apiserver line) is checked by
                    // `json::utf8` (SIMD); the lossy decoder,
                    // byte by byte, cost a seventh of `kascade analyze`.
                    return Some(match crate::json::utf8(&self.buf) {
                        Ok(line) => line.to_owned(),
                        Err(_) => String::from_utf8_lossy(&self.buf).into_owned(),
                    });
                }
                Err(e) => {
                    let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    let (f, start) = st.starts.last().cloned().unwrap_or_default();
                    if self.gzipped {
                        // What decoded is kept (a partial last line is
                        // dropped); the next file is read.
                        let read = st.yielded - start;
                        let why = format!(
                            "{}: damaged after line {read} ({e}): read up to there",
                            f.display()
                        );
                        self.bar.suspend(|| eprintln!("warning: {why}"));
                        st.damaged.push(why);
                        self.current = None;
                        continue;
                    }
                    st.io_error = Some(anyhow::anyhow!("cannot read {}: {e}", f.display()));
                    return None;
                }
            }
        }
    }
}

/// `BufRead::read_until(b'\n', buf)` with the newline found by the `memchr`
/// crate (vectorised, chosen at run time) instead of `core`'s word-at-a-time
/// search, which cost ≈ 4,800 instructions per 4.5 KB audit line (2.6 % of
/// `kascade analyze`). Appends the line with its newline; returns the bytes
/// read, 0 at the end of the input.
fn read_line<R: BufRead + ?Sized>(reader: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(read);
        }
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..used]);
        reader.consume(used);
        read += used;
        if done {
            return Ok(read);
        }
    }
}

/// The audit time of a file's first event (`requestReceivedTimestamp`),
/// when its first line has one.
fn first_time(path: &PathBuf) -> Option<String> {
    // Standard input is read once, in its place.
    if path.as_os_str() == STDIN {
        return None;
    }
    let file = File::open(path).ok()?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut line = String::new();
    BufReader::new(reader.take(1 << 24))
        .read_line(&mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    v.get("requestReceivedTimestamp")?
        .as_str()
        .map(str::to_string)
}

/// Rotated logs in time order (oldest first, by each file's first event),
/// whatever order they were given in; says when it reordered them. RFC
/// 3339 timestamps in UTC compare as text.
pub fn in_time_order(files: Vec<PathBuf>) -> (Vec<PathBuf>, Option<String>) {
    let mut keyed: Vec<(Option<String>, usize, PathBuf)> = files
        .into_iter()
        .enumerate()
        .map(|(i, f)| (first_time(&f), i, f))
        .collect();
    let given: Vec<PathBuf> = keyed.iter().map(|(_, _, f)| f.clone()).collect();
    // Files without a readable first event keep their place at the end.
    keyed.sort_by(|a, b| match (&a.0, &b.0) {
        (Some(x), Some(y)) => x.cmp(y).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(&b.1),
    });
    let ordered: Vec<PathBuf> = keyed.into_iter().map(|(_, _, f)| f).collect();
    let note = (ordered != given).then(|| {
        format!(
            "reading the logs oldest first: {}",
            ordered
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    (ordered, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_with_memchr_are_the_lines_read_until_reads() {
        let input: &[u8] = b"{\"a\":1}\n\n  \r\n{\"b\":\"\xff\"}\r\nno newline at the end";
        // A 3-byte buffer splits lines across refills.
        for capacity in [3, 8, 1 << 10] {
            let mut ours = BufReader::with_capacity(capacity, input);
            let mut std = BufReader::with_capacity(capacity, input);
            loop {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let n = read_line(&mut ours, &mut a).unwrap();
                let m = std.read_until(b'\n', &mut b).unwrap();
                assert_eq!((n, &a), (m, &b), "buffer of {capacity} bytes");
                if n == 0 {
                    break;
                }
            }
        }
    }
}
