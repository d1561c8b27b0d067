//! Change propagation IDs (CPIDs) for kube-rs controllers.
//!
//! Kubernetes controllers never call each other: they read objects and write
//! others, so a trace id cannot ride along with a request. A CPID rides on the
//! objects instead (the annotation [`CPID_ANNOTATION`]), one per object:
//!
//! - a controller that writes an object because of **one** change passes that
//!   change's CPID on (*inherit*);
//! - one that acts on **several** changes at once mints a fresh CPID and
//!   reports a [`Mergelog`] (new CPID ← source CPIDs) to kascade, which keeps
//!   the merge graph and answers "which CPIDs descend from this one?";
//! - each object also carries a few of its CPID's closest ancestors
//!   ([`ANCESTORS_ANNOTATION`]): when one of the observed CPIDs already
//!   descends from all the others, it is inherited and no merge is needed
//!   (the "ancestor CPIDs" of Ehira et al., 2024).
//!
//! A W3C `traceparent` annotation ([`TRACEPARENT_ANNOTATIONS`]) is accepted as
//! input where no CPID is present: its trace id becomes the CPID, so objects
//! stamped under the Kubernetes trace-context proposal join the same change.
//!
//! ```no_run
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kascade_cpid::{Config, Tracer};
//!
//! # async fn reconcile(deploy: Deployment, config: ConfigMap) {
//! // Once per controller (inside a tokio runtime):
//! let tracer = Tracer::new(
//!     Config::new("http://kascade.kascade.svc:9000").controller("config-roller"),
//! );
//!
//! // In each reconcile: observe what was read, decide, stamp what is written.
//! let mut propagation = tracer.propagation();
//! propagation.observe(&deploy).observe(&config);
//! let decision = propagation.decide(); // a merge is reported in the background
//! let mut updated = deploy.clone();
//! decision.stamp(&mut updated.metadata);
//! // … patch `updated`: the roll carries the change's CPID.
//! # }
//! ```
//!
//! Nothing here blocks or fails a reconcile when kascade is unreachable:
//! mergelogs wait in a bounded buffer and what cannot be delivered is counted
//! ([`Stats`]).

mod client;
mod context;
mod id;
mod mergelog;
mod propagation;

pub use client::{Config, MergelogSender, Stats};
pub use context::{ChangeContext, ContextError, Read};
pub use id::{Cpid, CpidError};
pub use mergelog::{Mergelog, MergelogBatch};
pub use propagation::{Decision, Outcome, Propagation, Tracer, decide};

/// The annotation holding an object's CPID (a UUID, lowercase, hyphenated).
pub const CPID_ANNOTATION: &str = "kascade.io/cpid";

/// The annotation holding the CPID's closest known ancestors, nearest first,
/// comma-separated; auxiliary (it may be partial), bounded in length.
pub const ANCESTORS_ANNOTATION: &str = "kascade.io/cpid-ancestors";

/// W3C trace-context annotations read when an object has no CPID: the
/// Kubernetes proposal's (KEP-5915) and the bare header name.
pub const TRACEPARENT_ANNOTATIONS: [&str; 2] = ["tracing.k8s.io/traceparent", "traceparent"];

/// How many ancestors an object carries unless configured otherwise.
pub const DEFAULT_MAX_ANCESTORS: usize = 8;
