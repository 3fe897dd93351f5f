//! Compiles `proto/quotaservice/quotaservice.proto` into Rust with tonic's
//! prost builder. The descriptor set comes from `protox` (pure Rust), so
//! building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // quotaservice's messages are proto3: plain prost.
    let quota = protox::compile(["quotaservice/quotaservice.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(quota)?;
    Ok(())
}
