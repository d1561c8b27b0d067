//! Audit events as they are shipped or exported, one line each: the
//! apiserver's own line, shippers' records, and the forms managed
//! Kubernetes services export their control plane's audit log in (EKS
//! through CloudWatch Logs, AKS diagnostic settings, GKE Cloud Audit Logs).
//! Every form becomes the audit event the apiserver logged, or as much of
//! it as the form keeps.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::audit::{DecodedBatch, decode_event_list, parse_event};
use crate::flow::AuditEvent;
use crate::json::depth;
use crate::messages::clip_message;

/// Decodes a webhook body in any of the forms audit events arrive in:
/// - an `audit.k8s.io/v1` `EventList`: what the apiserver's audit webhook
///   sends (one line, or pretty-printed);
/// - audit events one per line (newline-delimited JSON): what Fluent Bit's
///   `http` output (`format json_lines`) and Vector's `http` sink
///   (newline-delimited framing) send, or `curl --data-binary @audit.log`;
/// - a JSON array of audit events: Fluent Bit's `format json`.
///
/// A line or item may also be a shipper's record that holds the audit log
/// line as text, under `log` (Fluent Bit's `tail` without a parser) or
/// `message` (Vector's `file` source). Other fields shippers add (a `date`)
/// are ignored. A malformed line or item is reported by its number
/// (`line 3`, `items[2]`) and does not take the rest down.
pub(crate) fn decode_body(body: &[u8]) -> Result<DecodedBatch, String> {
    let start = body.trim_ascii_start();
    match start.first() {
        Some(b'[') => decode_array(body),
        Some(b'{') if first_line_is_whole(start) && has_second_value(start) => {
            Ok(decode_lines(body))
        }
        _ => decode_event_list(body).or_else(|list_error| {
            // One line that is an audit event (or a shipper's record of
            // one), not a list.
            match decode_lines(body) {
                DecodedBatch { events, errors } if errors.is_empty() && !events.is_empty() => {
                    Ok(DecodedBatch { events, errors })
                }
                _ => Err(list_error),
            }
        }),
    }
}

/// Whether the first line of `text` (which starts with `{`) holds a whole
/// JSON value: brackets outside strings close on it. A scan, no recursion:
/// any depth is fine.
fn first_line_is_whole(text: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return true;
                }
            }
            b'\n' => return false,
            _ => {}
        }
    }
    false
}

/// Whether a non-blank line follows the first.
fn has_second_value(text: &[u8]) -> bool {
    memchr::memchr(b'\n', text).is_some_and(|nl| !text[nl..].trim_ascii().is_empty())
}

/// Audit events one per line; blank lines skipped.
fn decode_lines(body: &[u8]) -> DecodedBatch {
    let mut events = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(parse_line);
        match parsed {
            Ok(ev) => events.push(ev),
            Err(e) => errors.push(format!("line {}: {e}", i + 1)),
        }
    }
    DecodedBatch { events, errors }
}

/// A JSON array of audit events (or shippers' records of them).
fn decode_array(body: &[u8]) -> Result<DecodedBatch, String> {
    let text = crate::json::utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    // Bounded before serde_json reads it: an item's objects sit at level 3.
    let capped = depth::cap(text, depth::MAX_OBJECT_DEPTH, 2);
    let items: Vec<Box<RawValue>> = serde_json::from_str(&capped.text)
        .map_err(|e| clip_message(format!("body is not a JSON array of audit events: {e}")))?;
    let mut events = Vec::with_capacity(items.len());
    let mut errors = Vec::new();
    for (i, raw) in items.iter().enumerate() {
        match parse_line(raw.get()) {
            Ok(ev) => events.push(ev),
            Err(e) => errors.push(format!("items[{i}]: {e}")),
        }
    }
    Ok(DecodedBatch { events, errors })
}

