//! Every family type, catalog and external, in both formats, exactly as served: the classic
//! text format from the small writer, OpenMetrics from prometheus-client with the families it
//! cannot express (a summary, a histogram with fractional counts) after it, before one `# EOF`.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_metrics::catalog::Detail;
use dgx_pixels_metrics::histogram::Histogram;
use dgx_pixels_metrics::{
    DeviceKey, ExternalFamily, ExternalKind, ExternalSample, Metric, PollOutput, Sample, Snapshot,
    SourceHealth,
};

/// A sample as `(name, labels, value)`.
type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

fn family(name: &str, help: &str, kind: ExternalKind, samples: &[Row<'_>]) -> ExternalFamily {
    ExternalFamily {
        name: name.into(),
        help: help.into(),
        kind,
        samples: samples
            .iter()
            .map(|(n, l, v)| ExternalSample::new(*n, l.iter().copied(), *v))
            .collect(),
    }
}

fn exposition(format: Format) -> String {
    let mut duration = Histogram::new(&[0.01, 0.1]);
    duration.observe(0.02);
    duration.observe(0.5);
    let mut samples = vec![
        Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], 312.5),
        Sample::for_gpu(0, "GPU-a", Metric::GpuEnergy, &[], 1234.0),
        // A blank reading: the one NaN rule drops it from the catalog families.
        Sample::for_gpu(0, "GPU-a", Metric::GpuUtilization, &[], f64::NAN),
    ];
    let key = Arc::new(DeviceKey::gpu(0, "GPU-a"));
    samples.extend(duration.samples(Some(&key), Metric::ProbeDuration, ["gemm_bf16"]));
    let external = vec![
        family(
            "jobs_total",
            "Jobs.",
            ExternalKind::Counter,
            &[("jobs_total", &[("model", "a")], 3.0)],
        ),
        family(
            "legacy",
            "Legacy.",
            ExternalKind::Counter,
            &[("legacy", &[], 1.0)],
        ),
        family(
            "temp",
            "Temperature.",
            ExternalKind::Gauge,
            &[("temp", &[("sensor", "x")], 21.5)],
        ),
        // External NaN is served as its author wrote it.
        family(
            "free",
            "Free.",
            ExternalKind::Untyped,
            &[("free", &[], f64::NAN)],
        ),
        family(
            "lat",
            "Latency.",
            ExternalKind::Histogram,
            &[
                ("lat_bucket", &[("le", "0.5")], 1.0),
                ("lat_bucket", &[("le", "+Inf")], 2.0),
                ("lat_sum", &[], 1.5),
                ("lat_count", &[], 2.0),
            ],
        ),
        family(
            "frac",
            "Fractional counts.",
            ExternalKind::Histogram,
            &[
                ("frac_bucket", &[("le", "1")], 0.5),
                ("frac_bucket", &[("le", "+Inf")], 1.5),
                ("frac_sum", &[], 2.25),
                ("frac_count", &[], 1.5),
            ],
        ),
        family(
            "rpc",
            "RPC \"latency\".",
            ExternalKind::Summary,
            &[
                ("rpc", &[("quantile", "0.5")], 0.1),
                ("rpc", &[("quantile", "0.99")], 0.3),
                ("rpc_sum", &[], 12.0),
                ("rpc_count", &[], 100.0),
            ],
        ),
    ];
    let options = EncodeOptions {
        const_labels: vec![("node".into(), "n1".into())],
        // Every series: the probe duration histogram is outside the default budget.
        detail: Detail::Full,
    };
    let store = SnapshotStore::new(&["t"], vec![], options);
    store.publish(Snapshot {
        source: "t".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: PollOutput {
            samples,
            external: Arc::new(external),
            attribution: None,
        },
    });
    let body = store.current().exposition(format, false);
    String::from_utf8(body.to_vec()).unwrap()
}

const PROBE: &str = "node=\"n1\",gpu=\"0\",uuid=\"GPU-a\",probe=\"gemm_bf16\"";

