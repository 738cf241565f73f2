//! Generates the pod-resources client (and the server the tests use) from our own .proto.
//! protox parses the file in pure Rust, so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources_v1.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
