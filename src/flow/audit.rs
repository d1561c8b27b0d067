//! The kube-apiserver audit event (`audit.k8s.io/v1`), as the log and webhook
//! backends write it: the fields kascade shows, the bounds every event must
//! keep, and the object it wrote (or tried to create).

use std::time::SystemTime;

use serde::Deserialize;

use super::object_json::{ObjectText, OwnerReference};
use crate::model::ObjectRef;

pub(crate) const AUDIT_API_VERSION: &str = "audit.k8s.io/v1";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub api_version: String,
    // The user's groups are not shown: left undecoded (serde skips unknown
    // fields without allocating).
    /// The annotations kascade reads: webhooks that failed open, where a
    /// slow request's time went (`annotations.rs`).
    #[serde(default, deserialize_with = "super::annotations::kept")]
    pub annotations: super::annotations::RequestAnnotations,
    /// The audit policy's level for this request (`kascade doctor` reports
    /// the levels writes arrive at).
    #[serde(default)]
    pub level: AuditLevel,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: String,
    #[serde(default, rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    #[serde(default)]
    pub user: UserInfo,
    #[serde(default)]
    pub impersonated_user: Option<UserInfo>,
    #[serde(default, rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    #[serde(default)]
    pub user_agent: String,
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    // As written, `metadata.managedFields` included: read only for a
    // binding, a refused create and an Event (see `object_json`).
    #[serde(default, deserialize_with = "super::object_json::kept_raw")]
    pub request_object: Option<ObjectText>,
    #[serde(
        default,
        deserialize_with = "super::object_json::without_managed_fields"
    )]
    pub response_object: Option<ObjectText>,
    #[serde(with = "rfc3339")]
    pub request_received_timestamp: SystemTime,
    #[serde(with = "rfc3339")]
    pub stage_timestamp: SystemTime,
    /// Values of its objects nested deeper than kascade reads, each left as
    /// a marker when the event was decoded (`json::depth`).
    #[serde(skip)]
    pub deep_values: u32,
    /// Made by the admission source from an admitted write and the version
    /// the list-watch showed it stored (`source::admission`), not logged
    /// by the apiserver.
    #[serde(skip)]
    pub recorded_by_admission: bool,
}

/// The audit policy's level of an event; a level this version does not
/// know is `Other`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum AuditLevel {
    None,
    Metadata,
    Request,
    RequestResponse,
    #[default]
    #[serde(other)]
    Other,
}

impl AuditLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditLevel::None => "None",
            AuditLevel::Metadata => "Metadata",
            AuditLevel::Request => "Request",
            AuditLevel::RequestResponse => "RequestResponse",
            AuditLevel::Other => "other",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub resource_version: String,
    #[serde(default)]
    pub subresource: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: i32,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub details: Option<StatusDetails>,
}

/// The object a `Status` is about; a refused create with `generateName`
/// names there the name the apiserver had generated.
#[derive(Debug, Default, Deserialize)]
pub struct StatusDetails {
    #[serde(default)]
    pub name: String,
}

/// The name given to the object of a create refused before anything named
/// it (its body unread or not logged): `widgets crd-demo/(unnamed)`.
pub(crate) const UNNAMED_OBJECT: &str = "(unnamed)";

/// A create refused before its object had a name (it asked for
/// `generateName`, e.g. a ReplicaSet's Pod denied by a quota; or its body
/// was never read): what it tried, and on whose behalf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailedCreate {
    /// Empty when the request's body is not in the event.
    pub generate_name: String,
    /// The name the apiserver generated for it (the refusal's
    /// `details.name`), empty when not said.
    pub attempted_name: String,
    /// The requested object's controlling owner reference, else its first.
    pub owner: Option<OwnerReference>,
}

/// What [`AuditEvent::failed_create`] reads of the request object.
#[derive(Default, Deserialize)]
struct RequestHead {
    #[serde(default)]
    metadata: RequestMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestMeta {
    #[serde(default)]
    generate_name: String,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
}

mod rfc3339 {
    use serde::{Deserialize, Deserializer};
    use std::time::SystemTime;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = <&str>::deserialize(d)?;
        humantime::parse_rfc3339_weak(s)
            .map_err(|e| serde::de::Error::custom(format!("bad timestamp {s:?}: {e}")))
    }
}

/// Just enough of the response object to identify objects created with
/// `generateName` and to tell a full object from a `Status` or `Scale`.
#[derive(Debug, Default, Deserialize)]
pub struct ObjectHead {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: HeadMeta,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
}

impl AuditEvent {
    /// What identifies one logging of a request's stage: an event logged
    /// twice (a file given twice, overlapping rotated logs, an
    /// `audit.log*` glob) has the same key. The xxh3 of audit ID and stage.
    pub fn once_key(&self) -> u64 {
        let seed = xxhash_rust::xxh3::xxh3_64(self.stage.as_bytes());
        xxhash_rust::xxh3::xxh3_64_with_seed(self.audit_id.as_bytes(), seed)
    }

