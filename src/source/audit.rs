//! Audit events as they arrive: the webhook's `EventList` and the lines of
//! an audit log decoded into [`AuditEvent`]s, and the filter that decides
//! which of them become spans.

use crate::model::FastHashSet as HashSet;

use regex::Regex;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::flow::{AUDIT_API_VERSION, AuditEvent, FilterReason};
use crate::json::depth;
use crate::messages::{clip_message, quote};

/// Whether the request URI asks for a dry run (`?dryRun=All`, also among
/// other query parameters).
fn is_dry_run(uri: &str) -> bool {
    uri.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|p| {
            p.split_once('=')
                .is_some_and(|(k, v)| k == "dryRun" && !v.is_empty())
        })
    })
}

#[derive(Debug, Clone)]
pub struct AuditFilter {
    pub verbs: HashSet<String>,
    /// Resources (`resource` or `resource.group`) to drop.
    pub exclude_resources: HashSet<String>,
    pub exclude_user_agents: Option<Regex>,
}

pub(crate) const DEFAULT_VERBS: &[&str] =
    &["create", "update", "patch", "delete", "deletecollection"];
/// Events (`events`, `events.events.k8s.io`) are not excluded: each Event
/// write becomes an event span on the object it is about.
pub(crate) const DEFAULT_EXCLUDED_RESOURCES: &[&str] = &["leases"];

impl Default for AuditFilter {
    fn default() -> Self {
        Self {
            verbs: DEFAULT_VERBS.iter().map(|s| s.to_string()).collect(),
            exclude_resources: DEFAULT_EXCLUDED_RESOURCES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            exclude_user_agents: None,
        }
    }
}

impl AuditFilter {
    pub fn check(&self, ev: &AuditEvent) -> Result<(), FilterReason> {
        if ev.stage != "ResponseComplete" {
            return Err(FilterReason::Stage);
        }
        if !self.verbs.contains(&ev.verb) {
            return Err(FilterReason::Verb);
        }
        if is_dry_run(&ev.request_uri) {
            return Err(FilterReason::DryRun);
        }
        let Some(r) = ev.object_ref.as_ref() else {
            return Err(FilterReason::NoObject);
        };
        if self.exclude_resources.contains(&r.resource)
            || (!r.api_group.is_empty()
                && self
                    .exclude_resources
                    .contains(&format!("{}.{}", r.resource, r.api_group)))
        {
            return Err(FilterReason::Resource);
        }
        if let Some(re) = &self.exclude_user_agents
            && re.is_match(&ev.user_agent)
        {
            return Err(FilterReason::UserAgent);
        }
        Ok(())
    }
}

/// The body of an audit webhook request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventListEnvelope {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub items: Vec<Box<RawValue>>,
}

/// A well-formed webhook body, decoded in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypedEventList {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    items: Vec<AuditEvent>,
}

fn check_envelope(kind: &str, api_version: &str) -> Result<(), String> {
    if kind != "EventList" {
        return Err(format!("kind {} is not EventList", quote(kind)));
    }
    if api_version != AUDIT_API_VERSION {
        return Err(format!(
            "apiVersion {} is not {AUDIT_API_VERSION}",
            quote(api_version)
        ));
    }
    Ok(())
}

/// Result of decoding a webhook body: good events, and one message per bad item.
pub struct DecodedBatch {
    pub events: Vec<AuditEvent>,
    pub errors: Vec<String>,
}

/// Decodes an `EventList`; a malformed item is reported by index and does not
/// take the rest of the batch down. Fails as a whole only when the envelope
/// itself is not an `audit.k8s.io/v1` `EventList`.
pub fn decode_event_list(body: &[u8]) -> Result<DecodedBatch, String> {
    // Nesting is bounded before sonic-rs, which recurses, sees the body:
    // an event's objects sit at level 4 (list, items, event, object).
    let capped = crate::json::utf8(body)
        .ok()
        .map(|text| depth::cap(text, depth::MAX_OBJECT_DEPTH, 3));
    let deep = capped.as_ref().is_some_and(|c| c.markers > 0);
    let mut batch = decode_bounded(body, capped.as_ref().map(|c| c.text.as_ref()))?;
    if deep {
        batch
            .events
            .iter_mut()
            .for_each(AuditEvent::count_deep_values);
    }
    Ok(batch)
}

