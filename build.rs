//! Compiles the protos under proto/ in pure Rust (protox: no `protoc`):
//! * the Jaeger remote-storage v2 protos into tonic server code (the
//!   frontend serves them to the query Jaeger) and client code (the frontend
//!   reads the raw Jaeger's `remote_storage` with them), the OpenTelemetry
//!   messages mapped onto the opentelemetry-proto crate's types, but for the
//!   streamed `TracesData`, mapped onto `frontend::proto::TracesMessage`;
//! * etcd's v3 API (proto/etcd, vendored from etcd's own sources) into tonic
//!   client code for the shared span cache and the watcher role election,
//!   plus server traits (every method answering Unimplemented unless
//!   implemented) for the tests' in-process stand-in of etcd.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/jaeger/storage/v2/trace_storage.proto",
        "proto/jaeger/storage/v2/dependency_storage.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-changed=proto/opentelemetry");
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // A request that does not decode is the caller's error (InvalidArgument).
        .codec_path("crate::frontend::proto::RequestCodec")
        // What GetTraces/FindTraces stream: a type of the frontend's, which
        // may carry the message already encoded (a cached trace's answer).
        .extern_path(
            ".opentelemetry.proto.trace.v1.TracesData",
            "crate::frontend::proto::TracesMessage",
        )
        .extern_path(".opentelemetry.proto", "::opentelemetry_proto::tonic")
        .compile_fds(fds)?;

    println!("cargo:rerun-if-changed=proto/etcd");
    let etcd = protox::compile(["etcd/api/etcdserverpb/rpc.proto"], ["proto/etcd"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(etcd)?;
    Ok(())
}
