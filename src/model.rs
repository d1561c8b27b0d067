//! The identity of a Kubernetes object and of its per-window span.
//!
//! Span and trace IDs are derived from these identities with a stable hash, so
//! every kascade replica (and every replay of the same audit log) computes the
//! same IDs for the same object window: links can point at a span before it is
//! exported, and the frontend can find an object's span from its name alone.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, TraceId};
use xxhash_rust::xxh3::{xxh3_64_with_seed, xxh3_128_with_seed};

/// A hash map for kascade's own lookups on the hot path (object keys, span
/// and object hashes, resource names): foldhash, seeded per process, instead
/// of std's SipHash, which cost ≈ 2 % of the instructions per event.
pub(crate) type FastHashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The set counterpart of [`FastHashMap`].
pub(crate) type FastHashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// A stable hash of a short key written in parts: the parts are gathered
/// and hashed in one go, which gives what xxh3's streaming hasher gives for
/// the same bytes at a fraction of its cost on keys of a few hundred bytes
/// (span ids are derived from such keys several times per write). Up to
/// [`KEY_BYTES_INLINE`] bytes are gathered in place: a buffer allocated
/// and freed per key (≈ 25 keys per write) cost as much as hashing them.
pub struct KeyHasher {
    seed: u64,
    len: usize,
    inline: [u8; KEY_BYTES_INLINE],
    /// The bytes once they outgrow `inline` (names near Kubernetes' bounds).
    spilled: Vec<u8>,
}

/// Key bytes a [`KeyHasher`] gathers without allocating.
pub(crate) const KEY_BYTES_INLINE: usize = 128;

impl KeyHasher {
    pub fn new() -> Self {
        Self::with_seed(0)
    }

    #[inline]
    pub fn with_seed(seed: u64) -> Self {
        Self {
            seed,
            len: 0,
            inline: [0; KEY_BYTES_INLINE],
            spilled: Vec::new(),
        }
    }

    #[inline]
    pub fn update(&mut self, part: &[u8]) {
        let end = self.len + part.len();
        match self.inline.get_mut(self.len..end) {
            Some(room) if self.spilled.is_empty() => {
                room.copy_from_slice(part);
                self.len = end;
            }
            _ => self.spill(part),
        }
    }

    #[cold]
    fn spill(&mut self, part: &[u8]) {
        if self.spilled.is_empty() {
            self.spilled.reserve(2 * KEY_BYTES_INLINE + part.len());
            self.spilled.extend_from_slice(&self.inline[..self.len]);
        }
        self.spilled.extend_from_slice(part);
    }

    fn bytes(&self) -> &[u8] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }

    /// xxh3-64 of the parts.
    pub fn digest(&self) -> u64 {
        xxh3_64_with_seed(self.bytes(), self.seed)
    }

    /// xxh3-128 of the parts.
    pub fn digest128(&self) -> u128 {
        xxh3_128_with_seed(self.bytes(), self.seed)
    }
}

impl Default for KeyHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// A Kubernetes object as kascade identifies it: not by uid, so that an
/// object's span can be found by name, and a deleted-then-recreated object
/// continues the same history.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub cluster: String,
    /// API group; empty for the core group.
    pub group: String,
    /// Plural lower-case resource, e.g. `deployments`.
    pub resource: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(
        cluster: impl Into<String>,
        group: impl Into<String>,
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Canonical key used for hashing and cache lookups.
    pub fn key(&self) -> String {
        // Joined, not formatted: several per write.
        [
            self.cluster.as_str(),
            &self.group,
            &self.resource,
            &self.namespace,
            &self.name,
        ]
        .join("/")
    }

    /// Feeds the bytes of [`Self::key`] to `h`, without building the string
    /// (ids are derived for every span; formatting keys was a tenth of that).
    pub fn hash_key(&self, h: &mut KeyHasher) {
        h.update(self.cluster.as_bytes());
        for part in [&self.group, &self.resource, &self.namespace, &self.name] {
            h.update(b"/");
            h.update(part.as_bytes());
        }
    }

    /// Stable 64-bit hash of the key: the first half of every raw trace id of
    /// this object.
    pub fn hash(&self) -> u64 {
        let mut h = KeyHasher::with_seed(0);
        self.hash_key(&mut h);
        h.digest()
    }

    /// `group/resource`, or `resource` for the core group.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            [self.resource.as_str(), &self.group].join("/")
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} ", self.cluster, self.group_resource())?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        write!(f, "{}", self.name)
    }
}