/// An audit event as a line of any form it is shipped or exported in:
/// - the event itself (the apiserver's log, a shipper's record with its own
///   fields added);
/// - a record holding the log line as text under `log` (Fluent Bit's
///   `tail` without a parser) or `message` (Vector's `file` source; Amazon
///   CloudWatch Logs' events, as EKS control-plane logs are read back);
/// - a line of a CloudWatch Logs export to S3: `<RFC 3339 time> <event>`;
/// - an Azure diagnostic-settings record (AKS, categories `kube-audit` and
///   `kube-audit-admin`): the event as text under `properties.log`;
/// - a Google Cloud Audit Logs entry of a GKE cluster (`protoPayload` of
///   service `k8s.io`), mapped by [`from_gke`].
///
/// The error is the event's own when none of these holds one.
pub(crate) fn parse_line(text: &str) -> Result<AuditEvent, String> {
    parse_event(text).or_else(|why| {
        let text = text.trim();
        if text.starts_with('{') {
            return unwrap_record(text).unwrap_or(Err(why));
        }
        // `2026-12-05T20:44:34.138Z {"kind":"Event",…}`
        match text.split_once(' ') {
            Some((time, rest))
                if time.as_bytes().first().is_some_and(u8::is_ascii_digit)
                    && humantime::parse_rfc3339_weak(time).is_ok()
                    && rest.trim_start().starts_with('{') =>
            {
                parse_event(rest.trim())
            }
            _ => Err(why),
        }
    })
}

/// The event a record holds, if it is a form that holds one.
fn unwrap_record(text: &str) -> Option<Result<AuditEvent, String>> {
    #[derive(Deserialize)]
    struct Properties {
        log: Option<String>,
    }
    #[derive(Deserialize)]
    struct Record {
        log: Option<String>,
        message: Option<String>,
        properties: Option<Properties>,
        #[serde(rename = "protoPayload")]
        proto_payload: Option<serde::de::IgnoredAny>,
    }
    // Objects sit at level 3 of a GKE entry (entry, payload, request):
    // bounded before serde_json, which stops at its own limit otherwise.
    let capped = depth::cap(text, depth::MAX_OBJECT_DEPTH, 2);
    let record: Record = serde_json::from_str(&capped.text).ok()?;
    // Only text that is a JSON object may be an event: a Kubernetes
    // Event's `message` is prose, and the record is then no shipper's.
    let held = |line: &str| {
        let line = line.trim();
        line.starts_with('{').then(|| parse_event(line))
    };
    match record {
        Record {
            log: Some(line), ..
        } if line.trim_start().starts_with('{') => held(&line),
        Record {
            message: Some(line),
            ..
        } if line.trim_start().starts_with('{') => held(&line),
        Record {
            properties: Some(Properties { log: Some(line) }),
            ..
        } => held(&line),
        Record {
            proto_payload: Some(_),
            ..
        } => {
            let entry: Value = serde_json::from_str(&capped.text).ok()?;
            Some(from_gke(&entry).and_then(|event| parse_event(&event.to_string())))
        }
        _ => None,
    }
}

