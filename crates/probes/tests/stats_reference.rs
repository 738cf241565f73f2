//! The statistics module against values computed independently by NumPy/SciPy
//! (fixtures/make_stats_fixtures.py wrote fixtures/stats_reference.json).
#![allow(clippy::unwrap_used)]

use dgx_pixels_probes::stats::{summarize, welch};
use serde_json::Value;

fn close(what: &str, ours: f64, theirs: f64, rel: f64) {
    let tol = rel * theirs.abs().max(1e-300);
    assert!(
        (ours - theirs).abs() <= tol,
        "{what}: ours {ours:e}, scipy {theirs:e}"
    );
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

fn values(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(f).collect()
}

#[test]
fn summaries_and_welch_match_scipy() {
    let text = include_str!("fixtures/stats_reference.json");
    let doc: Value = serde_json::from_str(text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (a, b) = (values(&case["a"]), values(&case["b"]));
        for (side, xs) in [("a", &a), ("b", &b)] {
            let s = summarize(xs).unwrap();
            let r = &case[format!("summary_{side}")];
            let at = |k: &str| format!("{name}.{side}.{k}");
            assert_eq!(s.n as u64, r["n"].as_u64().unwrap());
            for (k, ours) in [
                ("mean", s.mean),
                ("median", s.median),
                ("std", s.std),
                ("min", s.min),
                ("max", s.max),
                ("p50", s.p50),
                ("p95", s.p95),
                ("p99", s.p99),
                ("cv", s.cv.unwrap()),
            ] {
                close(&at(k), ours, f(&r[k]), 1e-9);
            }
            let (lo, hi) = s.ci95.unwrap();
            close(&at("ci95.low"), lo, f(&r["ci95"][0]), 1e-9);
            close(&at("ci95.high"), hi, f(&r["ci95"][1]), 1e-9);
        }
        let w = welch(&a, &b).unwrap();
        let r = &case["welch"];
        close(
            &format!("{name}.difference"),
            w.difference,
            f(&r["difference"]),
            1e-9,
        );
        close(&format!("{name}.t"), w.t, f(&r["t"]), 1e-9);
        close(&format!("{name}.df"), w.df, f(&r["df"]), 1e-9);
        // p-values span many orders of magnitude; compare relatively.
        close(
            &format!("{name}.p_value"),
            w.p_value,
            f(&r["p_value"]),
            1e-6,
        );
        close(
            &format!("{name}.ci95.low"),
            w.ci95.0,
            f(&r["ci95"][0]),
            1e-8,
        );
        close(
            &format!("{name}.ci95.high"),
            w.ci95.1,
            f(&r["ci95"][1]),
            1e-8,
        );
    }
}