    /// Checks the fields every event must carry, naming what is wrong.
    /// Counts the depth markers its objects carry ([`AuditEvent::deep_values`]),
    /// once its text was found nested too deep and capped.
    pub fn count_deep_values(&mut self) {
        self.deep_values = [&self.request_object, &self.response_object]
            .into_iter()
            .flatten()
            .map(|o| crate::json::depth::markers_in(o.get()))
            .fold(0, u32::saturating_add);
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.api_version.is_empty() && self.api_version != AUDIT_API_VERSION {
            return Err(format!(
                "apiVersion {} is not {AUDIT_API_VERSION}",
                crate::messages::quote(&self.api_version)
            ));
        }
        if !self.kind.is_empty() && self.kind != "Event" {
            return Err(format!(
                "kind {} is not Event",
                crate::messages::quote(&self.kind)
            ));
        }
        if self.audit_id.is_empty() {
            return Err("auditID is empty".into());
        }
        self.check_sizes()
    }

    /// Fields beyond what the apiserver can send (Kubernetes names are DNS
    /// subdomains of at most 253 characters, namespaces labels of 63) are
    /// forged or corrupt: the event is refused rather than shown.
    fn check_sizes(&self) -> Result<(), String> {
        use crate::bounds::{MAX_NAME_BYTES, MAX_NAMESPACE_BYTES, MAX_TEXT_BYTES, check_len};
        /// Proxies in front of the apiserver add source IPs; no real chain is this long.
        const MAX_SOURCE_IPS: usize = 64;
        /// Go's default limit on request headers, the request line included.
        const MAX_URI_BYTES: usize = 1 << 20;
        // OTLP counts nanoseconds since the epoch in 64 bits: a time after
        // 2554 cannot be exported (nor happened yet).
        let latest = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(u64::MAX);
        for (field, t) in [
            ("requestReceivedTimestamp", self.request_received_timestamp),
            ("stageTimestamp", self.stage_timestamp),
        ] {
            if t > latest {
                return Err(format!(
                    "{field} {} is after {}, the latest time a span can carry",
                    humantime::format_rfc3339(t),
                    humantime::format_rfc3339(latest)
                ));
            }
        }
        check_len("auditID", &self.audit_id, MAX_NAME_BYTES)?;
        check_len("stage", &self.stage, MAX_NAME_BYTES)?;
        check_len("verb", &self.verb, MAX_NAME_BYTES)?;
        check_len("requestURI", &self.request_uri, MAX_URI_BYTES)?;
        check_len("user.username", &self.user.username, MAX_TEXT_BYTES)?;
        if let Some(u) = &self.impersonated_user {
            check_len("impersonatedUser.username", &u.username, MAX_TEXT_BYTES)?;
        }
        check_len("userAgent", &self.user_agent, MAX_TEXT_BYTES)?;
        if self.source_ips.len() > MAX_SOURCE_IPS {
            return Err(format!(
                "sourceIPs has {} entries, more than the {MAX_SOURCE_IPS} allowed",
                self.source_ips.len()
            ));
        }
        for ip in &self.source_ips {
            // The longest IPv6 text form is 45 characters.
            check_len("sourceIPs[]", ip, 64)?;
        }
        if let Some(r) = &self.object_ref {
            check_len("objectRef.name", &r.name, MAX_NAME_BYTES)?;
            check_len("objectRef.namespace", &r.namespace, MAX_NAMESPACE_BYTES)?;
            check_len("objectRef.resource", &r.resource, MAX_NAME_BYTES)?;
            check_len("objectRef.subresource", &r.subresource, MAX_NAME_BYTES)?;
            check_len("objectRef.apiGroup", &r.api_group, MAX_NAME_BYTES)?;
            check_len("objectRef.apiVersion", &r.api_version, MAX_NAME_BYTES)?;
            check_len("objectRef.uid", &r.uid, MAX_NAME_BYTES)?;
            check_len(
                "objectRef.resourceVersion",
                &r.resource_version,
                MAX_NAME_BYTES,
            )?;
        }
        Ok(())
    }

    pub fn response_head(&self) -> Option<ObjectHead> {
        // sonic-rs skips the fields not read (spec, status) several times
        // faster than serde_json scans them.
        self.response_object
            .as_ref()
            .and_then(|r| sonic_rs::from_str(r.get()).ok())
    }

