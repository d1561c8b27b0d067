//! What a write changed, as a person reads it (a trigger's change list).

use crate::json::Value;

use crate::aggregate::diff;

/// Lines of a trigger's change list.
const MAX_TRIGGER_LINES: usize = 8;
/// A value in a change line is cut to this many characters.
const MAX_VALUE_CHARS: usize = 160;

/// What a write changed, as a person reads it: the object's spec, labels,
/// annotations and finalizers (status and bookkeeping left out).
pub(super) fn changed_lines(old: Option<&Value>, new: Option<&Value>) -> Vec<String> {
    let (Some(old), Some(new)) = (old, new) else {
        return Vec::new();
    };
    change_lines(diff::diff(old, new).iter().map(|c| {
        (
            c.op(),
            &*c.path,
            c.old.as_deref().unwrap_or(""),
            c.new.as_deref().unwrap_or(""),
        )
    }))
}

/// Change lines from `(op, path, old, new)` (ops `add`, `remove`,
/// `replace`, as diffs and `diff` span events have them), what a person
/// reads only: status and bookkeeping left out, values cut, at most a few.
pub(crate) fn change_lines<'a>(
    changes: impl Iterator<Item = (&'a str, &'a str, &'a str, &'a str)>,
) -> Vec<String> {
    let interesting = |p: &str| {
        !(p.starts_with("status")
            || p.starts_with("metadata.generation")
            || p.starts_with("metadata.uid")
            || p.starts_with("metadata.creationTimestamp")
            || diff::is_noise(p))
    };
    let mut out = Vec::new();
    let mut more = 0;
    for (op, path, old, new) in changes.filter(|c| interesting(c.1)) {
        if out.len() == MAX_TRIGGER_LINES {
            more += 1;
            continue;
        }
        out.push(match op {
            "add" => format!("+ {path} = {}", cut(new)),
            "remove" => format!("- {path} (was {})", cut(old)),
            _ => format!("~ {path}: {} → {}", cut(old), cut(new)),
        });
    }
    if more > 0 {
        out.push(format!("… {more} more"));
    }
    out
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_VALUE_CHARS {
        s.to_string()
    } else {
        let head: String = s.chars().take(MAX_VALUE_CHARS).collect();
        format!("{head}…")
    }
}