/// The audit event a GKE Cloud Audit Logs entry records. What the entry
/// does not keep: the request's own received time (the entry has one
/// `timestamp`, used for both ends: a write takes no time), the request
/// URI's query, impersonation, and the exact HTTP code (derived from the
/// entry's gRPC status and the verb).
pub(crate) fn from_gke(entry: &Value) -> Result<Value, String> {
    let payload = &entry["protoPayload"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if payload["serviceName"].as_str() != Some("k8s.io") {
        return Err("a Cloud Audit Logs entry not of service k8s.io (a GKE cluster's)".into());
    }
    let method = text(&payload["methodName"]);
    let verb = method
        .rsplit('.')
        .next()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("methodName {method:?} names no verb"))?;
    let resource_name = text(&payload["resourceName"]);
    let target = Target::of(&resource_name)
        .ok_or_else(|| format!("resourceName {resource_name:?} names no Kubernetes object"))?;
    let time = entry["timestamp"]
        .as_str()
        .ok_or("a Cloud Audit Logs entry without timestamp")?;
    let grpc = payload["status"]["code"].as_i64().unwrap_or(0);
    let code = http_code(grpc, verb);
    let mut status = json!({"metadata": {}, "code": code});
    if let Some(message) = payload["status"]["message"]
        .as_str()
        .filter(|m| !m.is_empty())
    {
        status["message"] = json!(message);
        status["status"] = json!("Failure");
    }
    let object = |v: &Value| -> Value {
        let mut o = v.clone();
        if let Some(m) = o.as_object_mut() {
            m.remove("@type");
        }
        o
    };
    let mut event = json!({
        "kind": "Event",
        "apiVersion": crate::flow::AUDIT_API_VERSION,
        "level": if payload["response"].is_object() || payload["request"].is_object() { "RequestResponse" } else { "Metadata" },
        "auditID": entry["operation"]["id"].as_str().or(entry["insertId"].as_str()).unwrap_or_default(),
        "stage": "ResponseComplete",
        "requestURI": target.uri(),
        "verb": verb,
        "user": {"username": text(&payload["authenticationInfo"]["principalEmail"])},
        "sourceIPs": [text(&payload["requestMetadata"]["callerIp"])],
        "userAgent": text(&payload["requestMetadata"]["callerSuppliedUserAgent"]),
        "objectRef": target.object_ref(),
        "responseStatus": status,
        "requestReceivedTimestamp": time,
        "stageTimestamp": time,
    });
    if payload["request"].is_object() {
        event["requestObject"] = object(&payload["request"]);
    }
    if payload["response"].is_object() {
        event["responseObject"] = object(&payload["response"]);
    }
    Ok(event)
}

/// The HTTP code the apiserver answered, from the gRPC code Cloud Audit
/// Logs keep (google.rpc.Code) and the verb.
fn http_code(grpc: i64, verb: &str) -> u16 {
    match grpc {
        0 if verb == "create" => 201,
        0 => 200,
        3 => 422,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        9 => 400,
        14 => 503,
        16 => 401,
        _ => 500,
    }
}

/// An object as a GKE `resourceName` names it:
/// `core/v1/namespaces/NS/pods/NAME[/SUB]`, `apps/v1/namespaces/NS/deployments/NAME`,
/// `core/v1/nodes/NAME` (cluster-scoped), `core/v1/namespaces/NAME` (a namespace).
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
    subresource: &'a str,
}

impl<'a> Target<'a> {
    fn of(resource_name: &'a str) -> Option<Self> {
        let parts: Vec<&str> = resource_name.split('/').collect();
        let (group, version, rest) = match parts.as_slice() {
            [g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
            _ => return None,
        };
        let group = if group == "core" { "" } else { group };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
            _ => ("", rest),
        };
        let (resource, name, subresource) = match rest {
            [r] => (*r, "", ""),
            [r, n] => (*r, *n, ""),
            [r, n, s] => (*r, *n, *s),
            _ => return None,
        };
        Some(Target {
            group,
            version,
            namespace,
            resource,
            name,
            subresource,
        })
    }

    fn object_ref(&self) -> Value {
        let mut r = json!({"resource": self.resource, "apiVersion": self.version});
        if !self.group.is_empty() {
            r["apiGroup"] = json!(self.group);
        }
        for (key, value) in [
            ("namespace", self.namespace),
            ("name", self.name),
            ("subresource", self.subresource),
        ] {
            if !value.is_empty() {
                r[key] = json!(value);
            }
        }
        r
    }

