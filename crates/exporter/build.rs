//! Records the git revision and rustc version for dgx_pixels_exporter_build_info.
use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let revision = std::env::var("EXPORTER_REVISION_OVERRIDE")
        .ok()
        .or_else(|| output("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = output(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=EXPORTER_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=EXPORTER_BUILD_RUSTC_VERSION={rustc_version}");
    println!("cargo:rerun-if-env-changed=EXPORTER_REVISION_OVERRIDE");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
}
