//! Histograms read back from the bytes, in both formats: every series' `le` bounds are numbers
//! in increasing order ending in `+Inf`, its bucket counts are cumulative, and its `_count` is
//! the `+Inf` bucket's.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::sync::Arc;

use dgx_pixels_exposition::encode::{encode, EncodeOptions, ExpositionInput, Format};
use dgx_pixels_metrics::catalog::Detail;
use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::{
    DeviceKey, ExternalFamily, ExternalKind, ExternalSample, Metric, PollOutput, Snapshot,
    SourceHealth,
};

fn exposition(format: Format) -> String {
    let mut samples = Vec::new();
    for (gpu, observations) in [(0u32, &[0.02, 0.5, 3.0][..]), (1, &[0.001, 250.0][..])] {
        let mut h = Histogram::new(&[0.001, 0.01, 0.1, 2.5, 100.0, 1200.0]);
        observations.iter().for_each(|v| h.observe(*v));
        let key = Arc::new(DeviceKey::gpu(gpu, format!("GPU-{gpu}").as_str()));
        samples.extend(h.samples(Some(&key), Metric::ProbeDuration, ["gemm_bf16"]));
    }
    let external = ExternalFamily {
        name: "lat".into(),
        help: "Latency.".into(),
        kind: ExternalKind::Histogram,
        samples: [("1e-3", 1.0), ("0.5", 2.0), ("10", 2.5), ("+Inf", 4.0)]
            .iter()
            .map(|(le, n)| ExternalSample::new("lat_bucket", [("le", *le)], *n))
            .chain([
                ExternalSample::new("lat_sum", [("x", "y")].into_iter().take(0), 9.0),
                ExternalSample::new("lat_count", [("x", "y")].into_iter().take(0), 4.0),
            ])
            .collect(),
    };
    let output = PollOutput {
        samples,
        external: Arc::new(vec![external]),
        attribution: None,
    };
    let snapshot = Snapshot {
        source: "probes".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output,
    };
    let options = EncodeOptions {
        const_labels: vec![("node".into(), "n1".into())],
        detail: Detail::Full,
    };
    let input = ExpositionInput {
        statics: Arc::new(vec![]),
        snapshots: vec![Arc::new(snapshot)],
        options: Arc::new(options),
    };
    encode(&input, format)
}

/// `name{labels} value` as (name, labels without `le`, `le`, value).
fn parse(line: &str) -> (String, String, Option<String>, f64) {
    let (series, value) = line.rsplit_once(' ').unwrap();
    let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
    let mut le = None;
    let mut rest = Vec::new();
    for pair in labels
        .trim_end_matches('}')
        .split(',')
        .filter(|p| !p.is_empty())
    {
        match pair.strip_prefix("le=") {
            Some(v) => le = Some(v.trim_matches('"').to_string()),
            None => rest.push(pair),
        }
    }
    (name.into(), rest.join(","), le, value.parse().unwrap())
}

#[test]
fn histogram_bounds_read_back_as_increasing_numbers_with_cumulative_counts() {
    for format in [Format::Text, Format::OpenMetrics] {
        let body = exposition(format);
        // (family, labels) -> buckets in the order written, and the `_count`.
        let mut buckets: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
        let mut counts = BTreeMap::new();
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let (name, labels, le, value) = parse(line);
            if let Some(family) = name.strip_suffix("_bucket") {
                let le = le.unwrap();
                let bound: f64 = le.parse().unwrap_or_else(|_| panic!("le={le} in {line}"));
                let key = (family.to_string(), labels);
                buckets.entry(key).or_default().push((bound, value));
            } else if let Some(family) = name.strip_suffix("_count") {
                counts.insert((family.to_string(), labels), value);
            }
        }
        assert_eq!(
            buckets.len(),
            3,
            "two probe series and one external: {body}"
        );
        for (key, series) in &buckets {
            assert!(
                series.windows(2).all(|w| w[0].0 < w[1].0),
                "{format:?} {key:?}: bounds increase: {series:?}"
            );
            assert!(
                series.windows(2).all(|w| w[0].1 <= w[1].1),
                "{format:?} {key:?}: counts are cumulative: {series:?}"
            );
            let (last_bound, last_count) = *series.last().unwrap();
            assert_eq!(last_bound, f64::INFINITY, "{format:?} {key:?}");
            assert_eq!(counts.get(key), Some(&last_count), "{format:?} {key:?}");
        }
        let probe = (
            "dgx_pixels_probe_duration_seconds".to_string(),
            String::new(),
        );
        let first = buckets
            .iter()
            .find(|((f, l), _)| *f == probe.0 && l.contains("GPU-0"))
            .unwrap()
            .1;
        let bounds: Vec<f64> = first.iter().map(|b| b.0).collect();
        assert_eq!(
            bounds,
            [0.001, 0.01, 0.1, 2.5, 100.0, 1200.0, f64::INFINITY],
            "{format:?}: the reading's bounds, as numbers"
        );
        let cumulative: Vec<f64> = first.iter().map(|b| b.1).collect();
        assert_eq!(
            cumulative,
            [0.0, 0.0, 1.0, 2.0, 3.0, 3.0, 3.0],
            "{format:?}"
        );
    }
}