    fn uri(&self) -> String {
        let mut uri = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if !self.namespace.is_empty() {
            uri += &format!("/namespaces/{}", self.namespace);
        }
        for part in [self.resource, self.name, self.subresource] {
            if !part.is_empty() {
                uri += "/";
                uri += part;
            }
        }
        uri
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form a body takes is told apart by its shape, not by a
    /// header: the apiserver's EventList (one line or pretty-printed), one
    /// event, events one per line (the first nested deeper than any
    /// decoder's limit: read without recursion), an array.
    #[test]
    fn each_body_form_is_recognised_whatever_its_depth() {
        let events: Vec<Value> = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let lines: Vec<String> = events.iter().map(Value::to_string).collect();
        let list = serde_json::json!({"kind": "EventList", "apiVersion": crate::flow::AUDIT_API_VERSION, "items": events});
        let n = events.len();
        let count = |body: &str| {
            let b = decode_body(body.as_bytes()).unwrap();
            assert!(b.errors.is_empty(), "{:?}", b.errors);
            b.events.len()
        };
        assert_eq!(count(&list.to_string()), n);
        assert_eq!(count(&serde_json::to_string_pretty(&list).unwrap()), n);
        assert_eq!(count(&lines[0]), 1);
        assert_eq!(count(&format!("{}\n", lines[0])), 1);
        assert_eq!(count(&format!("[{}]", lines.join(","))), n);
        let mut deep: Value = events[0].clone();
        deep["requestObject"] = serde_json::json!({"spec": {"copy": "x"}});
        let deep_line = deep.to_string().replace("\"x\"", &nested_text(10_000));
        let body = format!("{deep_line}\n{}\n", lines[1..].join("\n"));
        assert_eq!(count(&body), n);
    }

    /// `depth` nested arrays around a string, as text (a `Value` that deep
    /// would overflow serde_json's own writer).
    fn nested_text(depth: usize) -> String {
        format!("{}\"leaf\"{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// A GKE entry names its object by a path: namespaced, cluster-scoped,
    /// a namespace itself, a subresource; other services are not audit
    /// events of a cluster.
    #[test]
    fn gke_resource_names_become_object_refs_and_uris() {
        let cases = [
            (
                "core/v1/namespaces/shop/pods/web-1/binding",
                json!({"resource": "pods", "apiVersion": "v1", "namespace": "shop", "name": "web-1", "subresource": "binding"}),
                "/api/v1/namespaces/shop/pods/web-1/binding",
            ),
            (
                "apps/v1/namespaces/shop/deployments/web",
                json!({"resource": "deployments", "apiVersion": "v1", "apiGroup": "apps", "namespace": "shop", "name": "web"}),
                "/apis/apps/v1/namespaces/shop/deployments/web",
            ),
            (
                "core/v1/nodes/node-1",
                json!({"resource": "nodes", "apiVersion": "v1", "name": "node-1"}),
                "/api/v1/nodes/node-1",
            ),
            (
                "core/v1/namespaces/shop",
                json!({"resource": "namespaces", "apiVersion": "v1", "name": "shop"}),
                "/api/v1/namespaces/shop",
            ),
        ];
        for (name, object_ref, uri) in cases {
            let t = Target::of(name).unwrap();
            assert_eq!(t.object_ref(), object_ref, "{name}");
            assert_eq!(t.uri(), uri, "{name}");
        }
        assert!(Target::of("core").is_none());
        let other = json!({"protoPayload": {"serviceName": "compute.googleapis.com"}});
        assert!(from_gke(&other).unwrap_err().contains("k8s.io"));
    }

    /// A line that is no form of an audit event keeps the event parser's
    /// own complaint, whatever its depth.
    #[test]
    fn a_line_of_no_known_form_keeps_the_parsers_message() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(20_000), "]".repeat(20_000));
        let k8s_event = r#"{"kind":"Event","apiVersion":"v1","reason":"Scheduled","message":"Successfully assigned default/web-1 to node-0"}"#;
        assert!(
            parse_line(k8s_event)
                .unwrap_err()
                .contains("Kubernetes Event")
        );
        for line in [
            r#"{"kind":"Pod","apiVersion":"v1"}"#,
            "2026-12-05T20:44:34Z not json",
            deep.as_str(),
        ] {
            let e = parse_line(line).unwrap_err();
            assert!(e.contains("audit event"), "{line:.40}: {e}");
        }
    }
}
