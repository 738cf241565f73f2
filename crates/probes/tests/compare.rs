//! `probe compare` on fixture result files (a native JSON run and a container CSV run), and
//! result files written and read back.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use dgx_pixels_probes::compare::{chart, compare, markdown};
use dgx_pixels_probes::stats::{summarize, welch};
use dgx_pixels_probes::RunResults;

fn fixture(name: &str) -> RunResults {
    RunResults::read(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

#[test]
fn overhead_significance_and_verdicts() {
    let (a, b) = (fixture("native.json"), fixture("container.csv"));
    assert_eq!(b.environment.container, "yes (/.dockerenv)");
    let cmp = compare(&a, &b).unwrap();
    // gemm_fp64 is only in A; the GPUs (3 on the host, 0 in the container) match because each
    // run has a single GPU.
    let names: Vec<&str> = cmp.iter().map(|c| c.probe.as_str()).collect();
    assert_eq!(names, ["gemm_bf16", "copy_d2d", "launch_latency"]);

    let gemm = &cmp[0];
    let (va, vb) = (&gemm.values.0, &gemm.values.1);
    let (ma, mb) = (summarize(va).unwrap().mean, summarize(vb).unwrap().mean);
    assert!((gemm.overhead_percent - (ma - mb) / ma * 100.0).abs() < 1e-9);
    assert!(gemm.overhead_percent > 50.0 && gemm.significant());
    assert_eq!(gemm.welch.as_ref().unwrap(), &welch(va, vb).unwrap());
    assert!(gemm.verdict().starts_with("> 50%"), "{}", gemm.verdict());

    // Latency: higher is worse, so 4.0 µs → 5.2 µs is +30% overhead.
    let lat = &cmp[2];
    assert!(
        (lat.overhead_percent - 30.0).abs() < 3.0,
        "{}",
        lat.overhead_percent
    );
    assert!(lat.verdict().starts_with("20–40%"), "{}", lat.verdict());

    // Copies come from the same distribution: well under 10% either way.
    let copy = &cmp[1];
    assert!(copy.overhead_percent.abs() < 2.0);
    assert!(
        copy.verdict() == "no significant difference"
            || copy.verdict().starts_with("< 10%")
            || copy.verdict() == "B is faster",
        "{}",
        copy.verdict()
    );
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

#[test]
fn result_files_round_trip_through_json_and_csv() {
    let a = fixture("native.json");
    let dir = tempfile::tempdir().unwrap();
    for name in ["r.json", "r.csv"] {
        let p = dir.path().join(name);
        a.write(&p).unwrap();
        let back = RunResults::read(&p).unwrap();
        assert_eq!(back.environment, a.environment, "{name}");
        assert_eq!(back.results.len(), a.results.len());
        for (x, y) in back.results.iter().zip(&a.results) {
            assert_eq!(
                (x.probe.as_str(), x.gpu, x.unit),
                (y.probe.as_str(), y.gpu, y.unit)
            );
            assert_eq!(x.values, y.values, "{name}: values survive exactly");
            assert!(x.summary.is_some());
        }
    }
}

#[test]
fn malformed_files_are_rejected_with_their_name_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.csv");
    std::fs::write(
        &p,
        "# format: dgx-pixels-probe-results/1\n# warmup: 1\n# iterations: 2\n# seed: 1\nprobe,gpu,uuid,model,unit,iteration,value\ngemm_bf16,0,u,m,flops,0,fast\n",
    )
    .unwrap();
    let e = RunResults::read(&p).unwrap_err().to_string();
    assert!(
        e.contains("bad.csv") && e.contains("line 6") && e.contains("\"fast\""),
        "{e}"
    );
    let p = dir.path().join("bad.json");
    std::fs::write(&p, "{\"format\": \"other\"}").unwrap();
    let e = RunResults::read(&p).unwrap_err().to_string();
    assert!(e.contains("bad.json"), "{e}");
    let a = fixture("native.json");
    let mut none = a.clone();
    none.results.retain(|r| r.probe == "gemm_fp64");
    let mut other = a.clone();
    other.results.retain(|r| r.probe == "copy_d2d");
    assert!(compare(&none, &other)
        .unwrap_err()
        .to_string()
        .contains("no probe in common"));
}
