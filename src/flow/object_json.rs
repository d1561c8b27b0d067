//! The objects an audit event carries (`requestObject`, `responseObject`),
//! as kascade reads them: kept as JSON text without `metadata.managedFields`
//! (often the larger half of an object, and never shown), and read in part
//! where only a part is needed.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use sonic_rs::LazyValue;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// An entry of an object's `metadata.ownerReferences`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

/// `#[serde(deserialize_with)]` for an audit event's object: its JSON text
/// without `metadata.managedFields`, cut out in the same pass that finds
/// where the object ends (the fields kept are copied as written, the object
/// written compact). `null` is no object; anything else but an object is
/// kept whole. Only under sonic-rs's `Deserializer`: the fields are taken as
/// its raw `LazyValue`s, which another deserializer refuses with an error.
pub(super) fn without_managed_fields<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<ObjectText>, D::Error> {
    let version = Cell::new(None);
    let uid = Cell::new(None);
    let managed_fields = Cell::new(false);
    let visitor = PieceVisitor {
        trim: Trim::Top,
        version: &version,
        uid: &uid,
        managed_fields: &managed_fields,
    };
    let mut fields_hashed = None;
    let text = match d.deserialize_any(visitor)? {
        Piece::Null => return Ok(None),
        Piece::Raw(raw) => raw.into_owned(),
        Piece::Fields(fields) => {
            let mut out = String::with_capacity(fields_len(&fields));
            write_fields(&mut out, &fields);
            fields_hashed = Some(Arc::new(FieldHashes::of(&fields)));
            out
        }
        Piece::Owned(text) => text,
    };
    Ok(Some(ObjectText {
        text: text.into_boxed_str(),
        resource_version: version.get(),
        uid: uid.take(),
        had_managed_fields: managed_fields.get(),
        fields: fields_hashed,
    }))
}

/// An object's JSON text from elsewhere than an audit event (a list or a
/// watch event) cut as [`without_managed_fields`] cuts an event's objects;
/// `None` when it is `null` or not JSON. Its nesting must be bounded first
/// (`json::depth::cap`): sonic-rs recurses.
pub(crate) fn object_text(text: &str) -> Option<ObjectText> {
    let mut de = sonic_rs::Deserializer::from_str(text);
    without_managed_fields(&mut de).ok().flatten()
}

/// Hashes of an object's top-level fields as written (xxh3-128 of each
/// field's JSON text, found by the xxh3-64 of its key), taken while the
/// object is decoded. Two versions of an object whose hashes of a field
/// are equal have that field equal: the diff skips it unwalked (comparing
/// a Pod's unchanged `spec` node by node cost ≈ 3 % of the collector).
/// `metadata`, cut and written again, has none (it always changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldHashes(Box<[(u64, u128)]>);

impl FieldHashes {
    fn of(fields: &[(Key<'_>, Piece<'_>)]) -> FieldHashes {
        let hashes: Box<[(u64, u128)]> = fields
            .iter()
            .filter_map(|(key, piece)| match piece {
                Piece::Raw(raw) => Some((xxh3_64(key.0.as_bytes()), xxh3_128(raw.as_bytes()))),
                _ => None,
            })
            .collect();
        // A key given twice (never by an apiserver): which of its values a
        // parse keeps is not ours to guess, so no field is vouched for.
        let twice = hashes
            .iter()
            .enumerate()
            .any(|(i, (k, _))| hashes[..i].iter().any(|(k2, _)| k2 == k));
        FieldHashes(if twice { Box::default() } else { hashes })
    }

    fn get(&self, key: u64) -> Option<u128> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, h)| *h)
    }

    /// Whether the field `key` is written the same in both objects.
    pub fn same_field(&self, other: &FieldHashes, key: &str) -> bool {
        let key = xxh3_64(key.as_bytes());
        self.get(key).is_some_and(|h| other.get(key) == Some(h))
    }
}

/// `#[serde(deserialize_with)]` for an object kept as written (managedFields
/// included): one copy of its raw text. `null` is no object.
pub(super) fn kept_raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ObjectText>, D::Error> {
    let raw = LazyValue::deserialize(d)?;
    let text = raw.as_raw_str();
    if text == "null" {
        return Ok(None);
    }
    Ok(Some(ObjectText {
        had_managed_fields: memchr::memmem::find(text.as_bytes(), b"\"managedFields\"").is_some(),
        text: text.into(),
        resource_version: None,
        uid: None,
        fields: None,
    }))
}

/// The JSON text of an object an audit event carries, as
/// [`without_managed_fields`] or [`kept_raw`] left it: well-formed (sonic-rs
/// validated it to find its end), so it is not checked again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectText {
    text: Box<str>,
    resource_version: Option<NonZeroU64>,
    uid: Option<Box<str>>,
    had_managed_fields: bool,
    fields: Option<Arc<FieldHashes>>,
}

