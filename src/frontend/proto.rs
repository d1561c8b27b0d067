//! Generated code of the Jaeger remote storage API v2 (see build.rs).
#![allow(clippy::all, missing_docs)]
tonic::include_proto!("jaeger.storage.v2");
