//! Whether the apiservers that wrote several audit logs agree on the time.
//!
//! Each apiserver stamps its own log with its own clock, so a hop from a
//! write logged by one to a write logged by another includes the offset
//! between their clocks. etcd orders every write by one counter, its
//! revision (the `resourceVersion` a write answers with), whichever
//! apiserver sent it: a write of a later revision was stored later. Of two
//! writes adjacent in revision order and logged in different files, the
//! later one is logged a little after the earlier (the time between the two
//! commits, give or take how long each response took after its commit),
//! plus the offset of its apiserver's clock. With the clocks in agreement
//! the tight pairs (the lower tenth of each direction's time differences)
//! are near zero both ways; a clock `d` ahead shifts the pairs towards it by
//! `+d` and those away from it by `-d`. An offset is said only when both
//! directions agree on it by more than [`NOTICEABLE`], so a slow response
//! now and then (a create answered after the binding that followed it)
//! cannot make one up.
//!
//! The offline commands measure it in a first pass over the files
//! ([`Revisions::record_line`]) and then read each file's times by the
//! reference's clock (`app::Lines::correcting_clocks`): a write logged by a
//! lagging apiserver then follows the change it reacted to, as it did.

use std::time::Duration;

use crate::model::FastHashMap as HashMap;

/// Offsets smaller than this are not said: hops are reported in
/// milliseconds, but the tight pairs themselves spread over tens of them.
pub(crate) const NOTICEABLE: Duration = Duration::from_millis(100);

/// Pairs needed in each direction before anything is said (a small
/// cluster's two apiservers give a handful: their writes come in runs).
const MIN_PAIRS: usize = 5;

/// Writes kept (24 bytes each); more are counted and left out.
const MAX_WRITES: usize = 4 << 20;

/// Objects whose files are kept (about 24 bytes each), for telling one
/// cluster's logs from several clusters'; more are left out.
const MAX_OBJECTS: usize = 1 << 20;

/// The share of each direction's time differences below its statistic: the
/// tight pairs, with room for the occasional slow response below them.
const LOW_QUANTILE: f64 = 0.1;

/// The writes of several files that stored a new revision: the revision,
/// when the response completed (ns since the epoch) by the clock of the
/// apiserver that logged it, and the file (index) that logged it. Bounded:
/// past [`MAX_WRITES`] writes are counted and left out.
#[derive(Default)]
pub(crate) struct Revisions {
    writes: Vec<(u64, i64, usize)>,
    dropped: u64,
    /// The files (a bit each, the first 64) that wrote each object, by a
    /// hash of its uid: revisions compare only between files that wrote
    /// the same objects, one etcd's.
    written_by: HashMap<u64, u64>,
}

/// How far one file's apiserver clock is from the reference file's.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockOffset {
    /// Index of the file, and of the reference (the first file with writes).
    pub file: usize,
    pub reference: usize,
    /// Positive: ahead of the reference.
    pub offset: Duration,
    pub ahead: bool,
    /// Adjacent pairs of writes that judged it, each way.
    pub pairs: (usize, usize),
}

impl ClockOffset {
    /// What to add to the file's times to read them by the reference's
    /// clock (ns).
    pub fn correction_ns(&self) -> i64 {
        let ns = i64::try_from(self.offset.as_nanos()).unwrap_or(i64::MAX);
        if self.ahead { -ns } else { ns }
    }
}

impl Revisions {
    /// Notes the write of `line` (an audit event, or an EventList's items)
    /// logged in `file`, when it stored a revision: a create, update or
    /// patch answered 2xx with the object, at its `ResponseComplete`
    /// stage. Anything else, malformed text included, is passed over.
    pub(crate) fn record_line(&mut self, line: &str, file: usize) {
        // Only writes are parsed: the verb is found as text first.
        if !has_write_verb(line.as_bytes()) {
            return;
        }
        if crate::json::depth::exceeds(line.as_bytes(), crate::json::depth::MAX_OBJECT_DEPTH) {
            return;
        }
        let Ok(probe) = sonic_rs::from_str::<Probe>(line) else {
            return;
        };
        for event in std::iter::once(&probe).chain(probe.items.iter().flatten()) {
            if let Some((revision, completed_ns, uid)) = event.stored_revision() {
                self.push(revision, completed_ns, file);
                self.note_object(uid, file);
            }
        }
    }

