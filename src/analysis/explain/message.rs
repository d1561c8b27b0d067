//! Messages made comparable: the refused create and the Event that
//! reports it, the same Event on sibling Pods, differ only in generated
//! names and a prefix.

use std::sync::LazyLock;

use regex::Regex;

/// Generated name suffixes (`-5d4f9c8b7`, `-x7k2p`: Kubernetes' random
/// alphabet) become `-…`, so messages about sibling objects compare equal.
static GENERATED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-[bcdfghjklmnpqrstvwxz2456789]{5,10}\b").expect("static regex"));

/// A message made comparable: generated names elided, a leading
/// `Error creating:` and reason word dropped, lower case.
pub(super) fn normalize(message: &str) -> String {
    let m = message.trim();
    let m = m.strip_prefix("Error creating: ").unwrap_or(m);
    GENERATED.replace_all(m, "-…").to_lowercase()
}

/// Whether two normalized messages say the same thing (one contains the
/// start of the other, ignoring a `Reason: ` prefix).
pub(super) fn same_message(a: &str, b: &str) -> bool {
    fn body(s: &str) -> &str {
        match s.split_once(": ") {
            Some((head, rest)) if !head.contains(' ') && !rest.is_empty() => rest,
            _ => s,
        }
    }
    fn head(s: &str) -> &str {
        let end = s.char_indices().nth(60).map_or(s.len(), |(i, _)| i);
        &s[..end]
    }
    let (a, b) = (body(a), body(b));
    if a.is_empty() || b.is_empty() {
        return false;
    }
    a.contains(head(b)) || b.contains(head(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_and_prefixes_do_not_tell_messages_apart() {
        let event = normalize(
            "Error creating: pods \"capped-7d4b9c6f5-x7k2p\" is forbidden: exceeded quota: pods",
        );
        let write = normalize("pods \"capped-7d4b9c6f5-qz9vw\" is forbidden: exceeded quota: pods");
        assert_eq!(event, write);
        assert!(same_message(&event, &write));
        let state = normalize("Unschedulable: 0/1 nodes are available: 1 node(s) didn't match");
        let scheduler = normalize("0/1 nodes are available: 1 node(s) didn't match Pod's node");
        assert!(same_message(&state, &scheduler));
        assert!(!same_message(
            &normalize("Back-off restarting failed container"),
            &scheduler
        ));
        // Words that only look generated stay.
        assert_eq!(normalize("rollout-demo"), "rollout-demo");
    }
}
