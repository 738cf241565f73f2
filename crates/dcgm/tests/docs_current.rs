//! docs/dcgm-fields.md is generated from the field table; this fails when they differ.
//! Regenerate with `cargo run -p dgx-pixels-exporter -- docs dcgm-fields > docs/dcgm-fields.md`.
#![allow(clippy::unwrap_used)]

#[test]
fn docs_dcgm_fields_md_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dcgm-fields.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/dcgm-fields.md exists");
    assert!(
        on_disk == dgx_pixels_dcgm::fields::markdown(),
        "docs/dcgm-fields.md is stale: run `cargo run -p dgx-pixels-exporter -- docs dcgm-fields > docs/dcgm-fields.md`"
    );
}
