//! `probe compare`'s reports on the probes crate's fixture result files (a native JSON run and a
//! container CSV run): the Markdown report and the PNG chart.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use dgx_pixels_probes::compare::compare;
use dgx_pixels_probes::RunResults;
use dgx_pixels_tools::probe::comparison::{chart, markdown};

fn fixture(name: &str) -> RunResults {
    RunResults::read(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../probes/tests/fixtures")
            .join(name),
    )
    .unwrap()
}

#[test]
fn report_and_chart_are_written() {
    let (a, b) = (fixture("native.json"), fixture("container.csv"));
    let cmp = compare(&a, &b).unwrap();
    let md = markdown(
        "native.json",
        "container.csv",
        &a,
        &b,
        &cmp,
        Some("chart.png"),
    );
    assert!(
        md.contains("| Container | no | yes (/.dockerenv) |"),
        "{md}"
    );
    assert!(md.contains("| Driver | 580.65.06 | 580.65.06 |"));
    assert!(md.contains("| GPU model | NVIDIA H100 80GB HBM3 | NVIDIA H100 80GB HBM3 |"));
    assert!(md.contains("| gemm_bf16 | 7"), "{md}");
    assert!(md.contains("> 50%"));
    assert!(md.contains("![A (blue, left) and B (orange, right)"));
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("chart.png");
    chart(&cmp, &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, 3 panels in one row.
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (960, 300));
}