/// Fixed, epoch-aligned time windows: every object gets one span per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windowing {
    pub width: Duration,
}

impl Windowing {
    pub fn new(width: Duration) -> Self {
        assert!(!width.is_zero(), "window width must be positive");
        Self { width }
    }

    /// Start of the window containing `t`, as seconds since the epoch.
    pub fn window_start(&self, t: SystemTime) -> u64 {
        let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let w = self.width.as_secs().max(1);
        secs - secs % w
    }

    pub fn bounds(&self, window_start: u64) -> (SystemTime, SystemTime) {
        let start = UNIX_EPOCH + Duration::from_secs(window_start);
        (start, start + self.width)
    }
}

/// An object within one time window: the unit that becomes an object span.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectWindow {
    pub object: ObjectRef,
    /// Window start, seconds since the epoch.
    pub window_start: u64,
}

impl ObjectWindow {
    pub fn cache_key(&self) -> String {
        format!("{}@{}", self.object.key(), self.window_start)
    }

    /// 128-bit digest of the object window, the key of in-memory caches: a
    /// fixed 16 bytes instead of a string per cached object window, hashed
    /// from the parts without formatting [`Self::cache_key`] on every lookup.
    pub fn cache_digest(&self) -> u128 {
        let o = &self.object;
        let mut h = KeyHasher::new();
        for part in [&o.cluster, &o.group, &o.resource, &o.namespace, &o.name] {
            h.update(part.as_bytes());
            h.update(b"/");
        }
        h.update(&self.window_start.to_be_bytes());
        h.digest128()
    }

    /// `xxh3-64(object key) ‖ window start (u64, big endian)`: the frontend
    /// can compute the raw trace of any object window from the object's hash
    /// alone, which is what lets its assembled trace ids be decoded by any
    /// replica (see frontend/trace_id.rs).
    pub fn trace_id(&self) -> TraceId {
        raw_trace_id(self.object.hash(), self.window_start)
    }

    /// Feeds the bytes of [`Self::cache_key`] to `h`.
    pub fn hash_cache_key(&self, h: &mut KeyHasher) {
        hash_window_key(&self.object, self.window_start, h);
    }

    pub fn span_id(&self) -> SpanId {
        derived_span_id_of(0, |h| self.hash_cache_key(h))
    }
}

/// [`ObjectWindow::hash_cache_key`] of `object` and `window_start`, without
/// an `ObjectWindow` (no copy of the object).
pub(crate) fn hash_window_key(object: &ObjectRef, window_start: u64, h: &mut KeyHasher) {
    {
        object.hash_key(h);
        h.update(b"@");
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = window_start;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        h.update(&digits[at..]);
    }
}

/// The raw trace id of the window starting at `window_start` of the object
/// whose [`ObjectRef::hash`] is `object_hash`.
pub(crate) fn raw_trace_id(object_hash: u64, window_start: u64) -> TraceId {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&object_hash.to_be_bytes());
    id[8..].copy_from_slice(&window_start.to_be_bytes());
    // An all-zero trace id is invalid in OTLP.
    if id == [0; 16] {
        id[15] = 1;
    }
    TraceId::from_bytes(id)
}

/// A non-zero span id derived from `data`; `salt` separates span kinds that
/// share the same input (e.g. the object span and a link span).
pub(crate) fn derived_span_id(data: &[u8], salt: u64) -> SpanId {
    derived_span_id_of(salt, |h| h.update(data))
}

