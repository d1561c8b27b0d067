//! A watched object as kascade reads it: its JSON text kept as sent, the
//! few metadata fields the watcher needs, and the value processing reads.

use kube::api::{ApiResource, ObjectMeta};

use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value};
use crate::metrics::Metrics;
use crate::model::ObjectRef;

/// The watched object's identity, when it has a name.
pub(super) fn object_ref(cluster: &str, ar: &ApiResource, obj: &RawObject) -> Option<ObjectRef> {
    Some(ObjectRef::new(
        cluster,
        ar.group.clone(),
        ar.plural.clone(),
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone()?,
    ))
}

/// An object as the apiserver listed or watched it: its JSON text kept as
/// sent, and the few `metadata` fields the watcher reads. serde_json, which
/// kube-rs decodes every list and watch event with, refuses a value nested
/// deeper than 128 levels (and the apiserver accepts 10,000): decoded into
/// an object model, such an object failed its whole list page, which was
/// asked again with backoff for ever, or, in a watch event, was lost. Kept
/// as text, it is skipped by a loop (no recursion), and bounded as an audit
/// event's objects are ([`depth::cap`]) when it is read.
#[derive(Clone, Debug)]
pub(crate) struct RawObject {
    pub(super) metadata: ObjectMeta,
    pub(super) text: Box<serde_json::value::RawValue>,
}

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// `metadata`'s fields the watcher reads (`managedFields`, which
        /// nest as deep as the object, are skipped unread).
        #[derive(serde::Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: Meta,
        }
        let text = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let head: Head = serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?;
        let Meta {
            name,
            namespace,
            uid,
            resource_version,
        } = head.metadata;
        Ok(RawObject {
            metadata: ObjectMeta {
                name,
                namespace,
                uid,
                resource_version,
                ..ObjectMeta::default()
            },
            text,
        })
    }
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The object as processing reads it: without `metadata.managedFields`,
/// every value nested deeper than [`depth::MAX_OBJECT_DEPTH`] a marker (as
/// in an audit event's objects), with its type when a list left it out;
/// and how many markers it holds.
pub(super) fn to_value(ar: &ApiResource, obj: &RawObject) -> (Value, u32) {
    use crate::json::depth;
    let capped = depth::cap(obj.text.get(), depth::MAX_OBJECT_DEPTH, 0);
    let text = crate::flow::object_text(&capped.text);
    let markers = match (&text, capped.markers) {
        (_, 0) | (None, _) => 0,
        (Some(text), _) => depth::markers_in(text.get()),
    };
    let mut v = text.and_then(|t| t.parse().ok()).unwrap_or_default();
    // Items of a list carry no type; diffs and relations want it.
    let missing = |v: &Value, key| v.is_object() && v.get(key).is_none();
    let (api_version, kind) = (missing(&v, "apiVersion"), missing(&v, "kind"));
    if let Some(m) = v.as_object_mut().filter(|_| api_version || kind) {
        if api_version {
            m.insert(&"apiVersion", ar.api_version.as_str());
        }
        if kind {
            m.insert(&"kind", ar.kind.as_str());
        }
    }
    (v, markers)
}

/// Counts and says the values of a watched object left out as nested too
/// deep to read, as the audit path does for a write's objects.
pub(super) fn note_deep_values(
    object: &ObjectRef,
    resource_version: Option<&str>,
    values: u32,
    metrics: &Metrics,
) {
    if values == 0 {
        return;
    }
    metrics
        .deep_values
        .get_or_create(&Metrics::cluster(&object.cluster))
        .inc_by(u64::from(values));
    tracing::warn!(
        cluster = %object.cluster,
        object = %object,
        resource_version = resource_version.unwrap_or_default(),
        values,
        "values nested deeper than {} levels of a watched object are shown as a marker (\"{}…\")",
        crate::json::depth::MAX_OBJECT_DEPTH,
        crate::json::depth::MARKER_PREFIX,
    );
}
