//! Compiles `proto/doorman/doorman.proto` (features `client` and `server`)
//! and `proto/quotaservice/quotaservice.proto` (feature `quota`) into Rust
//! with tonic's prost builder. The descriptor sets come from `protox` (pure
//! Rust), so building needs no system `protoc`; the limiter alone generates
//! nothing.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    #[cfg(feature = "doorman-wire")]
    {
        // Doorman's messages are proto2: its codec checks that the required
        // fields are present.
        let doorman = protox::compile(["doorman/doorman.proto"], ["proto"])?;
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .codec_path("crate::doorman::pb::codec::Checked")
            .compile_fds(doorman)?;
    }
    #[cfg(feature = "quota")]
    {
        // quotaservice's are proto3: plain prost.
        let quota = protox::compile(["quotaservice/quotaservice.proto"], ["proto"])?;
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .compile_fds(quota)?;
    }
    Ok(())
}
