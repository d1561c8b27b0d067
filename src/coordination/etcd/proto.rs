//! etcd's v3 API, generated at build time from the protos vendored under
//! `proto/etcd` (see its README): the KV, Lease, Watch and Auth clients, and
//! server traits (used by the tests' stand-in of etcd).
// Generated: the whole API, of which kascade calls a part.
#![allow(clippy::all, missing_docs, rustdoc::all, dead_code)]

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}
pub mod authpb {
    tonic::include_proto!("authpb");
}
