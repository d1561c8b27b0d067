//! Several apiservers' logs read by one clock: the first pass that measures
//! how far each file's clock is from the first's, and the audit times of a
//! line moved by the correction.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use indicatif::ProgressBar;

use crate::analysis::clocks::{ClockOffset, Revisions};

/// The offsets of `files`' clocks (each against the first file with
/// writes), and the writes left out over the check's bound. A file that
/// cannot be read, or a gzipped one up to its damage, is measured as far
/// as it goes: the second pass reports what is wrong with it.
pub(super) fn measure(files: &[PathBuf], bar: &ProgressBar) -> (Vec<ClockOffset>, u64) {
    let mut revisions = Revisions::default();
    for (i, path) in files.iter().enumerate() {
        let Ok((mut reader, _)) = super::open_file(path, bar) else {
            continue;
        };
        let mut line = Vec::new();
        loop {
            line.clear();
            match super::read_line(&mut reader, &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Ok(text) = crate::json::utf8(&line) {
                        revisions.record_line(text, i);
                    }
                }
            }
        }
    }
    let dropped = revisions.dropped();
    (revisions.offsets(), dropped)
}

type Key = std::sync::LazyLock<memchr::memmem::Finder<'static>>;

static REQUEST_RECEIVED: Key =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"requestReceivedTimestamp\""));

/// `line` with the values of its `requestReceivedTimestamp` and
/// `stageTimestamp` fields (each event's, in an EventList too) moved by
/// `by_ns`; a value that is not an RFC 3339 time is left as it is. The
/// rest of the line is untouched.
pub(super) fn shift_times(line: &[u8], by_ns: i64) -> Vec<u8> {
    let mut values: Vec<(usize, usize)> = [&*REQUEST_RECEIVED, &*super::STAGE_TIMESTAMP]
        .into_iter()
        .flat_map(|key| {
            key.find_iter(line)
                .filter_map(|at| string_value_after(line, at + key.needle().len()))
        })
        .collect();
    values.sort_unstable();
    let mut out = Vec::with_capacity(line.len() + 8 * values.len());
    let mut copied = 0;
    for (start, end) in values {
        let Some(moved) = std::str::from_utf8(&line[start..end])
            .ok()
            .and_then(|t| shifted(t, by_ns))
        else {
            continue;
        };
        out.extend_from_slice(&line[copied..start]);
        out.extend_from_slice(moved.as_bytes());
        copied = end;
    }
    out.extend_from_slice(&line[copied..]);
    out
}

/// The byte range of the string value that follows a key ending at `at`
/// (`: "…"`, spaces allowed), without its quotes.
fn string_value_after(line: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut i = at;
    let skip = |i: &mut usize| {
        while line.get(*i).is_some_and(|b| matches!(b, b' ' | b'\t')) {
            *i += 1;
        }
    };
    skip(&mut i);
    (line.get(i) == Some(&b':')).then_some(())?;
    i += 1;
    skip(&mut i);
    (line.get(i) == Some(&b'"')).then_some(())?;
    let start = i + 1;
    let len = memchr::memchr(b'"', &line[start..])?;
    Some((start, start + len))
}

/// An RFC 3339 time moved by `by_ns`, written as the apiserver writes its
/// times (UTC, six fractional digits); `None` when `time` is not one.
pub(super) fn shifted(time: &str, by_ns: i64) -> Option<String> {
    let t = humantime::parse_rfc3339(time).ok()?;
    let by = Duration::from_nanos(by_ns.unsigned_abs());
    let t: SystemTime = if by_ns < 0 {
        t.checked_sub(by)?
    } else {
        t.checked_add(by)?
    };
    // What RFC 3339 (and humantime, which panics outside it) writes: from
    // the epoch to the end of year 9999.
    let since_epoch = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    (since_epoch.as_secs() < END_OF_9999).then(|| humantime::format_rfc3339_micros(t).to_string())
}

/// 10000-01-01T00:00:00Z, in seconds since the epoch.
const END_OF_9999: u64 = 253_402_300_800;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line the control plane logged for the deployment scenario.
    fn fixture_lines() -> Vec<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        );
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn time_of(v: &serde_json::Value, key: &str) -> SystemTime {
        humantime::parse_rfc3339(v[key].as_str().unwrap()).unwrap()
    }

    #[test]
    fn both_audit_times_move_and_nothing_else_does() {
        let by = Duration::from_millis(1500);
        for line in fixture_lines() {
            let moved = shift_times(line.as_bytes(), 1_500_000_000);
            let (was, now): (serde_json::Value, serde_json::Value) = (
                serde_json::from_str(&line).unwrap(),
                serde_json::from_slice(&moved).unwrap(),
            );
            for key in ["requestReceivedTimestamp", "stageTimestamp"] {
                assert_eq!(time_of(&now, key), time_of(&was, key) + by, "{key}: {line}");
            }
            // Everything else as logged: the objects' own times (set by
            // whoever wrote them) included.
            let strip = |mut v: serde_json::Value| {
                let o = v.as_object_mut().unwrap();
                o.remove("requestReceivedTimestamp");
                o.remove("stageTimestamp");
                v
            };
            assert_eq!(strip(now), strip(was));
            assert_eq!(shift_times(&moved, -1_500_000_000), line.as_bytes());
        }
    }

    /// Found by the fuzz target `audit_lines`: a time moved before the
    /// epoch (or past year 9999) made humantime panic; it stays as logged.
    #[test]
    fn a_time_moved_out_of_rfc_3339s_range_stays_as_it_is() {
        let line = fixture_lines().remove(0);
        // 292 years back: before the epoch.
        assert_eq!(shift_times(line.as_bytes(), i64::MIN), line.as_bytes());
        assert_eq!(shifted("1970-01-01T00:00:00.000001Z", -2_000), None);
        assert_eq!(shifted("9999-12-31T23:59:59.000000Z", 1_000_000_000), None);
        assert_eq!(
            shifted("9999-12-31T23:59:58.000000Z", 1_000_000_000).as_deref(),
            Some("9999-12-31T23:59:59.000000Z")
        );
    }

    #[test]
    fn what_is_not_a_time_stays_as_it_is() {
        let line = fixture_lines()
            .remove(0)
            .replace("\"stageTimestamp\":\"", "\"stageTimestamp\":\"x");
        let moved = String::from_utf8(shift_times(line.as_bytes(), 1_000)).unwrap();
        let (was, now): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&line).unwrap(),
            serde_json::from_str(&moved).unwrap(),
        );
        assert_eq!(now["stageTimestamp"], was["stageTimestamp"]);
        assert_ne!(
            now["requestReceivedTimestamp"],
            was["requestReceivedTimestamp"]
        );
    }
}
