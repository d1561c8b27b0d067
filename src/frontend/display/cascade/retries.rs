//! Long runs of retries folded: a controller refused for minutes (the
//! ReplicaSet controller under a quota) tries again a dozen times, each
//! attempt refused like the first. The first attempt, the first retry and
//! the last retry are shown (the last says whether the work got through);
//! one row stands for the attempts between, with their back-offs. The tag
//! `siblings=all` (`--max-siblings 0`) shows every attempt.

use std::collections::BTreeMap;

use super::summary::{Folded, Summary};
use crate::analysis::cascade::{Attempt, Cascade};
use crate::frontend::display::siblings::hide_subtree;

/// Retries of one first attempt shown before the rest are folded: the
/// first retry and the last.
const RETRIES_SHOWN: usize = 2;

/// Folds each first attempt's retries beyond [`RETRIES_SHOWN`] that are
/// still shown into one [`Summary`], hiding them and what they caused.
pub(super) fn fold(c: &Cascade, hidden: &mut [bool], summaries: &mut Vec<Summary>) {
    let mut runs: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(retry, first) in &c.retried {
        if !hidden[retry] && c.parent[retry].is_some_and(|p| !hidden[p]) {
            runs.entry(first).or_default().push(retry);
        }
    }
    for (_, mut run) in runs {
        if run.len() <= RETRIES_SHOWN + 1 {
            continue;
        }
        run.sort_by_key(|&i| (c.changes[i].received, i));
        let last = run.pop().expect("more than one retry");
        let members = run.split_off(1);
        // Folded under one cause: the shown retries' (a retry's cause is
        // its first attempt's), so the row sits beside them.
        let Some(parent) = c.parent[last] else {
            continue;
        };
        let members: Vec<usize> = members
            .into_iter()
            .filter(|&m| c.parent[m] == Some(parent))
            .collect();
        if members.len() < 2 {
            continue;
        }
        for &m in &members {
            hide_subtree(m, |i| &c.children[i], hidden);
        }
        let attempt = |i: usize| match c.attempts[i] {
            Attempt::Retry { attempt, .. } => attempt,
            Attempt::First => 1,
        };
        let ch = &c.changes[members[0]];
        summaries.push(Summary {
            parent,
            resource: ch.object.resource.clone(),
            verb: ch.verb.clone(),
            subresource: ch.subresource.clone(),
            shown: RETRIES_SHOWN + 1,
            folded: Folded::Retries {
                from: attempt(members[0]),
                to: attempt(members[members.len() - 1]),
            },
            members,
        });
    }
}
