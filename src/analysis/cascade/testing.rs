//! Change records for unit tests of the pure cascade logic (records from
//! the real processor are tested in `tests/cascade/`).

use std::time::{Duration, SystemTime};

use crate::flow::{CascadeRole, Cause, ChangeRecord, ChangeSource, Readiness, SpanRef};
use crate::model::ObjectRef;

pub(crate) fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000) + Duration::from_millis(ms)
}

pub(crate) fn span(n: u8) -> SpanRef {
    SpanRef {
        trace_id: [n; 16],
        span_id: [n; 8],
    }
}

pub(crate) fn obj(resource: &str, name: &str) -> ObjectRef {
    let group = if resource == "deployments" || resource == "replicasets" {
        "apps"
    } else {
        ""
    };
    ObjectRef {
        cluster: "c".into(),
        group: group.into(),
        resource: resource.into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// A successful write `n` of `object` from `received` to `completed` (ms),
/// readiness `status` (None: none), a root until `caused_by`.
pub(crate) fn change(
    n: u8,
    object: ObjectRef,
    verb: &str,
    received: u64,
    completed: u64,
    status: Option<(&str, &str)>,
) -> ChangeRecord {
    ChangeRecord {
        annotations: Default::default(),
        object,
        uid: String::new(),
        source: ChangeSource::Audit,
        user: "u".into(),
        verb: verb.into(),
        subresource: String::new(),
        code: 200,
        received: at(received),
        completed: at(completed),
        span: span(n),
        cause_logged_after: false,
        version: None,
        readiness: status.map(|(s, m)| Readiness {
            status: s.into(),
            message: m.into(),
        }),
        deleted: false,
        role: CascadeRole::Root,
        cause: None,
        root: span(n),
        timer: None,
        depth: 0,
        cpid: None,
        failure: None,
        audit_id: String::new(),
        old: None,
        new: None,
        related: Vec::new(),
    }
}

/// Makes `effect` an effect of `cause` along `edge`.
pub(crate) fn caused_by(
    mut effect: ChangeRecord,
    cause: &ChangeRecord,
    edge: &str,
) -> ChangeRecord {
    effect.role = CascadeRole::Effect;
    effect.root = cause.root;
    effect.depth = cause.depth + 1;
    effect.cause = Some(Cause {
        span: cause.span,
        object: cause.object.clone(),
        name: super::change_name(cause),
        edge: edge.into(),
        rule: "test".into(),
        hop: effect
            .received
            .duration_since(cause.completed)
            .unwrap_or_default(),
    });
    effect
}

/// A rollout in miniature: patch → RS create → Pod create → binding →
/// kubelet Running; the Deployment's status write settles it last.
pub(crate) fn rollout() -> Vec<ChangeRecord> {
    let patch = change(
        1,
        obj("deployments", "d"),
        "patch",
        0,
        5,
        Some(("InProgress", "0/1 updated")),
    );
    let rs = caused_by(
        change(
            2,
            obj("replicasets", "d-1"),
            "create",
            10,
            12,
            Some(("InProgress", "0/1 ready")),
        ),
        &patch,
        "deployments → replicasets create",
    );
    let pod = caused_by(
        change(
            3,
            obj("pods", "d-1-a"),
            "create",
            20,
            22,
            Some(("InProgress", "Pending")),
        ),
        &rs,
        "replicasets → pods create",
    );
    let mut bind = caused_by(
        change(
            4,
            obj("pods", "d-1-a"),
            "create",
            30,
            31,
            Some(("InProgress", "Pending")),
        ),
        &pod,
        "pods binding",
    );
    bind.subresource = "binding".into();
    let running = caused_by(
        change(
            5,
            obj("pods", "d-1-a"),
            "patch",
            100,
            102,
            Some(("Current", "Running, ready")),
        ),
        &bind,
        "pods → Running",
    );
    let rs_status = caused_by(
        change(
            6,
            obj("replicasets", "d-1"),
            "update",
            110,
            111,
            Some(("Current", "")),
        ),
        &running,
        "pods → replicasets status",
    );
    let d_status = caused_by(
        change(
            7,
            obj("deployments", "d"),
            "update",
            120,
            125,
            Some(("Current", "")),
        ),
        &rs_status,
        "replicasets → deployments status",
    );
    // Given out of order: build sorts by time.
    vec![d_status, running, patch, rs, pod, bind, rs_status]
}
