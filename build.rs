//! Compiles the Jaeger remote-storage v2 protos (proto/) into tonic server
//! code. protox parses them in pure Rust, so no `protoc` is needed; the
//! OpenTelemetry messages map onto the opentelemetry-proto crate's types.
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
        .build_client(false)
        .extern_path(".opentelemetry.proto", "::opentelemetry_proto::tonic")
        .compile_fds(fds)?;
    Ok(())
}
