//! Audit log files read as one stream of lines for the offline commands
//! (`analyze`, `explain`; and for `replay` too, the refusal of an input
//! without audit events): a progress bar over the bytes, `.gz` files
//! decompressed, each line's file:line kept for error messages, an
//! optional cheap filter that skips lines before they are parsed, and
//! several apiservers' logs read by one clock (`clocks.rs`).

mod clocks;
mod report;

/// What the fuzz targets reach of the reading (`cargo fuzz` builds with
/// `--cfg fuzzing`; the library's API does not grow for it).
#[cfg(fuzzing)]
pub mod fuzzing {
    /// [`Lines::correcting_clocks`](super::Lines::correcting_clocks)'
    /// rewrite of a line's audit times.
    pub fn shift_times(line: &[u8], by_ns: i64) -> Vec<u8> {
        super::clocks::shift_times(line, by_ns)
    }
}

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use indicatif::ProgressBar;

pub(super) use report::{
    no_audit_events, print_clock_notes, print_skipped, progress_bar, total_size,
};

/// The name that reads standard input (`kascade explain -`), as a pipe
/// gives it: `zcat audit.log.gz | kascade explain -`.
pub(super) const STDIN: &str = "-";

/// The files' lines as one stream, remembering where each line came from
/// so an error's line number can be given as file:line. Several files are
/// merged by each line's `stageTimestamp` (the order an apiserver writes
/// its log in): rotated logs come out oldest first whatever order they were
/// given in, and the logs of several apiservers (each writing its share of
/// one cluster's requests) interleave as the requests completed, so each
/// write is read after the changes it followed. A file is opened only when
/// the merge reaches its first event, so a thousand rotated files hold one
/// reader at a time. A line the filter rejects is yielded empty (the
/// pipeline skips empty lines), so line numbers stay right.
pub struct Lines {
    sources: Vec<Source>,
    /// Sources not opened yet, by their first event's time (oldest last).
    unopened: Vec<(Option<String>, usize)>,
    /// Open sources by their next line's time (the oldest first).
    ready: std::collections::BinaryHeap<std::cmp::Reverse<(Vec<u8>, usize)>>,
    /// Only one file (or standard input): read straight through.
    single: bool,
    bar: ProgressBar,
    shared: Arc<Mutex<LinesState>>,
    keep: Option<memchr::memmem::Finder<'static>>,
}

/// One input file and its reader.
struct Source {
    path: PathBuf,
    reader: Option<BufReader<Box<dyn Read + Send>>>,
    /// A gzipped file: a read error there is damage (a CI artefact cut
    /// short), read up to, not the end of the input.
    gzipped: bool,
    /// Lines read from it so far.
    line: u64,
    /// The line read ahead (merged input), its number and bytes (with its
    /// newline).
    next: Option<(u64, Vec<u8>)>,
    /// Its last line's time: a line without one keeps its place after it.
    last_time: Vec<u8>,
    /// What its audit times are moved by (ns), to read them by the
    /// reference file's clock ([`Lines::correcting_clocks`]).
    shift_ns: i64,
}

/// What reading found, shared with the caller.
#[derive(Default)]
pub struct LinesState {
    /// Runs of consecutive lines of one file, in yield order: the global
    /// number of the run's first line (from 1), the file, and that line's
    /// number in the file.
    runs: Vec<(u64, usize, u64)>,
    files: Vec<PathBuf>,
    yielded: u64,
    /// Lines read that were not blank.
    pub non_empty: u64,
    /// Lines the filter skipped.
    pub skipped: u64,
    /// The first file that could not be read, and why.
    pub io_error: Option<anyhow::Error>,
    /// Gzipped files read only up to damage, as `file: why`.
    pub damaged: Vec<String>,
    /// With [`Lines::correcting_clocks`]: the files whose apiserver's clock
    /// was found off, by how much (their times are read corrected), and
    /// the writes left out of that check over its bound.
    pub clock_offsets: Vec<crate::analysis::clocks::ClockOffset>,
    /// Writes the clock check left out, over its bound.
    pub clock_writes_dropped: u64,
}

