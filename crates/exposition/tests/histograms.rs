//! A catalog histogram (probe durations) through both writers: buckets, sum and count, and a
//! malformed or incomplete series left out.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use dgx_pixels_exposition::encode::{encode, EncodeOptions, ExpositionInput, Format};
use dgx_pixels_metrics::catalog::Detail;
use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::{DeviceKey, Metric, Sample, Snapshot, SourceHealth};

fn exposition(format: Format) -> String {
    let mut h = Histogram::new(&[0.01, 0.1]);
    h.observe(0.02);
    h.observe(0.5);
    let key = Arc::new(DeviceKey::gpu(0, "GPU-a"));
    let mut samples = h.samples(Some(&key), Metric::ProbeDuration, ["gemm_bf16"]);
    // Malformed: a bound that is not a number, and a series without +Inf.
    samples.push(Sample::for_gpu(
        1,
        "GPU-b",
        Metric::ProbeDuration,
        &["copy_d2d", "x"],
        1.0,
    ));
    samples.push(Sample::for_gpu(
        1,
        "GPU-b",
        Metric::ProbeDuration,
        &["copy_d2d", "0.1"],
        1.0,
    ));
    encode(
        &ExpositionInput {
            statics: Arc::new(vec![]),
            snapshots: vec![Arc::new(Snapshot {
                source: "probes".into(),
                health: SourceHealth {
                    up: true,
                    polls: 1,
                    ..Default::default()
                },
                output: samples.into(),
            })],
            options: Arc::new(EncodeOptions {
                const_labels: vec![("node".into(), "n1".into())],
                // Every series: the probe duration histogram is outside the default budget.
                detail: Detail::Full,
            }),
        },
        format,
    )
}

#[test]
fn classic_text_has_buckets_sum_and_count() {
    let text = exposition(Format::Text);
    let expected = "# TYPE dgx_pixels_probe_duration_seconds histogram\n\
        dgx_pixels_probe_duration_seconds_bucket{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\",le=\"0.01\"} 0\n\
        dgx_pixels_probe_duration_seconds_bucket{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\",le=\"0.1\"} 1\n\
        dgx_pixels_probe_duration_seconds_bucket{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\",le=\"+Inf\"} 2\n\
        dgx_pixels_probe_duration_seconds_sum{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 0.52\n\
        dgx_pixels_probe_duration_seconds_count{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 2\n";
    assert!(text.contains(expected), "{text}");
    assert!(
        !text.contains("GPU-b"),
        "incomplete series must not be served: {text}"
    );
}

#[test]
fn openmetrics_has_the_same_histogram() {
    let om = exposition(Format::OpenMetrics);
    assert!(
        om.contains("# TYPE dgx_pixels_probe_duration_seconds histogram\n"),
        "{om}"
    );
    assert!(
        om.contains("# UNIT dgx_pixels_probe_duration_seconds seconds\n"),
        "{om}"
    );
    // prometheus-client writes le first; label order carries no meaning.
    assert!(om.contains("dgx_pixels_probe_duration_seconds_bucket{le=\"0.1\",node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 1\n"), "{om}");
    assert!(om.contains("dgx_pixels_probe_duration_seconds_bucket{le=\"+Inf\",node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 2\n"), "{om}");
    assert!(om.contains("dgx_pixels_probe_duration_seconds_count{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"} 2\n"), "{om}");
    assert!(!om.contains("GPU-b"));
}
