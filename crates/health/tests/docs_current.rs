//! docs/health.md is the rules table as the code applies it.

#[test]
fn docs_health_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/health.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/health.md exists");
    assert!(
        on_disk == dgx_pixels_health::rules::markdown(),
        "docs/health.md is stale: run `cargo run -p dgx-pixels-exporter -- docs health > docs/health.md`"
    );
}