#[test]
fn classic_text_writes_every_type() {
    let text = exposition(Format::Text);
    assert!(
        text.contains(
            "# HELP dgx_pixels_gpu_power_watts Power draw of the GPU board.\n\
         # TYPE dgx_pixels_gpu_power_watts gauge\n\
         dgx_pixels_gpu_power_watts{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 312.5\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "# TYPE dgx_pixels_gpu_energy_joules_total counter\n\
         dgx_pixels_gpu_energy_joules_total{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 1234\n"
    ));
    assert!(text.contains(&format!(
        "# TYPE dgx_pixels_probe_duration_seconds histogram\n\
         dgx_pixels_probe_duration_seconds_bucket{{{PROBE},le=\"0.01\"}} 0\n\
         dgx_pixels_probe_duration_seconds_bucket{{{PROBE},le=\"0.1\"}} 1\n\
         dgx_pixels_probe_duration_seconds_bucket{{{PROBE},le=\"+Inf\"}} 2\n\
         dgx_pixels_probe_duration_seconds_sum{{{PROBE}}} 0.52\n\
         dgx_pixels_probe_duration_seconds_count{{{PROBE}}} 2\n"
    )));
    assert!(
        !text.contains("utilization"),
        "a NaN catalog reading is blank"
    );
    // External families follow the catalog's, in their order.
    assert!(
        text.ends_with(
            "# HELP jobs_total Jobs.\n\
         # TYPE jobs_total counter\n\
         jobs_total{node=\"n1\",model=\"a\"} 3\n\
         # HELP legacy Legacy.\n\
         # TYPE legacy counter\n\
         legacy{node=\"n1\"} 1\n\
         # HELP temp Temperature.\n\
         # TYPE temp gauge\n\
         temp{node=\"n1\",sensor=\"x\"} 21.5\n\
         # HELP free Free.\n\
         # TYPE free untyped\n\
         free{node=\"n1\"} NaN\n\
         # HELP lat Latency.\n\
         # TYPE lat histogram\n\
         lat_bucket{node=\"n1\",le=\"0.5\"} 1\n\
         lat_bucket{node=\"n1\",le=\"+Inf\"} 2\n\
         lat_sum{node=\"n1\"} 1.5\n\
         lat_count{node=\"n1\"} 2\n\
         # HELP frac Fractional counts.\n\
         # TYPE frac histogram\n\
         frac_bucket{node=\"n1\",le=\"1\"} 0.5\n\
         frac_bucket{node=\"n1\",le=\"+Inf\"} 1.5\n\
         frac_sum{node=\"n1\"} 2.25\n\
         frac_count{node=\"n1\"} 1.5\n\
         # HELP rpc RPC \"latency\".\n\
         # TYPE rpc summary\n\
         rpc{node=\"n1\",quantile=\"0.5\"} 0.1\n\
         rpc{node=\"n1\",quantile=\"0.99\"} 0.3\n\
         rpc_sum{node=\"n1\"} 12\n\
         rpc_count{node=\"n1\"} 100\n"
        ),
        "{text}"
    );
}

#[test]
fn openmetrics_writes_every_type_and_what_prometheus_client_cannot_before_one_eof() {
    let om = exposition(Format::OpenMetrics);
    assert!(
        om.contains(
            "# HELP dgx_pixels_gpu_power_watts Power draw of the GPU board.\n\
         # TYPE dgx_pixels_gpu_power_watts gauge\n\
         # UNIT dgx_pixels_gpu_power_watts watts\n\
         dgx_pixels_gpu_power_watts{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 312.5\n"
        ),
        "{om}"
    );
    assert!(om.contains(
        "# TYPE dgx_pixels_gpu_energy_joules counter\n\
         # UNIT dgx_pixels_gpu_energy_joules joules\n\
         dgx_pixels_gpu_energy_joules_total{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 1234\n"
    ));
    // prometheus-client writes the sum and count first, and `le` first.
    assert!(
        om.contains(&format!(
            "# TYPE dgx_pixels_probe_duration_seconds histogram\n\
         # UNIT dgx_pixels_probe_duration_seconds seconds\n\
         dgx_pixels_probe_duration_seconds_sum{{{PROBE}}} 0.52\n\
         dgx_pixels_probe_duration_seconds_count{{{PROBE}}} 2\n\
         dgx_pixels_probe_duration_seconds_bucket{{le=\"0.01\",{PROBE}}} 0\n\
         dgx_pixels_probe_duration_seconds_bucket{{le=\"0.1\",{PROBE}}} 1\n\
         dgx_pixels_probe_duration_seconds_bucket{{le=\"+Inf\",{PROBE}}} 2\n"
        )),
        "{om}"
    );
    assert!(
        !om.contains("utilization"),
        "a NaN catalog reading is blank"
    );
    assert!(
        om.ends_with(
            "# HELP jobs Jobs.\n\
         # TYPE jobs counter\n\
         jobs_total{node=\"n1\",model=\"a\"} 3\n\
         # HELP legacy Legacy.\n\
         # TYPE legacy unknown\n\
         legacy{node=\"n1\"} 1\n\
         # HELP temp Temperature.\n\
         # TYPE temp gauge\n\
         temp{node=\"n1\",sensor=\"x\"} 21.5\n\
         # HELP free Free.\n\
         # TYPE free unknown\n\
         free{node=\"n1\"} NaN\n\
         # HELP lat Latency.\n\
         # TYPE lat histogram\n\
         lat_bucket{node=\"n1\",le=\"0.5\"} 1\n\
         lat_bucket{node=\"n1\",le=\"+Inf\"} 2\n\
         lat_sum{node=\"n1\"} 1.5\n\
         lat_count{node=\"n1\"} 2\n\
         # HELP frac Fractional counts.\n\
         # TYPE frac histogram\n\
         frac_bucket{node=\"n1\",le=\"1\"} 0.5\n\
         frac_bucket{node=\"n1\",le=\"+Inf\"} 1.5\n\
         frac_sum{node=\"n1\"} 2.25\n\
         frac_count{node=\"n1\"} 1.5\n\
         # HELP rpc RPC \\\"latency\\\".\n\
         # TYPE rpc summary\n\
         rpc{node=\"n1\",quantile=\"0.5\"} 0.1\n\
         rpc{node=\"n1\",quantile=\"0.99\"} 0.3\n\
         rpc_sum{node=\"n1\"} 12\n\
         rpc_count{node=\"n1\"} 100\n\
         # EOF\n"
        ),
        "{om}"
    );
    assert_eq!(om.matches("# EOF").count(), 1);
}

/// The two formats carry the same series: the same sample names, label sets and values, up to
/// label order and the number forms each writer picks.
#[test]
fn both_formats_carry_the_same_series() {
    fn series(exposition: &str) -> Vec<(String, Vec<String>, f64)> {
        let mut out: Vec<_> = exposition
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (head, value) = l.rsplit_once(' ').unwrap();
                let (name, labels) = head.split_once('{').unwrap_or((head, "}"));
                let mut labels: Vec<String> = labels
                    .trim_end_matches('}')
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        // `le` as a number: prometheus-client writes its own form of the bound.
                        match p.strip_prefix("le=\"") {
                            Some(le) => {
                                format!("le={}", le.trim_end_matches('"').parse::<f64>().unwrap())
                            }
                            None => p.to_string(),
                        }
                    })
                    .collect();
                labels.sort();
                let value = value.parse::<f64>().unwrap();
                (name.to_string(), labels, value)
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }
    let (text, om) = (
        series(&exposition(Format::Text)),
        series(&exposition(Format::OpenMetrics)),
    );
    assert_eq!(text.len(), om.len());
    for (t, o) in text.iter().zip(&om) {
        assert_eq!((&t.0, &t.1), (&o.0, &o.1));
        assert!(t.2 == o.2 || (t.2.is_nan() && o.2.is_nan()), "{t:?} {o:?}");
    }
}