/// [`derived_span_id`] of the bytes `feed` writes, without collecting them.
pub(crate) fn derived_span_id_of(salt: u64, feed: impl FnOnce(&mut KeyHasher)) -> SpanId {
    let mut h = KeyHasher::with_seed(salt);
    feed(&mut h);
    let mut v = h.digest();
    if v == 0 {
        v = 1;
    }
    SpanId::from_bytes(v.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_parts_hash_as_the_streaming_hasher_does() {
        use xxhash_rust::xxh3::Xxh3;
        // Lengths around xxh3's internal boundaries (16, 128, 240 bytes, a
        // 64-byte stripe, a 1 KiB block), in uneven parts.
        let text: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [
            0, 1, 3, 16, 17, 64, 127, 128, 129, 240, 241, 1023, 1024, 1025, 2500,
        ] {
            for seed in [0, 1, 0x5eed_u64 << 40] {
                let (mut gathered, mut streamed) =
                    (KeyHasher::with_seed(seed), Xxh3::with_seed(seed));
                for part in text[..len].chunks(37) {
                    gathered.update(part);
                    streamed.update(part);
                }
                assert_eq!(gathered.digest(), streamed.digest(), "{len} {seed}");
                assert_eq!(gathered.digest128(), streamed.digest128(), "{len} {seed}");
            }
        }
    }

    #[test]
    fn windows_are_epoch_aligned() {
        let w = Windowing::new(Duration::from_secs(1800));
        let t = UNIX_EPOCH + Duration::from_secs(1800 * 10 + 17);
        assert_eq!(w.window_start(t), 18000);
        assert_eq!(
            w.window_start(UNIX_EPOCH + Duration::from_secs(18000)),
            18000
        );
        let (s, e) = w.bounds(18000);
        assert_eq!(e.duration_since(s).unwrap(), Duration::from_secs(1800));
    }

    #[test]
    fn ids_are_hashes_of_the_documented_keys() {
        // Ids are a contract between replicas and releases: the streamed
        // hashes must equal the hashes of the key strings.
        use xxhash_rust::xxh3::xxh3_64_with_seed;
        for (o, ws) in [
            (
                ObjectRef::new("c", "apps", "deployments", "default", "hello"),
                1_800_000_000,
            ),
            (ObjectRef::new("prod-eu", "", "nodes", "", "node-1"), 0),
            (ObjectRef::new("c", "", "pods", "ns", "p"), 7),
            // Longer than the hasher's first buffer.
            (
                ObjectRef::new("c", "", "pods", "n".repeat(63), "p".repeat(253)),
                7,
            ),
        ] {
            assert_eq!(o.hash(), xxh3_64_with_seed(o.key().as_bytes(), 0));
            let ow = ObjectWindow {
                object: o,
                window_start: ws,
            };
            let expected = xxh3_64_with_seed(ow.cache_key().as_bytes(), 0);
            assert_eq!(ow.span_id(), SpanId::from_bytes(expected.to_be_bytes()));
            assert_eq!(
                derived_span_id(b"abc", 3),
                SpanId::from_bytes(xxh3_64_with_seed(b"abc", 3).to_be_bytes())
            );
        }
    }

    #[test]
    fn key_hashes_are_those_of_the_whole_key_whatever_its_parts() {
        use xxhash_rust::xxh3::{xxh3_64_with_seed, xxh3_128_with_seed};
        let key: Vec<u8> = (0..3 * KEY_BYTES_INLINE)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        for len in [
            0,
            1,
            KEY_BYTES_INLINE - 1,
            KEY_BYTES_INLINE,
            KEY_BYTES_INLINE + 1,
            key.len(),
        ] {
            for cut in [0, len / 3, len.saturating_sub(1), len] {
                let mut h = KeyHasher::with_seed(5);
                h.update(&key[..cut]);
                h.update(&key[cut..len]);
                h.update(b"");
                assert_eq!(
                    h.digest(),
                    xxh3_64_with_seed(&key[..len], 5),
                    "{len} cut at {cut}"
                );
                assert_eq!(h.digest128(), xxh3_128_with_seed(&key[..len], 5));
            }
        }
    }

    #[test]
    fn ids_depend_on_object_and_window() {
        let o = ObjectRef::new("c", "apps", "deployments", "default", "hello");
        let a = ObjectWindow {
            object: o.clone(),
            window_start: 0,
        };
        let b = ObjectWindow {
            object: o.clone(),
            window_start: 1800,
        };
        let mut other = o.clone();
        other.name = "hello2".into();
        let c = ObjectWindow {
            object: other,
            window_start: 0,
        };
        assert_eq!(a.trace_id(), a.clone().trace_id());
        assert_ne!(a.trace_id(), b.trace_id());
        assert_ne!(a.trace_id(), c.trace_id());
        assert_ne!(a.span_id(), c.span_id());
    }
}
