//! etcd's v3 API, generated at build time from the protos vendored under
//! `proto/etcd` (see its README): the KV, Lease, Watch and Auth clients, and
//! server traits (used by the tests' stand-in of etcd).
#![allow(clippy::all, missing_docs, rustdoc::all)]

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}
pub mod authpb {
    tonic::include_proto!("authpb");
}
