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

/// Every DCGM field the exporter maps to a metric has its metric in docs/deploy.md's migration
/// table (dcgm-exporter field to our metric): a field mapped later, or a stale "not mapped"
/// list, fails here. Names in the doc may be abbreviated with `{a,b}` alternatives; any other
/// brace group is labels and ends the name.
#[test]
fn docs_deploy_md_maps_every_mapped_dcgm_field() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/deploy.md");
    let doc = std::fs::read_to_string(path).expect("docs/deploy.md exists");
    let mut names = std::collections::BTreeSet::new();
    for token in doc.split('`').skip(1).step_by(2) {
        if token.starts_with("dgx_pixels_") {
            names.extend(expand(token));
        }
    }
    for f in dgx_pixels_dcgm::fields::KNOWN_FIELDS {
        let Some(m) = &f.mapping else { continue };
        let metric = m.metric.def().name;
        assert!(
            names.contains(metric),
            "docs/deploy.md's migration table lacks {metric} (DCGM field {} {})",
            f.id,
            f.name
        );
    }
}

/// `a{b,c}d{e,f}` to its four names; `x{label="v"}` and `x{label}` to `x`.
fn expand(token: &str) -> Vec<String> {
    let Some(open) = token.find('{') else {
        return vec![token.to_string()];
    };
    let Some(close) = token[open..].find('}').map(|c| open + c) else {
        return vec![token[..open].to_string()];
    };
    let group = &token[open + 1..close];
    // `{fan}`, `{clock="sm"}`: labels, not alternatives.
    if group.contains('=') || !group.contains(',') {
        return vec![token[..open].to_string()];
    }
    group
        .split(',')
        .flat_map(|alt| expand(&format!("{}{alt}{}", &token[..open], &token[close + 1..])))
        .collect()
}

#[test]
fn brace_names_expand() {
    assert_eq!(
        expand("dgx_pixels_gpu_fp{64,32}_pipe_{a,b}"),
        [
            "dgx_pixels_gpu_fp64_pipe_a",
            "dgx_pixels_gpu_fp64_pipe_b",
            "dgx_pixels_gpu_fp32_pipe_a",
            "dgx_pixels_gpu_fp32_pipe_b"
        ]
    );
    assert_eq!(
        expand("dgx_pixels_gpu_clock_hertz{clock=\"sm\"}"),
        ["dgx_pixels_gpu_clock_hertz"]
    );
}