impl LinesState {
    /// What the report says of the clock correction, one note per file
    /// corrected.
    pub fn clock_notes(&self) -> Vec<String> {
        let names: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        let mut notes: Vec<String> = self
            .clock_offsets
            .iter()
            .map(|o| crate::analysis::clocks::describe(o, &names))
            .collect();
        if self.clock_writes_dropped > 0 {
            notes.push(format!(
                "{} writes were left out of the check of the apiservers' clocks (bound reached)",
                self.clock_writes_dropped
            ));
        }
        notes
    }

    /// `file:line` of a global line number (1-based).
    pub fn locate(&self, global_line: u64) -> String {
        let i = self
            .runs
            .partition_point(|(start, _, _)| *start <= global_line);
        match i.checked_sub(1).map(|i| self.runs[i]) {
            Some((start, file, first)) => format!(
                "{}:{}",
                self.files[file].display(),
                first + (global_line - start)
            ),
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

    /// Counts a line of `file` (its `line`-th) yielded next.
    fn yield_line(&mut self, file: usize, line: u64) {
        self.yielded += 1;
        let continues = self
            .runs
            .last()
            .is_some_and(|&(start, f, first)| f == file && first + (self.yielded - start) == line);
        if !continues {
            self.runs.push((self.yielded, file, line));
        }
    }
}

type Key = std::sync::LazyLock<memchr::memmem::Finder<'static>>;

static STAGE_TIMESTAMP: Key =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"stageTimestamp\""));

/// The `stageTimestamp` of an audit line (the first one: an EventList's
/// first item's), as its bytes: the apiserver writes RFC 3339 times in UTC
/// with a fixed six digits, which compare as text.
fn stage_time(line: &[u8]) -> Option<&[u8]> {
    string_field(line, &STAGE_TIMESTAMP)
}

/// The first string value of the field `key` finds (`"name"` with its
/// quotes) in a JSON line, without parsing it.
fn string_field<'a>(line: &'a [u8], key: &Key) -> Option<&'a [u8]> {
    let mut rest = &line[key.find(line)? + key.needle().len()..];
    // `"stageTimestamp":"…"`, or with spaces as other writers put them.
    let skip = |r: &mut &[u8], what: &[u8]| {
        let n = r.iter().take_while(|b| what.contains(b)).count();
        *r = &r[n..];
    };
    skip(&mut rest, b" \t");
    rest = rest.strip_prefix(b":")?;
    skip(&mut rest, b" \t");
    rest = rest.strip_prefix(b"\"")?;
    let len = memchr::memchr(b'"', rest)?;
    Some(&rest[..len])
}

