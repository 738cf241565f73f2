//! What the tests against the fake libnvidia-ml share.
#![allow(dead_code, clippy::unwrap_used)] // each test file uses a subset; a panic is the report

use std::path::PathBuf;
use std::process::Command;

/// The fake libnvidia-ml (crates/fake-nvml), built first.
pub fn fake_library() -> PathBuf {
    let ok = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "fake-nvml"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building fake-nvml failed");
    // <target>/debug/deps/this-test -> <target>/debug
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    dir.join("libfake_nvml.so")
}
