//! Compiles `proto/doorman/doorman.proto` and
//! `proto/quotaservice/quotaservice.proto` into Rust with tonic's prost
//! builder. The descriptor set comes from `protox` (pure Rust), so building
//! needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(
        ["doorman/doorman.proto", "quotaservice/quotaservice.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // prost plus a check that proto2 required fields are present.
        .codec_path("crate::doorman::pb::codec::Checked")
        .compile_fds(fds)?;
    Ok(())
}
