//! Unit tests of the cause index's own bookkeeping.

use super::*;
use crate::flow::CpidOrigin;

#[test]
fn creates_cpids_beyond_the_bound_are_forgotten_oldest_first_and_counted() {
    let rules = RuleSet::load_dir(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules"
    )))
    .unwrap();
    let metrics = Arc::new(Metrics::default());
    let index = CauseIndex::new(&rules, 1_000, &metrics);
    let create = |i: u64| entry::test_entry(i, ChangeClass::Create, 1_000, 1_000, 0);
    let creates: Vec<Arc<ChangeEntry>> = (1..=MAX_CREATED_CPIDS as u64 + 1).map(create).collect();
    let cpid = WriteCpid {
        cpid: kascade_cpid::Cpid::new_random(),
        origin: CpidOrigin::Annotation,
    };
    for c in &creates {
        index.note_own_cpid(c, cpid);
    }
    assert_eq!(metrics.cascade_cpids_forgotten.get(), 1);
    assert_eq!(metrics.cascade_candidates_dropped.get(), 0);
    // The first create's CPID went; the others' are kept until resolved.
    assert!(index.unresolved(&creates[0]).is_none());
    let last = creates.last().unwrap();
    assert_eq!(
        index.unresolved(last).and_then(|r| r.cpid).map(|c| c.cpid),
        Some(cpid.cpid)
    );
    let resolved = Resolved {
        root: last.span,
        depth: 3,
        cpid: None,
        pod_end: None,
    };
    index.resolve_own(last, resolved);
    assert_eq!(index.unresolved(last).map(|r| r.depth), Some(3));
    assert!(
        !index
            .created_cpids
            .lock()
            .unwrap()
            .contains_key(&last.arrival)
    );
}
