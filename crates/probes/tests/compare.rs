//! `probe compare` on fixture result files (a native JSON run and a container CSV run) as data,
//! and result files written and read back (the report and chart: crates/tools/tests).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use dgx_pixels_probes::compare::compare;
use dgx_pixels_probes::RunResults;

fn fixture(name: &str) -> RunResults {
    RunResults::read(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// `|got - want| <= tol`, with both in the message.
fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} ± {tol}"
    );
}

// The expected numbers below were computed from the fixture files outside this crate (Python's
// `statistics` module for means and variances, Welch's formulas written out, the two-sided
// p-value by numerical integration of Student's t density), not with the code under test:
//   probe           mean A               mean B               overhead   t          df       p
//   gemm_bf16       7.001709137172249e14 3.3136021e14          52.674382  -303.3460  56.2478  4e-92
//   copy_d2d        2.897914417274479e12 2.8988955e12          -0.033855    0.18365  53.5325  0.855
//   launch_latency  3.988835266666667e-6 5.237575e-6           31.305874   21.5497  57.9810  2e-29
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
    close("gemm overhead %", gemm.overhead_percent, 52.674382, 1e-5);
    let w = gemm.welch.as_ref().unwrap();
    close(
        "gemm difference",
        w.difference,
        3.3136021e14 - 7.001709137172249e14,
        1e3,
    );
    close("gemm t", w.t, -303.346011, 1e-4);
    close("gemm df", w.df, 56.2478, 1e-3);
    assert!(w.p_value < 1e-50, "gemm p {}", w.p_value);
    assert!(w.ci95.0 < w.difference && w.difference < w.ci95.1 && w.ci95.1 < 0.0);
    assert!(gemm.significant());
    assert_eq!(
        gemm.verdict(),
        "> 50%: B's environment is likely the problem"
    );

    // Latency: higher is worse, so 3.99 µs → 5.24 µs is +31.3% overhead.
    let lat = &cmp[2];
    close("latency overhead %", lat.overhead_percent, 31.305874, 1e-5);
    close("latency t", lat.welch.as_ref().unwrap().t, 21.549693, 1e-4);
    assert_eq!(lat.verdict(), "20–40%: a normal containerization cost");

    // Copies come from the same distribution: p = 0.855, so no verdict band applies.
    let copy = &cmp[1];
    close("copy overhead %", copy.overhead_percent, -0.033855, 1e-5);
    let w = copy.welch.as_ref().unwrap();
    close("copy t", w.t, 0.183650, 1e-5);
    close("copy df", w.df, 53.5325, 1e-3);
    close("copy p", w.p_value, 0.855, 0.002);
    assert!(!copy.significant());
    assert_eq!(copy.verdict(), "no significant difference");
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
