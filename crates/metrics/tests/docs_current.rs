//! docs/metrics.md is generated from the catalog; this fails when someone changes one without
//! the other. Regenerate with `cargo run -p dgx-pixels-exporter -- docs metrics > docs/metrics.md`.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[test]
fn docs_metrics_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/metrics.md exists");
    assert!(
        on_disk == dgx_pixels_metrics::catalog::markdown(),
        "docs/metrics.md is stale: run `cargo run -p dgx-pixels-exporter -- docs metrics > docs/metrics.md`"
    );
}