impl ObjectText {
    pub fn get(&self) -> &str {
        &self.text
    }

    /// The object as processing reads it. Nothing is left to strip: the
    /// decode cut `metadata.managedFields` (looking for them again cost
    /// ≈ 1 % of the collector's instructions).
    /// Its nesting was bounded as the event was decoded
    /// (`source::audit::parse_event`), so it is not scanned again.
    pub fn parse(&self) -> sonic_rs::Result<crate::json::Value> {
        crate::json::parse_capped(&self.text)
    }

    /// `metadata.resourceVersion` as the number etcd gives it (its revision
    /// when the object was stored), read in the same pass; `None` when
    /// absent or not a number written as etcd writes one (another
    /// storage's opaque version): written out again, it is the text logged.
    pub fn resource_version(&self) -> Option<u64> {
        self.resource_version.map(NonZeroU64::get)
    }

    /// `metadata.uid`, read in the same pass; `None` when absent, not a
    /// string, or written with escapes (then a parse tells it). Processing
    /// would otherwise look it up in the parsed object on every write.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// Whether the logged object carried `metadata.managedFields` (cut
    /// out): an audit policy with `omitManagedFields: true` spares the
    /// apiserver logging them and kascade reading them.
    pub fn had_managed_fields(&self) -> bool {
        self.had_managed_fields
    }

    /// The hashes of the object's top-level fields as written (an object
    /// decoded by [`without_managed_fields`] only).
    pub fn field_hashes(&self) -> Option<&Arc<FieldHashes>> {
        self.fields.as_ref()
    }
}

/// A key, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// One value of the object being trimmed.
enum Piece<'de> {
    Null,
    /// As written in the input (owned only when sonic-rs found escapes in it).
    Raw(Cow<'de, str>),
    /// An object level whose fields are written out again.
    Fields(Vec<(Key<'de>, Piece<'de>)>),
    /// Not an object where one was expected: written out again whole.
    Owned(String),
}

/// Which level is read: the object, whose `metadata` is read as a level of
/// its own, or that `metadata`, whose `managedFields` are left out.
#[derive(Clone, Copy)]
enum Trim {
    Top,
    Metadata,
}

struct PieceVisitor<'v> {
    trim: Trim,
    /// Where `metadata.resourceVersion` goes when it is a number.
    version: &'v Cell<Option<NonZeroU64>>,
    /// Where `metadata.uid` goes when it is a string without escapes.
    uid: &'v Cell<Option<Box<str>>>,
    /// Set when `metadata.managedFields` is cut out.
    managed_fields: &'v Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for PieceVisitor<'_> {
    type Value = Piece<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Piece<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl PieceVisitor<'_> {
    fn owned<E: de::Error>(v: Value) -> Result<Piece<'static>, E> {
        serde_json::to_string(&v)
            .map(Piece::Owned)
            .map_err(E::custom)
    }
}

impl<'de> Visitor<'de> for PieceVisitor<'_> {
    type Value = Piece<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Piece<'de>, A::Error> {
        // Sized for the usual object (apiVersion, kind, metadata, spec,
        // status) and metadata (a dozen fields): growing from empty cost
        // five reallocations per object (callgrind).
        let mut fields = Vec::with_capacity(match self.trim {
            Trim::Top => 8,
            Trim::Metadata => 16,
        });
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match (self.trim, &*key.0) {
                (Trim::Metadata, "managedFields") => {
                    map.next_value::<IgnoredAny>()?;
                    self.managed_fields.set(true);
                }
                (Trim::Top, "metadata") => {
                    let piece = map.next_value_seed(PieceVisitor {
                        trim: Trim::Metadata,
                        version: self.version,
                        uid: self.uid,
                        managed_fields: self.managed_fields,
                    })?;
                    fields.push((key, piece));
                }
                (Trim::Metadata, "resourceVersion") => {
                    let raw = map.next_value::<LazyValue<'de>>()?.as_raw_cow();
                    let number = raw.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                    // As etcd writes a revision (no sign, no leading zero),
                    // so that the number written out is the text logged.
                    self.version.set(
                        number
                            .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                            .filter(|v| !v.starts_with('0'))
                            .and_then(|v| v.parse().ok())
                            .and_then(NonZeroU64::new),
                    );
                    fields.push((key, Piece::Raw(raw)));
                }
                (Trim::Metadata, "uid") => {
                    let raw = map.next_value::<LazyValue<'de>>()?.as_raw_cow();
                    self.uid.set(
                        raw.strip_prefix('"')
                            .and_then(|v| v.strip_suffix('"'))
                            .filter(|v| !v.contains('\\'))
                            .map(Box::from),
                    );
                    fields.push((key, Piece::Raw(raw)));
                }
                _ => fields.push((
                    key,
                    Piece::Raw(map.next_value::<LazyValue<'de>>()?.as_raw_cow()),
                )),
            }
        }
        Ok(Piece::Fields(fields))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Piece<'de>, E> {
        Ok(Piece::Null)
    }

    /// An array where an object was expected: its items kept as written
    /// (numbers too long for a float included).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Piece<'de>, A::Error> {
        let mut out = String::from("[");
        while let Some(item) = seq.next_element::<LazyValue<'de>>()? {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(item.as_raw_str());
        }
        out.push(']');
        Ok(Piece::Owned(out))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Piece<'de>, E> {
        Self::owned(v.into())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Piece<'de>, E> {
        Self::owned(v.into())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Piece<'de>, E> {
        Self::owned(v.into())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Piece<'de>, E> {
        Self::owned(v.into())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Piece<'de>, E> {
        Self::owned(v.into())
    }
}

