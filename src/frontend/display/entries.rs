//! One entry or object as the UI shows it: visible attributes, diff lines,
//! problems and error status.

use super::*;

/// Most characters of one diff value shown in a log.
pub(super) const MAX_VALUE_CHARS: usize = 400;

pub(super) fn span_id(seed: &str, salt: u64) -> Vec<u8> {
    let v = xxh3_64_with_seed(seed.as_bytes(), salt).max(1);
    v.to_be_bytes().to_vec()
}

/// Whether a raw attribute is shown: kascade's internal ones are not, nor
/// what the raw Jaeger added to its copy (`@jaeger@warnings` about the
/// zero-length spans of Events and links).
pub(super) fn is_visible(key: &str) -> bool {
    !key.starts_with("kascade.") && !key.starts_with("link.") && !key.starts_with("@jaeger@")
}

/// The attributes a person sees: kascade's internal ones left out, and a
/// core object's empty `group`.
pub(super) fn visible(attrs: &[KeyValue]) -> Vec<KeyValue> {
    attrs
        .iter()
        .filter(|kv| is_visible(&kv.key) && !is_empty(kv))
        .cloned()
        .collect()
}

/// A tag whose value is the empty string (a core object's group, a
/// cluster-scoped object's namespace): it says nothing, so it is not shown.
pub(super) fn is_empty(kv: &KeyValue) -> bool {
    string_attr(std::slice::from_ref(kv), &kv.key) == Some("")
}

pub(super) fn shorten(s: &str) -> String {
    if s.chars().count() <= MAX_VALUE_CHARS {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX_VALUE_CHARS).collect();
        t.push('…');
        t
    }
}

/// One line per changed path: `path: old → new`, `+ path: new`, `- path: old`.
pub(crate) fn diff_lines(span: &Span) -> Vec<String> {
    span.events
        .iter()
        .filter(|e| e.name == EVENT_DIFF)
        .map(|e| {
            let a = &e.attributes;
            let path = string_attr(a, attr::DIFF_PATH).unwrap_or("?");
            let old = string_attr(a, attr::DIFF_OLD).map(shorten);
            let new = string_attr(a, attr::DIFF_NEW).map(shorten);
            match (string_attr(a, attr::DIFF_OP), old, new) {
                (Some("add"), _, Some(n)) => format!("+ {path}: {n}"),
                (Some("remove"), Some(o), _) => format!("- {path}: {o}"),
                (_, o, n) => format!(
                    "{path}: {} → {}",
                    o.unwrap_or_else(|| "∅".into()),
                    n.unwrap_or_else(|| "∅".into())
                ),
            }
        })
        .collect()
}

pub(crate) fn snapshot(span: &Span) -> Option<&str> {
    span.events
        .iter()
        .find(|e| e.name == EVENT_SNAPSHOT)
        .and_then(|e| string_attr(&e.attributes, attr::SNAPSHOT))
}

pub(super) fn is_error(span: &Span) -> bool {
    span.status
        .as_ref()
        .is_some_and(|s| s.code == StatusCode::Error as i32)
}

/// The spec fields of an object its writers fight over (set back and
/// forth, as `judgement::FieldOwnership` judges it), with the
/// writes that set them.
fn fought_fields(n: &Node) -> Vec<(&str, judgement::FieldOwnership<&str>, Vec<&Span>)> {
    let mut fields: BTreeMap<&str, (judgement::FieldOwnership<&str>, Vec<&Span>)> = BTreeMap::new();
    for e in &n.history.entries {
        let a = &e.span.attributes;
        if e.source != Source::Audit
            || is_error(&e.span)
            || string_attr(a, attr::AUDIT_SUBRESOURCE).is_some_and(|s| !s.is_empty())
        {
            continue;
        }
        let Some(user) = string_attr(a, attr::AUDIT_USER) else {
            continue;
        };
        for d in e.span.events.iter().filter(|d| d.name == EVENT_DIFF) {
            if let Some(path) = string_attr(&d.attributes, attr::DIFF_PATH)
                && path.starts_with("spec")
            {
                let (f, writes) = fields.entry(path).or_default();
                f.set(&user);
                writes.push(&e.span);
            }
        }
    }
    fields
        .into_iter()
        .filter(|(_, (f, _))| f.is_fight())
        .map(|(path, (f, writes))| (path, f, writes))
        .collect()
}

