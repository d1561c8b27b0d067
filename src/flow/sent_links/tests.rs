//! Unit tests of the journal of sent links.

use super::*;
use crate::model::ObjectRef;

impl SentLinks {
    /// Keeps only the pending notes whose index `keep` accepts: as if the
    /// others were noted after a mark, and their batch never left.
    pub(crate) fn keep_pending_for_test(&self, keep: impl Fn(usize) -> bool) {
        let mut pending = self.pending.lock().expect("sent links");
        let mut i = 0;
        pending.retain(|_| {
            i += 1;
            keep(i - 1)
        });
    }
}

fn ow(name: &str, window_start: u64) -> ObjectWindow {
    ObjectWindow {
        object: ObjectRef::new("c", "", "pods", "ns", name),
        window_start,
    }
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn open(dir: &Path) -> SentLinks {
    SentLinks::open(dir, Duration::from_secs(1800), SentLinksMetrics::default()).unwrap()
}

#[test]
fn confirmed_links_are_exported_and_written_ones_maybe_sent_with_their_start() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("a", 0), 1, at(1));
    let mark = j.mark();
    j.note(&ow("b", 0), 2, at(2)); // in a batch that left after the mark
    j.write_ahead();
    j.note(&ow("c", 0), 3, at(3)); // never written: its batch never left
    j.confirm(mark);
    drop(j);
    let next = open(dir.path());
    assert_eq!(next.earlier(&ow("a", 0), 1), EarlierLink::Exported);
    assert_eq!(next.earlier(&ow("b", 0), 2), EarlierLink::MaybeSent(at(2)));
    assert_eq!(next.earlier(&ow("c", 0), 3), EarlierLink::Unknown);
    assert_eq!(
        next.earlier(&ow("a", 0), 2),
        EarlierLink::Unknown,
        "another link of the object"
    );
    assert_eq!(
        next.earlier(&ow("a", 1800), 1),
        EarlierLink::Unknown,
        "the next window"
    );
}

#[test]
fn a_restart_never_confirms_what_an_earlier_process_only_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("a", 0), 1, at(1));
    j.write_ahead();
    drop(j); // killed before any checkpoint
    let next = open(dir.path());
    next.note(&ow("b", 0), 2, at(2));
    let mark = next.mark();
    next.confirm(mark);
    drop(next);
    let third = open(dir.path());
    assert_eq!(third.earlier(&ow("a", 0), 1), EarlierLink::MaybeSent(at(1)));
    assert_eq!(third.earlier(&ow("b", 0), 2), EarlierLink::Exported);
}

#[test]
fn a_link_sent_again_with_its_start_and_confirmed_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("a", 0), 1, at(1));
    j.write_ahead();
    drop(j);
    let next = open(dir.path());
    let EarlierLink::MaybeSent(t) = next.earlier(&ow("a", 0), 1) else {
        panic!("written ahead")
    };
    next.note(&ow("a", 0), 1, t);
    let mark = next.mark();
    next.confirm(mark);
    drop(next);
    assert_eq!(
        open(dir.path()).earlier(&ow("a", 0), 1),
        EarlierLink::Exported
    );
}

#[test]
fn a_torn_or_damaged_record_is_skipped_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    for i in 0..3 {
        j.note(&ow("a", 0), i, at(i));
    }
    let mark = j.mark();
    j.confirm(mark);
    drop(j);
    let path = dir.path().join(SENT_LINKS_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    // The header, the rewrite's empty checkpoint, then the three links.
    let second = MAGIC.len() + 2 * RECORD;
    bytes[second + 3] ^= 0xff; // the second link's window start
    bytes.extend_from_slice(&[1, 2, 3]); // a torn append
    std::fs::write(&path, &bytes).unwrap();
    let next = open(dir.path());
    assert_eq!(next.earlier(&ow("a", 0), 0), EarlierLink::Exported);
    assert_eq!(next.earlier(&ow("a", 0), 1), EarlierLink::Unknown);
    assert_eq!(next.earlier(&ow("a", 0), 2), EarlierLink::Exported);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        (MAGIC.len() + 3 * RECORD) as u64,
        "rewritten with the two readable links and one checkpoint"
    );
}

#[test]
fn the_previous_format_is_read_as_exported() {
    let dir = tempfile::tempdir().unwrap();
    let o = ow("a", 0);
    let mut body = Vec::new();
    body.extend_from_slice(&o.window_start.to_le_bytes());
    body.extend_from_slice(&o.cache_digest().to_le_bytes());
    body.extend_from_slice(&7u64.to_le_bytes());
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(dir.path().join(SENT_LINKS_FILE), &body).unwrap();
    let j = open(dir.path());
    assert_eq!(j.earlier(&o, 7), EarlierLink::Exported);
    let bytes = std::fs::read(dir.path().join(SENT_LINKS_FILE)).unwrap();
    assert!(bytes.starts_with(MAGIC), "rewritten in the current format");
}

#[test]
fn windows_past_any_cache_are_dropped_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("old", 0), 1, at(1));
    j.note(&ow("new", 10 * 3600), 1, at(2));
    let mark = j.mark();
    j.confirm(mark);
    drop(j);
    let next = open(dir.path());
    assert_eq!(next.earlier(&ow("old", 0), 1), EarlierLink::Unknown);
    assert_eq!(
        next.earlier(&ow("new", 10 * 3600), 1),
        EarlierLink::Exported
    );
}

#[test]
fn what_an_earlier_process_sent_is_forgotten_once_past_any_cache() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("a", 0), 1, at(1));
    let mark = j.mark();
    j.confirm(mark);
    drop(j);
    let next = open(dir.path());
    next.note(&ow("b", 3600), 1, at(2));
    let mark = next.mark();
    next.confirm(mark);
    assert_eq!(
        next.earlier(&ow("a", 0), 1),
        EarlierLink::Exported,
        "within 2 × ttl of the newest"
    );
    next.note(&ow("b", 4 * 3600), 1, at(3));
    let mark = next.mark();
    next.confirm(mark);
    assert_eq!(next.earlier(&ow("a", 0), 1), EarlierLink::Unknown);
}

#[test]
fn compaction_keeps_each_class_and_later_checkpoints_cover_only_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("earlier", 0), 1, at(1));
    j.write_ahead();
    drop(j);
    let j = open(dir.path());
    j.note(&ow("exported", 0), 2, at(2));
    let mark = j.mark();
    j.note(&ow("ours", 0), 3, at(3));
    j.write_ahead();
    j.confirm(mark);
    {
        let mut w = j.writer.lock().unwrap();
        j.compact(&mut w).unwrap();
    }
    let mark = j.mark(); // covers "ours", written before it
    j.confirm(mark);
    drop(j);
    let next = open(dir.path());
    assert_eq!(
        next.earlier(&ow("earlier", 0), 1),
        EarlierLink::MaybeSent(at(1))
    );
    assert_eq!(next.earlier(&ow("exported", 0), 2), EarlierLink::Exported);
    assert_eq!(next.earlier(&ow("ours", 0), 3), EarlierLink::Exported);
}

#[test]
fn the_file_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let j = open(dir.path());
    j.note(&ow("a", 0), 1, at(1));
    j.write_ahead();
    let mode = std::fs::metadata(dir.path().join(SENT_LINKS_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