fn quoted_key(key: &str) -> Cow<'_, str> {
    if crate::json::needs_no_escape(key) {
        Cow::Borrowed(key)
    } else {
        // Escapes may differ from the input's; the key they stand for does not.
        let q = serde_json::to_string(key).unwrap_or_default();
        Cow::Owned(q[1..q.len() - 1].to_string())
    }
}

fn piece_len(p: &Piece<'_>) -> usize {
    match p {
        Piece::Null => 4,
        Piece::Raw(raw) => raw.len(),
        Piece::Fields(fields) => fields_len(fields),
        Piece::Owned(text) => text.len(),
    }
}

/// The length [`write_fields`] writes (exact unless a key is escaped
/// differently from the input): an overestimate would cost a reallocation
/// when the text is boxed.
fn fields_len(fields: &[(Key<'_>, Piece<'_>)]) -> usize {
    let commas = fields.len().saturating_sub(1);
    2 + commas
        + fields
            .iter()
            .map(|(k, v)| k.0.len() + 3 + piece_len(v))
            .sum::<usize>()
}

fn write_fields(out: &mut String, fields: &[(Key<'_>, Piece<'_>)]) {
    out.push('{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(&quoted_key(&key.0));
        out.push_str("\":");
        match value {
            Piece::Null => out.push_str("null"),
            Piece::Raw(raw) => out.push_str(raw),
            Piece::Fields(inner) => write_fields(out, inner),
            Piece::Owned(text) => out.push_str(text),
        }
    }
    out.push('}');
}

/// An object's `metadata.ownerReferences`, read without going past them:
/// the parse stops once they are read or the metadata ends, so the object's
/// `managedFields`, spec and status are not scanned (an owner learns of a new
/// object as it arrives). Empty when there are none, or they do not parse.
pub(crate) fn owner_references_of(object_json: &str) -> Vec<OwnerReference> {
    metadata_field(object_json, "ownerReferences").unwrap_or_default()
}

/// One field of an object's `metadata`, read without going past it.
/// `None` when absent or it does not parse as `T`.
fn metadata_field<'a, T: Deserialize<'a>>(object_json: &'a str, field: &str) -> Option<T> {
    /// Ends the parse early: the error carries no news.
    const DONE: &str = "read what was wanted";
    struct Top<'s, T>(&'s mut Option<T>, &'s str);
    struct Meta<'s, T>(&'s mut Option<T>, &'s str);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Top<'_, T> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key<'de>>()? {
                if key.0 == "metadata" {
                    return map.next_value_seed(Meta(self.0, self.1));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Meta<'_, T> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Meta<'_, T> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("object metadata")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key<'de>>()? {
                if key.0 == self.1 {
                    *self.0 = Some(map.next_value()?);
                    break;
                }
                map.next_value::<IgnoredAny>()?;
            }
            Err(de::Error::custom(DONE))
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Err(de::Error::custom(DONE))
        }
    }
    let mut value = None;
    let mut de = serde_json::Deserializer::from_str(object_json);
    // Err(DONE) is the normal end; any other error before the field is read
    // leaves `value` empty.
    let _ = de.deserialize_map(Top(&mut value, field));
    value
}

/// The request and response objects of the audit logs the real control
/// plane wrote for `scenarios` (e2e/fixtures), in log order.
#[cfg(test)]
pub(crate) fn fixture_objects(scenarios: &[&str]) -> Vec<Value> {
    let mut objects = Vec::new();
    for scenario in scenarios {
        let log = std::fs::read_to_string(format!(
            "{}/e2e/fixtures/{scenario}/audit.log",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        for line in log.lines() {
            let mut ev: Value = serde_json::from_str(line).unwrap();
            for field in ["requestObject", "responseObject"] {
                if let Some(obj) = ev.get_mut(field) {
                    objects.push(obj.take());
                }
            }
        }
    }
    objects
}

#[cfg(test)]
mod tests;