    fn note_object(&mut self, uid: &str, file: usize) {
        let Some(bit) = file_bit(file) else {
            return;
        };
        let key = xxhash_rust::xxh3::xxh3_64(uid.as_bytes());
        if let Some(files) = self.written_by.get_mut(&key) {
            *files |= bit;
        } else if self.written_by.len() < MAX_OBJECTS {
            self.written_by.insert(key, bit);
        }
    }

    /// Whether `a` and `b` wrote an object in common: the logs of one
    /// cluster's apiservers do (a Pod one creates, the other's kubelet
    /// updates), several clusters' logs never (uids are random), and their
    /// revisions, counted by different etcds, say nothing of each other's
    /// clocks.
    fn share_objects(&self, a: usize, b: usize) -> bool {
        let (Some(a), Some(b)) = (file_bit(a), file_bit(b)) else {
            return false;
        };
        self.written_by
            .values()
            .any(|&files| files & a != 0 && files & b != 0)
    }

    fn push(&mut self, revision: u64, completed_ns: i64, file: usize) {
        if self.writes.len() >= MAX_WRITES {
            self.dropped += 1;
            return;
        }
        self.writes.push((revision, completed_ns, file));
    }

    /// Writes left out over the bound.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The offsets worth saying, of each file against the first file that
    /// has writes.
    pub(crate) fn offsets(mut self) -> Vec<ClockOffset> {
        let writes = &mut self.writes;
        writes.sort_unstable_by_key(|w| w.0);
        // A revision answered by several writes was stored by one of them;
        // the others changed nothing (an update to what was there) or are
        // the same event logged twice. Which one stored it is not known, so
        // none of them is used.
        let mut unique = Vec::with_capacity(writes.len());
        for group in writes.chunk_by(|a, b| a.0 == b.0) {
            if let [one] = group {
                unique.push(*one);
            }
        }
        let writes = unique;
        // Time differences of adjacent writes logged in different files,
        // by (earlier's file, later's file).
        let mut diffs: HashMap<(usize, usize), Vec<i64>> = HashMap::default();
        for pair in writes.windows(2) {
            let ((_, t1, f1), (_, t2, f2)) = (pair[0], pair[1]);
            if f1 != f2 {
                diffs
                    .entry((f1, f2))
                    .or_default()
                    .push(t2.saturating_sub(t1));
            }
        }
        let Some(reference) = writes.iter().map(|w| w.2).min() else {
            return Vec::new();
        };
        let mut files: Vec<usize> = writes.iter().map(|w| w.2).collect();
        files.sort_unstable();
        files.dedup();
        let noticeable = NOTICEABLE.as_nanos() as i64;
        let mut out = Vec::new();
        for file in files.into_iter().filter(|&f| f != reference) {
            if !self.share_objects(reference, file) {
                continue;
            }
            let (Some(mut towards), Some(mut away)) = (
                diffs.remove(&(reference, file)),
                diffs.remove(&(file, reference)),
            ) else {
                continue;
            };
            if towards.len() < MIN_PAIRS || away.len() < MIN_PAIRS {
                continue;
            }
            let (t, a) = (low_quantile(&mut towards), low_quantile(&mut away));
            // Ahead: later writes in `file` logged late, later writes in the
            // reference logged early; behind: the other way round.
            let ahead = t > noticeable && a < -noticeable;
            let behind = t < -noticeable && a > noticeable;
            if ahead || behind {
                let offset = (t.saturating_sub(a) / 2).unsigned_abs();
                out.push(ClockOffset {
                    file,
                    reference,
                    offset: Duration::from_nanos(offset),
                    ahead,
                    pairs: (towards.len(), away.len()),
                });
            }
        }
        out
    }
}

type Finder = std::sync::LazyLock<memchr::memmem::Finder<'static>>;

static VERB: Finder = std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""verb""#));