impl Lines {
    /// Reads `files` (gzipped or not; `-` is standard input) merged by
    /// time, advancing `bar` by bytes read and keeping counts in `shared`.
    pub fn new(files: Vec<PathBuf>, bar: ProgressBar, shared: Arc<Mutex<LinesState>>) -> Self {
        let single = files.len() <= 1;
        // Popped from the end: the oldest last.
        let mut unopened: Vec<(Option<String>, usize)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (if single { None } else { first_time(f) }, i))
            .collect();
        unopened.sort_by(oldest_last);
        shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .files
            .clone_from(&files);
        Lines {
            sources: files
                .into_iter()
                .map(|path| Source {
                    path,
                    reader: None,
                    gzipped: false,
                    line: 0,
                    next: None,
                    last_time: Vec::new(),
                    shift_ns: 0,
                })
                .collect(),
            unopened,
            ready: std::collections::BinaryHeap::new(),
            single,
            bar,
            shared,
            keep: None,
        }
    }

    /// The files' lines as [`Lines::new`] reads them, without a progress bar
    /// or a state to share (a read error ends the lines).
    pub fn without_progress(files: Vec<PathBuf>) -> Self {
        Self::new(files, ProgressBar::hidden(), Arc::default())
    }

    /// Several apiservers' logs read by one clock: before the first line,
    /// a first pass over the files measures how far each one's apiserver
    /// clock is from the first's (by etcd's revision order; the first is the one whose first event
    /// is oldest), and each file found off is then read
    /// with its audit times (`requestReceivedTimestamp`, `stageTimestamp`)
    /// corrected by that much, merged in that order, and said in
    /// [`LinesState::clock_notes`]. Offsets under
    /// 100 ms are not
    /// measured, nor files that wrote no object in common (several
    /// clusters' logs). Nothing is done for one file, or when one of the files is
    /// standard input, which can be read only once.
    pub fn correcting_clocks(mut self) -> Self {
        if self.single || self.sources.iter().any(|s| s.path.as_os_str() == STDIN) {
            return self;
        }
        // Measured in time order, so that the reference is the file that
        // starts first, whatever order the files were given in.
        let order: Vec<usize> = self.unopened.iter().rev().map(|&(_, i)| i).collect();
        let paths: Vec<PathBuf> = order
            .iter()
            .map(|&i| self.sources[i].path.clone())
            .collect();
        if let Some(total) = self.bar.length() {
            self.bar.set_length(total * 2);
        }
        let (mut offsets, dropped) = clocks::measure(&paths, &self.bar);
        for o in &mut offsets {
            (o.file, o.reference) = (order[o.file], order[o.reference]);
        }
        for o in &offsets {
            self.sources[o.file].shift_ns = o.correction_ns();
        }
        for (first, i) in &mut self.unopened {
            let by = self.sources[*i].shift_ns;
            if by != 0 {
                *first = first.take().and_then(|t| clocks::shifted(&t, by));
            }
        }
        self.unopened.sort_by(oldest_last);
        let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        st.clock_offsets = offsets;
        st.clock_writes_dropped = dropped;
        drop(st);
        self
    }

    /// Only lines containing `needle` go through; the others are yielded empty.
    pub fn containing(mut self, needle: &str) -> Self {
        self.keep = Some(memchr::memmem::Finder::new(needle.as_bytes()).into_owned());
        self
    }

    /// Opens source `i`; `None` (the error kept) when it cannot be.
    fn open(&mut self, i: usize) -> Option<()> {
        let source = &mut self.sources[i];
        if source.path.as_os_str() == STDIN {
            source.gzipped = false;
            let read = self.bar.wrap_read(std::io::stdin());
            source.reader = Some(BufReader::with_capacity(1 << 20, Box::new(read)));
            return Some(());
        }
        match open_file(&source.path, &self.bar) {
            Ok((reader, gzipped)) => {
                source.gzipped = gzipped;
                source.reader = Some(reader);
                Some(())
            }
            Err(e) => {
                let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                st.io_error = Some(anyhow::anyhow!(
                    "cannot open {}: {e}",
                    source.path.display()
                ));
                None
            }
        }
    }

    /// The next raw line of source `i` (with its newline), `Ok(None)` at its
    /// end or its damage (said and kept); `Err` (kept) on a read error.
    fn read_raw(&mut self, i: usize) -> Result<Option<Vec<u8>>, ()> {
        let source = &mut self.sources[i];
        let Some(reader) = source.reader.as_mut() else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        match read_line(reader, &mut buf) {
            Ok(0) => {
                source.reader = None;
                Ok(None)
            }
            Ok(_) => {
                source.line += 1;
                Ok(Some(buf))
            }
            Err(e) => {
                source.reader = None;
                let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                if source.gzipped {
                    // What decoded is kept (a partial last line is dropped);
                    // the other files are read.
                    let why = format!(
                        "{}: damaged after line {} ({e}): read up to there",
                        source.path.display(),
                        source.line
                    );
                    self.bar.suspend(|| eprintln!("warning: {why}"));
                    st.damaged.push(why);
                    return Ok(None);
                }
                st.io_error = Some(anyhow::anyhow!(
                    "cannot read {}: {e}",
                    source.path.display()
                ));
                Err(())
            }
        }
    }

    /// Reads source `i`'s next line ahead and queues it by its time.
    fn queue_next(&mut self, i: usize) -> Result<(), ()> {
        let Some(mut line) = self.read_raw(i)? else {
            return Ok(());
        };
        let source = &mut self.sources[i];
        if source.shift_ns != 0 {
            line = clocks::shift_times(&line, source.shift_ns);
        }
        if let Some(t) = stage_time(&line) {
            source.last_time.clear();
            source.last_time.extend_from_slice(t);
        }
        self.ready
            .push(std::cmp::Reverse((source.last_time.clone(), i)));
        source.next = Some((source.line, line));
        Ok(())
    }

    /// The next line, its source and its number there, merged by time;
    /// `None` at the end of every file or at a read error (kept).
    fn next_raw(&mut self) -> Option<(usize, u64, Vec<u8>)> {
        if self.single {
            loop {
                let i = match self.unopened.last() {
                    Some(&(_, i)) => i,
                    None => return None,
                };
                if self.sources[i].reader.is_none() && self.sources[i].line == 0 {
                    self.open(i)?;
                }
                match self.read_raw(i).ok()? {
                    Some(line) => return Some((i, self.sources[i].line, line)),
                    None => {
                        self.unopened.pop();
                    }
                }
            }
        }
        loop {
            // Open every file whose first event is not after the oldest
            // line queued (all of them once the queue is empty).
            let oldest = self.ready.peek().map(|r| r.0.0.clone());
            match self.unopened.last() {
                Some((first, i))
                    if oldest.as_ref().is_none_or(|o| {
                        first.as_ref().is_none_or(|f| f.as_bytes() <= o.as_slice())
                    }) =>
                {
                    let i = *i;
                    self.unopened.pop();
                    self.open(i)?;
                    self.queue_next(i).ok()?;
                    continue;
                }
                _ => {}
            }
            let std::cmp::Reverse((_, i)) = self.ready.pop()?;
            let (number, line) = self.sources[i].next.take()?;
            self.queue_next(i).ok()?;
            return Some((i, number, line));
        }
    }
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let (i, number, line) = self.next_raw()?;
        let mut st = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        st.yield_line(i, number);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Some(String::new());
        }
        st.non_empty += 1;
        if let Some(keep) = &self.keep
            && keep.find(&line).is_none()
        {
            st.skipped += 1;
            return Some(String::new());
        }
        // Valid UTF-8 (every apiserver line) is checked by `json::utf8`
        // (SIMD); the lossy decoder, byte by byte, cost a seventh of
        // `kascade analyze`.
        Some(match crate::json::utf8(&line) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(&line).into_owned(),
        })
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