/// [`decode_event_list`] of a body whose nesting is bounded; `text` is the
/// body as UTF-8, when it is.
fn decode_bounded(body: &[u8], text: Option<&str>) -> Result<DecodedBatch, String> {
    // Almost every batch is well-formed: decode it in one pass, and go item by
    // item (to name the bad ones and keep the rest) only when that fails.
    // sonic-rs checks UTF-8 only in the strings it decodes, not in those it
    // skips or keeps raw (the objects' text): the body is checked whole, and
    // one that is not UTF-8 goes the item-by-item way, where serde_json
    // checks every string (and each item's nesting is bounded on its own).
    if let Some(text) = text
        && let Ok(list) = sonic_rs::from_str::<TypedEventList>(text)
    {
        check_envelope(&list.kind, &list.api_version)?;
        let mut events = Vec::with_capacity(list.items.len());
        let mut errors = Vec::new();
        for (i, ev) in list.items.into_iter().enumerate() {
            match ev.validate() {
                Ok(()) => events.push(ev),
                Err(e) => errors.push(format!("items[{i}]: {e}")),
            }
        }
        return Ok(DecodedBatch { events, errors });
    }
    let body = text.map_or(body, str::as_bytes);
    let env: EventListEnvelope = serde_json::from_slice(body)
        .map_err(|e| clip_message(format!("body is not a JSON EventList: {e}")))?;
    check_envelope(&env.kind, &env.api_version)?;
    let mut events = Vec::with_capacity(env.items.len());
    let mut errors = Vec::new();
    for (i, raw) in env.items.iter().enumerate() {
        match parse_event(raw.get()) {
            Ok(ev) => events.push(ev),
            Err(e) => errors.push(format!("items[{i}]: {e}")),
        }
    }
    Ok(DecodedBatch { events, errors })
}

/// Parses one audit event (one line of an audit log file). Its nesting is
/// bounded first ([`depth::cap`]): its objects sit at level 2.
pub fn parse_event(json: &str) -> Result<AuditEvent, String> {
    let capped = depth::cap(json, depth::MAX_OBJECT_DEPTH, 1);
    // serde's messages quote wrongly typed strings whole: clipped.
    let mut ev: AuditEvent = sonic_rs::from_str(&capped.text)
        .map_err(|e| not_an_audit_event(&capped.text, clip_message(decode_error(&e))))?;
    ev.validate()
        .map_err(|e| not_an_audit_event(&capped.text, e))?;
    if capped.markers > 0 {
        ev.count_deep_values();
    }
    Ok(ev)
}

/// What a line that is no audit event is instead, said for the reader:
/// an array, a number, a Kubernetes Event, another object (`why` is the
/// decoder's complaint, kept for an object that is almost an audit event).
fn not_an_audit_event(line: &str, why: String) -> String {
    const EXPECTED: &str = "an audit event (kind \"Event\", apiVersion audit.k8s.io/v1)";
    let found = match line.trim_start().as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        Some(b'-' | b'0'..=b'9') => "a number",
        Some(b'{') => {
            // Only a bad line gets here: parsing it once more to say what
            // it is costs nothing on a good log.
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                return format!("not valid JSON ({why}); expected {EXPECTED}");
            };
            let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("");
            let (kind, api_version) = (text("kind"), text("apiVersion"));
            return clip_message(match (kind, api_version) {
                // An audit event with a bad field: the decoder says which.
                ("Event", AUDIT_API_VERSION) => why,
                ("Event", "v1" | "events.k8s.io/v1" | "events.k8s.io/v1beta1") => format!(
                    "a Kubernetes Event (kind \"Event\", apiVersion {api_version}) where {EXPECTED} was expected; Events go in `kascade explain --events`"
                ),
                ("EventList", AUDIT_API_VERSION) => format!(
                    "an audit EventList (the webhook's request body) where {EXPECTED} per line was expected"
                ),
                ("", "") => format!(
                    "a JSON object without kind and apiVersion where {EXPECTED} was expected ({why})"
                ),
                _ => format!(
                    "an object of kind {kind:?}, apiVersion {api_version:?} where {EXPECTED} was expected ({why})"
                ),
            });
        }
        _ => return format!("not valid JSON ({why}); expected {EXPECTED}"),
    };
    format!("expected a JSON object, {EXPECTED}; found {found}")
}