/// Whether a `"verb"` of the line (any event's, in an EventList) is a
/// write that stores a revision; spaces around the colon allowed, as
/// shippers and other writers put them.
fn has_write_verb(line: &[u8]) -> bool {
    VERB.find_iter(line).any(|at| {
        let rest = line[at + VERB.needle().len()..].trim_ascii_start();
        let Some(rest) = rest.strip_prefix(b":") else {
            return false;
        };
        let rest = rest.trim_ascii_start();
        [&b"\"create\""[..], b"\"update\"", b"\"patch\""]
            .iter()
            .any(|v| rest.starts_with(v))
    })
}

/// What the clock check reads of an audit event (the rest is skipped).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe<'a> {
    #[serde(default, borrow)]
    verb: Option<&'a str>,
    #[serde(default, borrow)]
    stage: Option<&'a str>,
    #[serde(default, borrow)]
    stage_timestamp: Option<&'a str>,
    #[serde(default)]
    response_status: Option<ProbeStatus>,
    #[serde(default, borrow)]
    response_object: Option<ProbeObject<'a>>,
    /// An EventList's events.
    #[serde(default, borrow)]
    items: Option<Vec<Probe<'a>>>,
}

#[derive(serde::Deserialize)]
struct ProbeStatus {
    #[serde(default)]
    code: Option<u16>,
}

#[derive(serde::Deserialize)]
struct ProbeObject<'a> {
    #[serde(default, borrow)]
    metadata: Option<ProbeMeta<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProbeMeta<'a> {
    #[serde(default, borrow)]
    resource_version: Option<&'a str>,
    #[serde(default, borrow)]
    uid: Option<&'a str>,
}

impl Probe<'_> {
    /// The revision the write stored, when its response completed, and the
    /// object's uid.
    fn stored_revision(&self) -> Option<(u64, i64, &str)> {
        if !matches!(self.verb, Some("create" | "update" | "patch"))
            || self.stage != Some("ResponseComplete")
            || !self
                .response_status
                .as_ref()
                .and_then(|s| s.code)
                .is_some_and(|c| (200..300).contains(&c))
        {
            return None;
        }
        let metadata = self.response_object.as_ref()?.metadata.as_ref()?;
        let revision = metadata.resource_version?.parse().ok()?;
        let completed = humantime::parse_rfc3339(self.stage_timestamp?).ok()?;
        let ns = completed
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some((revision, i64::try_from(ns).ok()?, metadata.uid?))
    }
}

/// A file's bit in [`Revisions`]' sets of files: the first 64 have one.
fn file_bit(file: usize) -> Option<u64> {
    u32::try_from(file).ok().and_then(|f| 1u64.checked_shl(f))
}

fn low_quantile(values: &mut [i64]) -> i64 {
    let k = ((values.len() as f64 * LOW_QUANTILE) as usize).min(values.len() - 1);
    *values.select_nth_unstable(k).1
}

