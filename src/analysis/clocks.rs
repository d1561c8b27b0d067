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

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use crate::model::FastHashMap as HashMap;
use crate::pipeline::{ChangeRecord, ChangeSink};

/// Offsets smaller than this are not said: hops are reported in
/// milliseconds, but the tight pairs themselves spread over tens of them.
pub const NOTICEABLE: Duration = Duration::from_millis(100);

/// Pairs needed in each direction before anything is said (a small
/// cluster's two apiservers give a handful: their writes come in runs).
const MIN_PAIRS: usize = 5;

/// Writes kept (24 bytes each); more are counted and left out.
const MAX_WRITES: usize = 4 << 20;

/// The share of each direction's time differences below its statistic: the
/// tight pairs, with room for the occasional slow response below them.
const LOW_QUANTILE: f64 = 0.1;

/// One write: its revision, when its response completed (ns since the
/// epoch), and the key of its audit ID (see [`audit_key`]).
#[derive(Clone, Copy)]
struct Write {
    revision: u64,
    completed_ns: i64,
    audit_key: u64,
}

/// The key by which a write's audit ID is matched with the file that
/// logged it.
pub fn audit_key(audit_id: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(audit_id)
}

/// Records each write that stored a new revision (a change sink beside
/// the others, on the processor's shards).
#[derive(Default)]
pub struct RevisionClock {
    writes: Mutex<Recorded>,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Recorded {
    writes: Vec<Write>,
    /// The newest revision seen per object: a write that answers with it
    /// again stored nothing (an update that changed nothing).
    newest: HashMap<u128, u64>,
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

impl ChangeSink for RevisionClock {
    fn record(&self, c: &ChangeRecord) {
        let (Some(revision), false) = (c.version, c.deleted) else {
            return;
        };
        if !matches!(c.verb.as_str(), "create" | "update" | "patch")
            || !(200..300).contains(&c.code)
        {
            return;
        }
        let Ok(completed) = c.completed.duration_since(UNIX_EPOCH) else {
            return;
        };
        let mut rec = self.writes.lock().expect("revision clock");
        if rec.writes.len() >= MAX_WRITES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let object = {
            let mut h = crate::model::KeyHasher::new();
            c.object.hash_key(&mut h);
            h.digest128()
        };
        let newest = rec.newest.entry(object).or_insert(0);
        if revision <= *newest {
            return;
        }
        *newest = revision;
        rec.writes.push(Write {
            revision,
            completed_ns: i64::try_from(completed.as_nanos()).unwrap_or(i64::MAX),
            audit_key: audit_key(c.audit_id.as_bytes()),
        });
    }
}

impl RevisionClock {
    /// The offsets worth saying, of each file against the first file that
    /// has writes; `origin` names the file (index) that logged an audit ID
    /// (its [`audit_key`]).
    pub fn offsets(&self, origin: impl Fn(u64) -> Option<usize>) -> Vec<ClockOffset> {
        let mut writes: Vec<(u64, i64, usize)> = {
            let rec = self.writes.lock().expect("revision clock");
            rec.writes
                .iter()
                .filter_map(|w| Some((w.revision, w.completed_ns, origin(w.audit_key)?)))
                .collect()
        };
        writes.sort_unstable_by_key(|w| w.0);
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

    /// Writes left out over the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn low_quantile(values: &mut [i64]) -> i64 {
    let k = ((values.len() as f64 * LOW_QUANTILE) as usize).min(values.len() - 1);
    *values.select_nth_unstable(k).1
}

/// What an offset means for the report, naming the files.
pub fn describe(o: &ClockOffset, files: &[String]) -> String {
    let name = |i: usize| files.get(i).map(String::as_str).unwrap_or("?");
    format!(
        "the clock of the apiserver that logged {} is about {:.1} s {} that of {} (judged by etcd's \
         revision order: {} and {} adjacent pairs of writes each way): hops between writes logged \
         in the two files are off by that much",
        name(o.file),
        o.offset.as_secs_f64(),
        if o.ahead { "ahead of" } else { "behind" },
        name(o.reference),
        o.pairs.0,
        o.pairs.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_of(writes: &[(u64, i64, usize)]) -> (RevisionClock, HashMap<u64, usize>) {
        let clock = RevisionClock::default();
        let mut origin = HashMap::default();
        {
            let mut rec = clock.writes.lock().unwrap();
            for (i, &(revision, completed_ns, file)) in writes.iter().enumerate() {
                let key = audit_key(i.to_string().as_bytes());
                origin.insert(key, file);
                rec.writes.push(Write {
                    revision,
                    completed_ns,
                    audit_key: key,
                });
            }
        }
        (clock, origin)
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
        let (clock, origin) = clock_of(&alternating(0));
        assert_eq!(clock.offsets(|k| origin.get(&k).copied()), []);
        let (clock, origin) = clock_of(&alternating(50));
        assert_eq!(
            clock.offsets(|k| origin.get(&k).copied()),
            [],
            "under 100 ms"
        );
    }

    #[test]
    fn a_clock_ahead_or_behind_is_measured_against_the_first_file() {
        for (skew, ahead) in [(2000, true), (-1500, false)] {
            let (clock, origin) = clock_of(&alternating(skew));
            let offsets = clock.offsets(|k| origin.get(&k).copied());
            assert_eq!(offsets.len(), 1, "{skew}");
            let o = &offsets[0];
            assert_eq!((o.file, o.reference, o.ahead), (1, 0, ahead));
            let ms = o.offset.as_millis() as i64;
            assert!((ms - skew.abs()).abs() <= 10, "{skew}: {ms} ms");
        }
    }

    #[test]
    fn too_few_pairs_say_nothing() {
        let writes: Vec<_> = alternating(2000).into_iter().take(8).collect();
        let (clock, origin) = clock_of(&writes);
        assert_eq!(clock.offsets(|k| origin.get(&k).copied()), []);
    }
}