/// A file's reader (decompressed when it ends in `.gz`, counted on `bar`),
/// and whether it is gzipped.
fn open_file(
    path: &std::path::Path,
    bar: &ProgressBar,
) -> std::io::Result<(BufReader<Box<dyn Read + Send>>, bool)> {
    let read = bar.wrap_read(File::open(path)?);
    let gzipped = path.extension().is_some_and(|e| e == "gz");
    let reader: Box<dyn Read + Send> = if gzipped {
        Box::new(flate2::read::MultiGzDecoder::new(read))
    } else {
        Box::new(read)
    };
    Ok((BufReader::with_capacity(1 << 20, reader), gzipped))
}

/// Files by their first event's time (and the order given), oldest first;
/// files without a readable first event after them, in the order given.
fn oldest_first(a: (Option<&str>, usize), b: (Option<&str>, usize)) -> std::cmp::Ordering {
    match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(y).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(&b.1),
    }
}

/// [`oldest_first`] reversed: the unopened files, popped from the end.
fn oldest_last(a: &(Option<String>, usize), b: &(Option<String>, usize)) -> std::cmp::Ordering {
    oldest_first((a.0.as_deref(), a.1), (b.0.as_deref(), b.1)).reverse()
}

/// The audit time of a file's first event (`requestReceivedTimestamp`),
/// when its first line has one.
fn first_time(path: &std::path::Path) -> Option<String> {
    // Standard input is read once, in its place.
    if path.as_os_str() == STDIN {
        return None;
    }
    let (reader, _) = open_file(path, &ProgressBar::hidden()).ok()?;
    let mut line = String::new();
    reader.take(1 << 24).read_line(&mut line).ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    v.get("requestReceivedTimestamp")?
        .as_str()
        .map(str::to_string)
}

/// Rotated logs in time order (oldest first, by each file's first event),
/// whatever order they were given in; says when it reordered them. RFC
/// 3339 timestamps in UTC compare as text.
pub(super) fn in_time_order(files: Vec<PathBuf>) -> (Vec<PathBuf>, Option<String>) {
    let mut keyed: Vec<(Option<String>, usize, PathBuf)> = files
        .into_iter()
        .enumerate()
        .map(|(i, f)| (first_time(&f), i, f))
        .collect();
    let given: Vec<PathBuf> = keyed.iter().map(|(_, _, f)| f.clone()).collect();
    // Files without a readable first event keep their place at the end.
    keyed.sort_by(|a, b| oldest_first((a.0.as_deref(), a.1), (b.0.as_deref(), b.1)));
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
mod tests;