/// [`fought_fields`]' first, said in one line.
fn fought_field(n: &Node) -> Option<String> {
    let (path, f, _) = fought_fields(n).into_iter().next()?;
    Some(fight_line(path, &f))
}

/// The writes (by span id) that set a field their writers fight over, each
/// with what is wrong: in error in the cascade mode.
pub(crate) fn fight_writes(asm: &Assembly) -> HashMap<Vec<u8>, String> {
    let mut out = HashMap::new();
    for n in &asm.nodes {
        for (path, f, writes) in fought_fields(n) {
            let line = fight_line(path, &f);
            for w in writes {
                out.insert(w.span_id.clone(), line.clone());
            }
        }
    }
    out
}

fn fight_line(path: &str, f: &judgement::FieldOwnership<&str>) -> String {
    let who: Vec<String> = f
        .repeat_writers()
        .map(|(w, times)| format!("{w} (×{times})"))
        .collect();
    format!(
        "{path} set back and forth by {} writers, {} times: {}",
        who.len(),
        f.handovers() + 1,
        who.join(", ")
    )
}

/// Whether the object was ready at the end of the trace: the last
/// readiness the collector recorded (aggregate/readiness/) is `Current`.
pub(super) fn recovered(n: &Node) -> bool {
    n.history
        .entries
        .iter()
        .rev()
        .find_map(|e| string_attr(&e.span.attributes, attr::OBJECT_STATUS))
        == Some("Current")
}

/// Whether an entry is shown in error, as `judgement` decides
/// for every output: a refused write judged an error (not a conflict its
/// writer retries, the delete of something already gone, a create of
/// something that exists); a Warning Event that
/// reports a failure the object did not recover from. `recovered` is
/// [`recovered`] of the entry's object.
pub(super) fn is_error_mark(e: &Entry, recovered: bool) -> bool {
    if !is_error(&e.span) {
        return false;
    }
    let a = &e.span.attributes;
    match e.source {
        Source::Event => {
            let reason = string_attr(a, attr::EVENT_REASON).unwrap_or(&e.span.name);
            judgement::warning_severity(reason, recovered) == judgement::Severity::Error
        }
        _ => match crate::frontend::raw::int_attr(a, attr::AUDIT_CODE) {
            Some(code) => {
                let verb = string_attr(a, attr::AUDIT_VERB).unwrap_or_default();
                let message = e.span.status.as_ref().map_or("", |s| s.message.as_str());
                let code = code as i32;
                judgement::Refusal::of(code, verb, message, false).is_error()
            }
            None => true,
        },
    }
}

/// Whether the write or watch change `e` removed its object (a delete the
/// collector recorded no readiness for, answered 2xx or 404; a watch
/// `DELETED`), as the cascade records read it (`frontend::cascade`).
fn removed_by(e: &Entry) -> bool {
    let a = &e.span.attributes;
    if string_attr(a, attr::OBJECT_REMOVED) == Some("true") {
        return true;
    }
    match e.source {
        Source::Watch => string_attr(a, attr::WATCH_TYPE) == Some("deleted"),
        Source::Audit => {
            let code = crate::frontend::raw::int_attr(a, attr::AUDIT_CODE).unwrap_or(200);
            string_attr(a, attr::AUDIT_VERB) == Some("delete")
                && string_attr(a, attr::OBJECT_STATUS).is_none()
                && (code < 300 || code == 404)
        }
        _ => false,
    }
}

