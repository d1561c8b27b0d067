//! Which related objects a trace shows, and how far the walk may go.

use std::collections::HashSet;
use std::str::FromStr;

/// Which related objects a trace shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The object alone.
    Object,
    /// Its owners up to the top, each with only the path down to the object.
    Ancestors,
    /// The objects it owns (and their links), down.
    Descendants,
    /// Everything below its top ancestor.
    Full,
}

impl Scope {
    /// Every scope, widest first.
    pub const ALL: [Scope; 4] = [
        Scope::Full,
        Scope::Ancestors,
        Scope::Descendants,
        Scope::Object,
    ];

    /// The name on the command line and in the Jaeger UI's search tag.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Object => "object",
            Scope::Ancestors => "ancestors",
            Scope::Descendants => "descendants",
            Scope::Full => "full",
        }
    }

    /// The scope's byte in an assembled trace id.
    pub fn code(self) -> u8 {
        match self {
            Scope::Full => 0,
            Scope::Ancestors => 1,
            Scope::Descendants => 2,
            Scope::Object => 3,
        }
    }

    /// The scope of an assembled trace id's byte.
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == c)
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scope {} (expected full, ancestors, descendants or object)",
                    crate::messages::quote(s)
                )
            })
    }
}

#[derive(Clone, Debug)]
pub struct Limits {
    /// Levels below (and above) the searched object that are followed.
    pub max_depth: usize,
    /// Objects in one trace; further links are noted, not followed.
    pub max_objects: usize,
    /// Bytes of object histories one assembly loads, as
    /// `cache_weight::history_bytes` counts them (about two fifths of what
    /// the finished trace holds); further links are noted, not followed.
    pub max_bytes: u64,
    /// Raw reads in flight at once.
    pub concurrency: usize,
    /// Link classes whose target is shared by many objects (a Node, a
    /// ConfigMap): shown below an object, never climbed up from.
    pub shared_classes: HashSet<String>,
}

/// Link classes of objects many others use (shown under each user, never
/// climbed), in the order `--help` lists them.
pub(crate) const DEFAULT_SHARED_CLASSES: [&str; 6] = [
    "node",
    "configmap",
    "secret",
    "serviceaccount",
    "storageclass",
    "backend",
];

/// Link classes of objects a cluster's set-up may have made long before
/// the objects that come to use them (a PersistentVolume made for a claim
/// to come). Unlike shared classes they are climbed (a volume's trace shows
/// its claim), but when reached from another object their entries before
/// the trace's start are hidden: they do not stretch the trace back to the
/// cluster's start.
pub(crate) const SET_UP_CLASSES: [&str; 1] = ["pv"];

/// Bytes of object histories one assembly loads by default: 64 MiB, about
/// 1,700 Pods under one Deployment, whose finished trace (≈ 2.5 times its
/// histories in tree mode) still fits the default `--cache-bytes`.
pub(crate) const DEFAULT_MAX_TRACE_BYTES: u64 = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: 8,
            max_objects: 5000,
            max_bytes: DEFAULT_MAX_TRACE_BYTES,
            concurrency: 16,
            shared_classes: DEFAULT_SHARED_CLASSES.map(String::from).into(),
        }
    }
}
