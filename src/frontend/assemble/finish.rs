//! The last steps of an assembly: shared objects clipped to their parents' activity,
//! children in a stable order.

use super::*;

/// A shared object's entries within the activity of the object it is shown
/// under: what happened on a Node while a Pod was there, not before (a
/// child span starting before its parent also makes Jaeger warn of clock
/// skew).
pub(super) fn clip_shared_to_parents(asm: &mut Assembly) {
    for i in 0..asm.nodes.len() {
        let n = &asm.nodes[i];
        if !n.shared {
            continue;
        }
        let Some(range) = n.parent.and_then(|p| asm.nodes[p].history.active_range()) else {
            continue;
        };
        let h = &mut asm.nodes[i].history;
        let before = h.entries.len();
        h.entries.retain(|e| e.starts_within(range));
        h.hidden_entries += before - h.entries.len();
    }
}

/// Whether node `candidate` is `p` or one of its ancestors (a link back up
/// would make a cycle).
pub(super) fn is_ancestor_or_self(nodes: &[Node], candidate: Option<usize>, p: usize) -> bool {
    let Some(c) = candidate else {
        return false;
    };
    let mut at = Some(p);
    while let Some(n) = at {
        if n == c {
            return true;
        }
        at = nodes[n].parent;
    }
    false
}

pub(super) fn child_links(h: &ObjectHistory) -> impl Iterator<Item = &Link> {
    h.links.iter().filter(|l| l.role == Role::Child)
}

/// Children in the order they became active, then by name: stable output.
pub(super) fn sort_children(asm: &mut Assembly) {
    let keys: Vec<(u64, String)> = asm
        .nodes
        .iter()
        .map(|n| {
            (
                n.history.active_range().map_or(u64::MAX, |r| r.0),
                n.history.object.key(),
            )
        })
        .collect();
    for n in &mut asm.nodes {
        n.children.sort_by(|a, b| keys[*a].cmp(&keys[*b]));
    }
}

/// The nodes reached through a set-up class ([`SET_UP_CLASSES`]), or below
/// one, that are neither shared nor on the path to the searched object: a
/// volume searched for (or climbed from) is the trace's own.
pub(super) fn set_up_nodes(asm: &Assembly) -> Vec<bool> {
    let mut out = vec![false; asm.nodes.len()];
    for (i, _) in asm.walk() {
        let n = &asm.nodes[i];
        let by_class = n
            .class
            .as_deref()
            .is_some_and(|c| SET_UP_CLASSES.contains(&c));
        out[i] =
            !n.shared && !asm.on_searched_path(i) && (by_class || n.parent.is_some_and(|p| out[p]));
    }
    out
}
