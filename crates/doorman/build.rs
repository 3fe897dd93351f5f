//! Compiles `proto/doorman/doorman.proto` into Rust with tonic's prost
//! builder. The descriptor set comes from `protox` (pure Rust), so building
//! needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // Doorman's messages are proto2: its codec checks that the required
    // fields are present.
    let doorman = protox::compile(["doorman/doorman.proto"], ["proto"])?;
    // The server's stubs only with the `server` feature: a lease client
    // alone compiles no server code.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .codec_path("crate::pb::codec::Checked")
        .compile_fds(doorman)?;
    Ok(())
}