/// A decode error without the fragment of input sonic-rs quotes after the
/// position: that fragment could be any value of the event (a Secret's).
fn decode_error(e: &sonic_rs::Error) -> String {
    let mut msg = e.to_string();
    if let Some(cut) = msg.find("\n\n") {
        msg.truncate(cut);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Audit events the real control plane wrote (e2e/fixtures).
    fn fixture_events() -> Vec<Value> {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    }

    #[test]
    fn oversized_fields_make_an_event_malformed_with_a_short_message() {
        let real = fixture_events()
            .into_iter()
            .find(|e| e["objectRef"]["name"].is_string())
            .unwrap();
        assert!(parse_event(&real.to_string()).is_ok());
        let cases = [
            ("objectRef.name", "/objectRef/name", 254, 253),
            ("objectRef.namespace", "/objectRef/namespace", 64, 63),
            ("objectRef.resource", "/objectRef/resource", 5 << 20, 253),
            ("userAgent", "/userAgent", 20 << 20, 4096),
            ("user.username", "/user/username", 4097, 4096),
        ];
        for (field, pointer, len, max) in cases {
            let with = |len: usize| {
                let mut ev = real.clone();
                *ev.pointer_mut(pointer).unwrap() = Value::String("x".repeat(len));
                parse_event(&ev.to_string())
            };
            let err = with(len).unwrap_err();
            assert!(
                err.starts_with(&format!("{field} \"xxx"))
                    && err.contains(&format!("is {len} bytes")),
                "{field}: {}",
                crate::messages::quote(&err)
            );
            assert!(
                err.len() < 400,
                "{field}: the message echoes {} bytes",
                err.len()
            );
            // Just within the bound is fine.
            assert!(with(max).is_ok(), "{field} at {max}");
        }
        // In a webhook batch, the oversized item is reported; the others are kept.
        let mut bad = real.clone();
        bad["objectRef"]["name"] = Value::String("n".repeat(5 << 20));
        let body = format!(
            "{{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[{real},{bad},{real}]}}"
        );
        let batch = decode_event_list(body.as_bytes()).unwrap();
        assert_eq!(batch.events.len(), 2);
        assert_eq!(batch.errors.len(), 1);
        assert!(
            batch.errors[0].starts_with("items[1]: objectRef.name"),
            "{}",
            &batch.errors[0][..100]
        );
        assert!(batch.errors[0].len() < 400);
    }

    /// Found by the `event_list` fuzz target: an item (else well-formed,
    /// from a fixture) whose apiVersion is 80 KB was named with it whole;
    /// so was such an envelope.
    #[test]
    fn a_long_kind_or_api_version_is_quoted_cut() {
        let mut ev = fixture_events().remove(0);
        let long = format!("audit.k8s.io{}", "d".repeat(80 << 10));
        ev["apiVersion"] = Value::String(long.clone());
        let body = format!(
            "{{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[{ev}]}}"
        );
        let batch = decode_event_list(body.as_bytes()).unwrap();
        assert_eq!(batch.errors.len(), 1);
        assert!(
            batch.errors[0].len() < 400,
            "{} bytes",
            batch.errors[0].len()
        );
        ev["apiVersion"] = Value::String("audit.k8s.io/v1".into());
        ev["kind"] = Value::String(long.clone());
        let err = parse_event(&ev.to_string()).unwrap_err();
        assert!(
            err.len() <= crate::messages::MAX_MESSAGE_BYTES + 64,
            "{} bytes",
            err.len()
        );
        for body in [
            format!("{{\"kind\":\"{long}\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[]}}"),
            format!("{{\"kind\":\"EventList\",\"apiVersion\":\"{long}\",\"items\":[]}}"),
        ] {
            let err = decode_event_list(body.as_bytes()).err().unwrap();
            assert!(err.len() < 400, "{} bytes", err.len());
        }
    }

    #[test]
    fn decoder_messages_never_echo_a_whole_value() {
        let mut ev = fixture_events().remove(0);
        // serde quotes a string where a number belongs.
        ev["responseStatus"]["code"] = Value::String("7".repeat(1 << 20));
        let err = parse_event(&ev.to_string()).unwrap_err();
        assert!(err.contains("invalid type: string"), "{}", &err[..100]);
        assert!(
            err.len() <= crate::messages::MAX_MESSAGE_BYTES + 32,
            "{}",
            err.len()
        );
        let body = format!("{{\"items\": [{ev}], \"kind\": {}}}", "[".repeat(1 << 20));
        let err = decode_event_list(body.as_bytes()).err().unwrap();
        assert!(
            err.len() <= crate::messages::MAX_MESSAGE_BYTES + 32,
            "{}",
            err.len()
        );
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused_wherever_the_bad_bytes_are() {
        // Inside a value kascade decodes (the name), and inside one it only
        // keeps as text (the request object's data): sonic-rs checks UTF-8
        // only where it decodes a string.
        for (pointer, planted) in [
            ("/objectRef/name", "\"name-\u{fffd}\""),
            ("/requestObject", "{\"data\":{\"k\":\"v-\u{fffd}\"}}"),
        ] {
            let mut ev = fixture_events().remove(0);
            *ev.pointer_mut(pointer).unwrap() = serde_json::from_str(planted).unwrap();
            let body = serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [ev]})
                .to_string()
                // U+FFFD written as UTF-8, then broken: a lone continuation byte.
                .replace('\u{fffd}', "\u{1}")
                .into_bytes();
            let at = body.iter().position(|&b| b == 1).unwrap();
            let mut body = body;
            body[at] = 0xbf;
            assert!(std::str::from_utf8(&body).is_err());
            match decode_event_list(&body) {
                Err(e) => assert!(
                    e.contains("unicode") || e.contains("UTF-8"),
                    "{pointer}: {e}"
                ),
                Ok(batch) => panic!(
                    "{pointer}: decoded {} events, errors {:?}",
                    batch.events.len(),
                    batch.errors
                ),
            }
        }
    }

    #[test]
    fn syntax_errors_name_the_position_but_quote_no_value() {
        let mut ev = fixture_events().remove(0);
        ev["requestObject"] = serde_json::json!({"data": {"password": "s3cr3t"}});
        let text = ev.to_string().replace("\"s3cr3t\"", "\"s3cr3t\" x");
        let err = parse_event(&text).unwrap_err();
        assert!(err.contains("line 1 column"), "{err}");
        assert!(!err.contains("s3cr3t"), "{err}");
    }

    #[test]
    fn times_a_span_cannot_carry_are_malformed() {
        let mut ev = fixture_events().remove(0);
        ev["stageTimestamp"] = "9000-01-01T00:00:00.000000Z".into();
        let err = parse_event(&ev.to_string()).unwrap_err();
        assert!(
            err.starts_with("stageTimestamp 9000-01-01T00:00:00Z is after 2554-07-21"),
            "{err}"
        );
    }

    #[test]
    fn dry_runs_are_recognised_among_other_parameters() {
        // As kubectl sends them (e.g. `kubectl create --dry-run=server`).
        assert!(is_dry_run(
            "/api/v1/namespaces/ns/configmaps?dryRun=All&fieldManager=kubectl-create"
        ));
        assert!(is_dry_run(
            "/apis/apps/v1/namespaces/ns/deployments/x?fieldManager=m&dryRun=All"
        ));
        assert!(!is_dry_run(
            "/api/v1/namespaces/ns/configmaps?fieldManager=kubectl-create"
        ));
        assert!(!is_dry_run("/api/v1/namespaces/dryRun=All/configmaps"));
        assert!(!is_dry_run("/api/v1/namespaces/ns/configmaps?dryRun="));
    }
}