    /// The object this event wrote, with the name taken from the response
    /// when the request used `generateName` (the response is only parsed then).
    /// `Ok(None)` when the event names no object; an error when the name
    /// taken from the response is beyond Kubernetes' bounds.
    pub fn object(&self, cluster: &str) -> Result<Option<(ObjectRef, String)>, String> {
        use crate::bounds::{MAX_NAME_BYTES, check_len};
        let Some(r) = self.object_ref.as_ref() else {
            return Ok(None);
        };
        if r.resource.is_empty() {
            return Ok(None);
        }
        let mut name = r.name.clone();
        let mut uid = r.uid.clone();
        if name.is_empty()
            && let Some(h) = self.response_head().filter(|h| h.kind != "Status")
        {
            check_len(
                "responseObject.metadata.name",
                &h.metadata.name,
                MAX_NAME_BYTES,
            )?;
            check_len(
                "responseObject.metadata.uid",
                &h.metadata.uid,
                MAX_NAME_BYTES,
            )?;
            name = h.metadata.name;
            if uid.is_empty() {
                uid = h.metadata.uid;
            }
        }
        if name.is_empty() {
            // deletecollection, or a create that failed before naming.
            return Ok(None);
        }
        // A namespace is cluster-scoped, but the apiserver names it as its
        // own namespace in requests to its URL (update, delete, status):
        // one object, whichever request wrote it.
        let namespace = if r.api_group.is_empty() && r.resource == "namespaces" {
            ""
        } else {
            r.namespace.as_str()
        };
        Ok(Some((
            ObjectRef::new(cluster, &r.api_group, &r.resource, namespace, name),
            uid,
        )))
    }

    /// A create refused before naming its object (no name in `objectRef`:
    /// `generateName` in the request object, or no request object at all),
    /// for an event that names no object otherwise. `Ok(None)` when it is
    /// not one; an error when a field read from the request is beyond
    /// Kubernetes' bounds.
    pub fn failed_create(&self) -> Result<Option<FailedCreate>, String> {
        use crate::bounds::{MAX_NAME_BYTES, check_len};
        let unnamed = self
            .object_ref
            .as_ref()
            .is_some_and(|r| r.name.is_empty() && r.subresource.is_empty());
        if self.verb != "create" || self.code() < 400 || !unnamed {
            return Ok(None);
        }
        let head = self
            .request_object
            .as_ref()
            .and_then(|r| sonic_rs::from_str::<RequestHead>(r.get()).ok());
        let Some(meta) = head
            .map(|h| h.metadata)
            .filter(|m| !m.generate_name.is_empty())
        else {
            // Refused before its body was read (a resource the apiserver
            // does not serve: a custom resource whose CRD is missing), or
            // its body not logged: still a write that failed, of an object
            // the event cannot name.
            return Ok(Some(FailedCreate {
                generate_name: String::new(),
                attempted_name: String::new(),
                owner: None,
            }));
        };
        check_len(
            "requestObject.metadata.generateName",
            &meta.generate_name,
            MAX_NAME_BYTES,
        )?;
        let attempted_name = self
            .response_status
            .as_ref()
            .and_then(|s| s.details.as_ref())
            .map(|d| d.name.clone())
            .unwrap_or_default();
        check_len(
            "responseStatus.details.name",
            &attempted_name,
            MAX_NAME_BYTES,
        )?;
        let mut owners: Vec<OwnerReference> = meta
            .owner_references
            .into_iter()
            .filter(|o| !o.kind.is_empty() && !o.name.is_empty())
            .collect();
        for o in &owners {
            for (field, v) in [
                ("apiVersion", &o.api_version),
                ("kind", &o.kind),
                ("name", &o.name),
                ("uid", &o.uid),
            ] {
                check_len(
                    &format!("requestObject.metadata.ownerReferences[].{field}"),
                    v,
                    MAX_NAME_BYTES,
                )?;
            }
        }
        let owner = match owners.iter().position(|o| o.controller == Some(true)) {
            Some(i) => Some(owners.swap_remove(i)),
            None => owners.into_iter().next(),
        };
        Ok(Some(FailedCreate {
            generate_name: meta.generate_name,
            attempted_name,
            owner,
        }))
    }

    pub fn subresource(&self) -> &str {
        self.object_ref
            .as_ref()
            .map(|r| r.subresource.as_str())
            .unwrap_or("")
    }

    pub fn code(&self) -> i32 {
        self.response_status.as_ref().map(|s| s.code).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A create of an object named by `generateName` (the Pods of a
    /// ReplicaSet), as the real control plane audited it (e2e/fixtures).
    fn generated_create() -> Value {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["name"].as_str().unwrap_or("").is_empty()
                && e["responseObject"]["metadata"]["generateName"].is_string()
        })
        .expect("the fixture has generateName creates")
    }

    fn parse(ev: &Value) -> AuditEvent {
        let ev: AuditEvent = sonic_rs::from_str(&ev.to_string()).unwrap();
        ev.validate().unwrap();
        ev
    }

    #[test]
    fn a_generated_name_beyond_bounds_is_an_error_not_an_object() {
        let real = generated_create();
        let (object, _) = parse(&real)
            .object("c")
            .unwrap()
            .expect("named by the response");
        assert_eq!(object.name, real["responseObject"]["metadata"]["name"]);
        let mut forged = real.clone();
        forged["responseObject"]["metadata"]["name"] = Value::String("p".repeat(5 << 20));
        let err = parse(&forged).object("c").unwrap_err();
        assert!(
            err.starts_with("responseObject.metadata.name"),
            "{}",
            &err[..80]
        );
        assert!(err.contains("5242880 bytes") && err.len() < 400);
    }
}
