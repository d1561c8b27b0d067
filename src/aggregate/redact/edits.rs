//! Redaction's replacements: found by a walk that only reads, made after
//! it.

use super::hidden::Sink;
use crate::json::{JsonValueMutTrait as _, Value};

/// A step from a value to one of its children.
#[derive(Clone, Copy)]
pub(super) enum Hop<'v> {
    Field(&'v str),
    Item(usize),
}

/// Leaves to replace, found by a walk that only reads: a walk through
/// `&mut Value` would make every object it passes an owned map (a parsed
/// object's nodes live in one arena until written through), where a
/// replacement makes owned only the objects above it.
#[derive(Default)]
pub(super) struct Edits<'v> {
    /// The walk's place: the hops from the object to the value it is at.
    pub(super) trail: Vec<Hop<'v>>,
    pub(super) found: Vec<(Vec<OwnedHop>, Value)>,
}

pub(super) enum OwnedHop {
    Field(Box<str>),
    Item(usize),
}

impl Edits<'_> {
    /// Replaces the value the walk is at with `by`.
    pub(super) fn replace(&mut self, by: Value) {
        let path = self
            .trail
            .iter()
            .map(|hop| match *hop {
                Hop::Field(k) => OwnedHop::Field(k.into()),
                Hop::Item(i) => OwnedHop::Item(i),
            })
            .collect();
        self.found.push((path, by));
    }
}

/// Makes the replacements [`Edits`] found in `obj` (the object walked);
/// whether there were any.
pub(super) fn apply_edits(
    found: Vec<(Vec<OwnedHop>, Value)>,
    obj: &mut Value,
    sink: &mut Sink,
) -> bool {
    let changed = !found.is_empty();
    for (path, by) in found {
        let slot = path.iter().try_fold(&mut *obj, |cur, hop| match hop {
            OwnedHop::Field(k) => cur.as_object_mut()?.get_mut(k),
            OwnedHop::Item(i) => cur.as_array_mut()?.get_mut(*i),
        });
        if let Some(slot) = slot {
            sink.note(slot, &by);
            *slot = by;
        }
    }
    changed
}
