//! Compiles the few .proto files of Envoy's rate limit service (and gRPC's
//! health check) under `proto/` into Rust with tonic's prost builder. The
//! descriptor set comes from `protox` (pure Rust), so building needs no
//! system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(
        [
            "envoy/service/ratelimit/v3/rls.proto",
            "grpc/health/v1/health.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;
    Ok(())
}