/// What an offset means for the report, naming the files; the offline
/// commands read the file's times corrected by it
/// ([`ClockOffset::correction_ns`]).
pub(crate) fn describe(o: &ClockOffset, files: &[String]) -> String {
    let name = |i: usize| files.get(i).map(String::as_str).unwrap_or("?");
    format!(
        "the clock of the apiserver that logged {} is about {:.1} s {} that of {} (judged by etcd's \
         revision order: {} and {} adjacent pairs of writes each way): its times are read {:.1} s \
         {}, by the other's clock, so that hops between the two files are not off by the difference",
        name(o.file),
        o.offset.as_secs_f64(),
        if o.ahead { "ahead of" } else { "behind" },
        name(o.reference),
        o.pairs.0,
        o.pairs.1,
        o.offset.as_secs_f64(),
        if o.ahead { "earlier" } else { "later" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writes of one cluster's apiservers: every file also wrote one
    /// object the others did.
    fn clock_of(writes: &[(u64, i64, usize)]) -> Revisions {
        let mut revisions = of_separate_clusters(writes);
        for &(_, _, file) in writes {
            revisions.note_object("a Pod written through every apiserver", file);
        }
        revisions
    }

    /// The writes, with no object written by two files in common.
    fn of_separate_clusters(writes: &[(u64, i64, usize)]) -> Revisions {
        let mut revisions = Revisions::default();
        for &(revision, completed_ns, file) in writes {
            revisions.push(revision, completed_ns, file);
            revisions.note_object(&format!("{file}/{revision}"), file);
        }
        revisions
    }

    /// Writes alternating between two apiservers every 5 ms, the second's
    /// clock `skew_ms` off; every fifteenth response of either is 300 ms
    /// slow after its commit.
    fn alternating(skew_ms: i64) -> Vec<(u64, i64, usize)> {
        (0..400)
            .map(|i: i64| {
                let file = (i % 2) as usize;
                let slow = if i % 15 == 0 { 300_000_000 } else { 0 };
                let skew = if file == 1 { skew_ms * 1_000_000 } else { 0 };
                (i as u64 + 1, i * 5_000_000 + slow + skew, file)
            })
            .collect()
    }

    #[test]
    fn clocks_that_agree_give_no_offset_despite_slow_responses() {
        assert_eq!(clock_of(&alternating(0)).offsets(), []);
        assert_eq!(clock_of(&alternating(50)).offsets(), [], "under 100 ms");
    }

    #[test]
    fn a_clock_ahead_or_behind_is_measured_against_the_first_file() {
        for (skew, ahead) in [(2000, true), (-1500, false)] {
            let offsets = clock_of(&alternating(skew)).offsets();
            assert_eq!(offsets.len(), 1, "{skew}");
            let o = &offsets[0];
            assert_eq!((o.file, o.reference, o.ahead), (1, 0, ahead));
            let ms = o.offset.as_millis() as i64;
            assert!((ms - skew.abs()).abs() <= 10, "{skew}: {ms} ms");
        }
    }

    #[test]
    fn revisions_answered_by_several_writes_are_left_out() {
        // Every write of one apiserver's log, and in the other's only
        // updates that changed nothing, answered with those same revisions
        // and logged 2 s earlier: which write stored a revision is not
        // known, so no offset is made up from them.
        let stored: Vec<_> = (0..400_i64)
            .map(|i| (i as u64 + 1, i * 5_000_000, 0))
            .collect();
        let echoes = stored.iter().map(|&(r, t, _)| (r, t - 2_000_000_000, 1));
        let writes: Vec<_> = stored.iter().copied().chain(echoes).collect();
        assert_eq!(clock_of(&writes).offsets(), []);
        // The same file given twice: the same.
        let twice: Vec<_> = alternating(2000)
            .into_iter()
            .flat_map(|(r, t, _)| [(r, t, 0), (r, t, 1)])
            .collect();
        assert_eq!(clock_of(&twice).offsets(), []);
    }

    /// The deployment scenario's lines as logged, and as a writer that puts
    /// spaces around colons and commas writes them (one line each still).
    fn fixture_lines() -> Vec<(String, String)> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        );
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let spaced = serde_json::to_string_pretty(&v).unwrap().replace('\n', "");
                (l.to_string(), spaced)
            })
            .collect()
    }

    #[test]
    fn every_write_that_stored_a_revision_is_recorded_however_spaced() {
        let lines = fixture_lines();
        let expected = lines
            .iter()
            .filter(|(l, _)| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                ["create", "update", "patch"].contains(&v["verb"].as_str().unwrap())
                    && v["stage"] == "ResponseComplete"
                    && (200..300).contains(&v["responseStatus"]["code"].as_u64().unwrap_or(0))
                    && v["responseObject"]["metadata"]["resourceVersion"].is_string()
            })
            .count();
        assert!(expected > 10, "{expected}");
        for spaced in [false, true] {
            let mut revisions = Revisions::default();
            for (compact, with_spaces) in &lines {
                revisions.record_line(if spaced { with_spaces } else { compact }, 0);
            }
            assert_eq!(revisions.writes.len(), expected, "spaced: {spaced}");
        }
    }

    #[test]
    fn logs_of_separate_clusters_say_nothing_of_each_others_clocks() {
        // Two clusters, one run 2 s after the other: their etcds count
        // revisions from 1 alike, so revision order pairs their writes, but
        // no object is in both.
        assert_eq!(of_separate_clusters(&alternating(2000)).offsets(), []);
        assert_eq!(clock_of(&alternating(2000)).offsets().len(), 1);
    }

    #[test]
    fn too_few_pairs_say_nothing() {
        let writes: Vec<_> = alternating(2000).into_iter().take(8).collect();
        assert_eq!(clock_of(&writes).offsets(), []);
    }
}
