//! Repeats of an Event after the tree's last write, folded into the
//! occurrence last shown: a Pod stuck for ten minutes has its scheduler or
//! kubelet say the same thing every minute, which would stretch the trace
//! far past the last change and leave its story in the first pixels.

use super::*;
use crate::frontend::merge::{Entry, Source};
use crate::frontend::raw::{int_attr, string_attr};
use crate::span_model::{attr, kv, kv_int};

/// Attributes of an Event entry its later repeats were folded into.
pub(crate) const REPEATED: &str = "repeated";
/// How many later occurrences were folded.
pub(crate) const REPEATED_TIMES: &str = "repeated.times";
/// When the last of them came (RFC 3339).
pub(crate) const REPEATED_UNTIL: &str = "repeated.until";
/// The Event's count at the last of them, when it has one.
pub(crate) const REPEATED_COUNT: &str = "repeated.count";

/// Folds, in every object of `asm`, each Event that comes after the last
/// write of the tree proper (not shared objects) and repeats one already
/// shown on the same object (same type, reason and message) into that
/// occurrence (tags [`REPEATED`], [`REPEATED_TIMES`], [`REPEATED_UNTIL`],
/// [`REPEATED_COUNT`]). An Event new after the last write is shown (its
/// own repeats are folded into it). Notes on the trace how many were
/// folded.
pub(super) fn fold_repeats(asm: &mut Assembly) {
    let last_write = asm
        .nodes
        .iter()
        .filter(|n| !n.shared)
        .flat_map(|n| n.history.entries.iter())
        .filter(|e| matches!(e.source, Source::Audit | Source::Watch))
        .map(|e| e.span.start_time_unix_nano)
        .max();
    let Some(last_write) = last_write else {
        return;
    };
    let folded: usize = asm
        .nodes
        .iter_mut()
        .map(|n| fold_history(&mut n.history, last_write))
        .sum();
    match folded {
        0 => {}
        1 => asm.notes.push(format!(
            "1 repeat of an Event after the last write folded into the occurrence shown before it (tag {REPEATED})"
        )),
        n => asm.notes.push(format!(
            "{n} repeats of Events after the last write folded into the occurrences shown before them (tag {REPEATED})"
        )),
    }
}

/// Whether `note` is the one [`fold_repeats`] adds to a trace: about
/// Events, which cascades (display mode `cascade`) do not show.
pub(crate) fn is_fold_note(note: &str) -> bool {
    note.ends_with(&format!("(tag {REPEATED})"))
}

/// What identifies an Event's repeats: its type, reason and message.
fn event_key(e: &Entry) -> (String, String, String) {
    let a = &e.span.attributes;
    let get = |k: &str| string_attr(a, k).unwrap_or_default().to_string();
    (
        get(attr::EVENT_TYPE),
        string_attr(a, attr::EVENT_REASON)
            .unwrap_or(&e.span.name)
            .to_string(),
        get(attr::EVENT_MESSAGE),
    )
}

#[derive(Default)]
struct Fold {
    times: usize,
    until: u64,
    count: Option<i64>,
}

/// Folds one object's repeats after `last_write`; returns how many.
fn fold_history(h: &mut ObjectHistory, last_write: u64) -> usize {
    if !h
        .entries
        .iter()
        .any(|e| e.source == Source::Event && e.span.start_time_unix_nano > last_write)
    {
        return 0;
    }
    // Each Event's last occurrence kept, as an index into `kept`.
    let mut shown: HashMap<(String, String, String), usize> = HashMap::new();
    let mut folds: std::collections::BTreeMap<usize, Fold> = Default::default();
    let mut kept: Vec<Entry> = Vec::with_capacity(h.entries.len());
    let mut folded = 0;
    for e in std::mem::take(&mut h.entries) {
        if e.source != Source::Event {
            kept.push(e);
            continue;
        }
        let key = event_key(&e);
        let t = e.span.start_time_unix_nano;
        if t > last_write
            && let Some(&at) = shown.get(&key)
        {
            let f = folds.entry(at).or_default();
            f.times += 1;
            f.until = f.until.max(t);
            f.count = int_attr(&e.span.attributes, attr::EVENT_COUNT).or(f.count);
            folded += 1;
            continue;
        }
        shown.insert(key, kept.len());
        kept.push(e);
    }
    for (at, f) in folds {
        let until = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(f.until),
        )
        .to_string();
        let a = &mut kept[at].span.attributes;
        let times = if f.times == 1 {
            "1 more time".to_string()
        } else {
            format!("{} more times", f.times)
        };
        a.push(kv(REPEATED, format!("{times} until {until}")));
        a.push(kv_int(REPEATED_TIMES, f.times as i64));
        a.push(kv(REPEATED_UNTIL, until));
        if let Some(c) = f.count {
            a.push(kv_int(REPEATED_COUNT, c));
        }
    }
    h.entries = kept;
    folded
}