/// What is wrong with an object at the end of the trace, if anything: a
/// state that is not ready (the last readiness recorded), else failed
/// writes and Warning Events.
pub(crate) fn problem(n: &Node) -> Option<String> {
    // The readiness the collector recorded after each write
    // (aggregate/readiness/): Current, InProgress, Failed, Terminating. An
    // object removed at the end has none (what it was waiting for is over).
    let last_status = n
        .history
        .entries
        .iter()
        .rev()
        .find(|e| e.source != Source::Event);
    let removed = last_status.is_some_and(removed_by);
    let with_status = || {
        n.history
            .entries
            .iter()
            .filter(|e| string_attr(&e.span.attributes, attr::OBJECT_STATUS).is_some())
    };
    // The last logged, unless etcd stored another later: a higher
    // resourceVersion logged earlier (its apiserver's clock behind, or a
    // response finished late) is the object's newer state.
    let version = |e: &Entry| {
        string_attr(&e.span.attributes, attr::AUDIT_RV_NEW)
            .or_else(|| string_attr(&e.span.attributes, attr::WATCH_RV_NEW))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let logged_last = with_status().next_back();
    let stored_last = logged_last
        .and_then(version)
        .and_then(|last| {
            with_status()
                .filter(|e| version(e).is_some_and(|v| v > last))
                .max_by_key(|e| version(e))
        })
        .or(logged_last);
    let last_status = stored_last.filter(|_| !removed).map(|e| {
        (
            string_attr(&e.span.attributes, attr::OBJECT_STATUS).unwrap_or_default(),
            string_attr(&e.span.attributes, attr::OBJECT_STATUS_MESSAGE),
        )
    });
    let with_message = |what: &str, m: Option<&str>| match m.filter(|m| !m.is_empty()) {
        Some(m) => format!("{what}: {m}"),
        None => what.to_string(),
    };
    match last_status {
        Some(("InProgress", m)) => return Some(with_message("not ready", m)),
        Some(("Failed", m)) => return Some(with_message("failed", m)),
        // A deletion something holds (finalizers, a namespace's content);
        // a graceful one in progress is not a problem.
        Some(("Terminating", Some(m))) if crate::aggregate::readiness::deletion_is_held(m) => {
            return Some(with_message("not deleted", Some(m)));
        }
        _ => {}
    }
    if let Some(fight) = fought_field(n) {
        return Some(fight);
    }
    let recovered = recovered(n);
    let failed: Vec<&Entry> = n
        .history
        .entries
        .iter()
        .filter(|e| is_error_mark(e, recovered))
        .collect();
    let first = failed.first()?;
    let what = match first.source {
        Source::Event => format!("event {}", first.span.name),
        _ => first.span.name.clone(),
    };
    let message = first.span.status.as_ref().map(|s| s.message.as_str());
    let events = failed.iter().filter(|e| e.source == Source::Event).count();
    let writes = failed.len() - events;
    // Repeats folded into an Event (`assemble::REPEATED_TIMES`) count too.
    let events = events
        + failed
            .iter()
            .filter(|e| e.source == Source::Event)
            .filter_map(|e| {
                crate::frontend::raw::int_attr(
                    &e.span.attributes,
                    crate::frontend::assemble::REPEATED_TIMES,
                )
            })
            .map(|n| usize::try_from(n).unwrap_or(0))
            .sum::<usize>();
    let head = match (writes, events) {
        (1, 0) | (0, 1) => what,
        (w, 0) => format!("{w} failed writes, first {what}"),
        (0, v) => format!("{v} failure Events, first {what}"),
        (w, v) => format!(
            "{} and {}, first {what}",
            if w == 1 {
                "1 failed write".to_string()
            } else {
                format!("{w} failed writes")
            },
            if v == 1 {
                "1 failure Event".to_string()
            } else {
                format!("{v} failure Events")
            },
        ),
    };
    Some(with_message(&head, message))
}

/// The error status of each object span: its own problem, else (for the
/// objects of the tree proper) the first problem among its descendants,
/// so a failure deep in the tree shows on the path down to it. Shared
/// objects (copies, and what hangs below a shared class) keep theirs to
/// themselves.
pub(super) fn error_statuses(asm: &Assembly) -> Vec<Option<String>> {
    let own: Vec<Option<String>> = asm.nodes.iter().map(problem).collect();
    let mut out = own.clone();
    let mut below: Vec<(usize, usize)> = vec![(0, usize::MAX); asm.nodes.len()];
    // Children come after their parents in the walk: go backwards.
    for &(i, _) in asm.walk().iter().rev() {
        let n = &asm.nodes[i];
        let Some(p) = n.parent else { continue };
        if n.shared {
            continue;
        }
        let (count, first) = below[i];
        let add = usize::from(own[i].is_some()) + count;
        if add == 0 {
            continue;
        }
        let first = if own[i].is_some() { i } else { first };
        let (pc, pf) = below[p];
        below[p] = (pc + add, if pf == usize::MAX { first } else { pf });
    }
    for (i, (count, first)) in below.into_iter().enumerate() {
        if out[i].is_some() || count == 0 || first == usize::MAX {
            continue;
        }
        let f = &asm.nodes[first];
        let others = if count > 1 {
            format!(" (and {} more)", count - 1)
        } else {
            String::new()
        };
        out[i] = Some(format!(
            "below: {} {}{others}: {}",
            f.history.object.resource,
            object_label(f, None),
            own[first].as_deref().unwrap_or_default()
        ));
    }
    out
}

/// An audit entry's span name with its writer shortened
/// (`deployment-controller update status`); the full name stays in the
/// `audit.user` tag.
pub(super) fn short_writer_name(e: &Entry) -> String {
    match string_attr(&e.span.attributes, attr::AUDIT_USER) {
        Some(user) => crate::analysis::cascade::with_short_writer(&e.span.name, user),
        None => e.span.name.clone(),
    }
}

/// An entry folded into one log of its object's span; `recovered` as
/// for [`is_error_mark`].
pub(super) fn entry_log(e: &Entry, recovered: bool) -> Event {
    let mut attributes = visible(&e.span.attributes);
    attributes.insert(0, kv("source", e.source.name()));
    let diff = diff_lines(&e.span);
    if !diff.is_empty() {
        attributes.push(kv("diff", diff.join("\n")));
    }
    if let Some(s) = snapshot(&e.span) {
        attributes.push(kv("snapshot", s));
    }
    if is_error_mark(e, recovered) {
        attributes.push(kv("level", "error"));
        if let Some(st) = &e.span.status {
            attributes.push(kv("error.message", st.message.clone()));
        }
    } else if is_error(&e.span) {
        // Failed, but routine or recovered from: said, not in error.
        attributes.push(kv("level", "info"));
        if let Some(st) = &e.span.status {
            attributes.push(kv("message", st.message.clone()));
        }
        if e.source == Source::Event {
            attributes.push(kv("recovered", "true"));
        }
    }
    let name = match e.source {
        Source::Event => format!("event {}", e.span.name),
        _ => e.span.name.clone(),
    };
    Event {
        time_unix_nano: e.span.start_time_unix_nano,
        name,
        attributes,
        dropped_attributes_count: 0,
    }
}

/// The raw entry span, re-parented into the assembled trace, in error
/// only when [`is_error_mark`] says so.
pub(super) fn entry_span(
    e: &Entry,
    recovered: bool,
    trace_id: &TraceIdBytes,
    parent: &[u8],
    name: String,
) -> Span {
    let mut s = e.span.clone();
    if s.status.is_some() && !is_error_mark(e, recovered) {
        let message = s.status.take().map(|st| st.message).unwrap_or_default();
        if !message.is_empty() {
            s.attributes.push(kv("message", message));
        }
    }
    s.trace_id = trace_id.to_vec();
    s.parent_span_id = parent.to_vec();
    s.name = name;
    s.attributes = visible(&s.attributes);
    s.attributes.insert(0, kv("source", e.source.name()));
    s.links.clear();
    s
}

pub(super) fn object_label(n: &Node, parent: Option<&Node>) -> String {
    let o = &n.history.object;
    let mut s = if o.namespace.is_empty() {
        o.name.clone()
    } else {
        format!("{}/{}", o.namespace, o.name)
    };
    if parent.is_some_and(|p| p.history.object.cluster != o.cluster) {
        s = format!("{s} (cluster {})", o.cluster);
    }
    s
}
