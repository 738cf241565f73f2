//! External (textfile) families through both writers: names, types, help escaping, values,
//! a down source, duplicate names across sources and constant labels.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;

use dgx_pixels_exposition::encode::{encode, EncodeOptions, ExpositionInput, Format};
use dgx_pixels_metrics::{
    ExternalFamilies, ExternalFamily, ExternalKind, ExternalSample, PollOutput, Snapshot,
    SourceHealth,
};

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> ExternalSample {
    ExternalSample::new(name, labels.iter().copied(), value)
}

fn families() -> ExternalFamilies {
    Arc::new(vec![
        ExternalFamily {
            name: "jobs_done_total".into(),
            help: "Jobs \"done\"\\n".into(),
            kind: ExternalKind::Counter,
            samples: vec![sample("jobs_done_total", &[("model", "a\"b")], 3.0)],
        },
        ExternalFamily {
            name: "legacy_count".into(),
            help: "A counter without _total.".into(),
            kind: ExternalKind::Counter,
            samples: vec![sample("legacy_count", &[], 1.0)],
        },
        ExternalFamily {
            name: "lat_seconds".into(),
            help: "Latency.".into(),
            kind: ExternalKind::Histogram,
            samples: vec![
                sample("lat_seconds_bucket", &[("le", "0.2")], 4.0),
                sample("lat_seconds_bucket", &[("le", "+Inf")], 5.0),
                sample("lat_seconds_sum", &[], 0.9),
                sample("lat_seconds_count", &[], 5.0),
            ],
        },
        ExternalFamily {
            name: "free".into(),
            help: "Untyped.".into(),
            kind: ExternalKind::Untyped,
            samples: vec![sample("free", &[], f64::NAN)],
        },
    ])
}

fn snapshot(source: &str, up: bool, external: ExternalFamilies) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        source: source.into(),
        health: SourceHealth {
            up,
            ..Default::default()
        },
        output: PollOutput {
            external,
            ..Default::default()
        },
    })
}

/// The exposition of `snapshots` (their health series included).
fn exposition(snapshots: Vec<Arc<Snapshot>>, consts: &[(&str, &str)], f: Format) -> String {
    let const_labels = consts
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let input = ExpositionInput {
        statics: Arc::new(vec![]),
        snapshots,
        options: Arc::new(EncodeOptions {
            const_labels,
            ..Default::default()
        }),
    };
    encode(&input, f)
}

#[test]
fn text_keeps_names_and_types() {
    let snaps = vec![snapshot("textfile", true, families())];
    let out = exposition(snaps, &[("node", "n1")], Format::Text);
    assert!(out.contains("\n# HELP jobs_done_total Jobs \"done\"\\\\n\n# TYPE jobs_done_total counter\njobs_done_total{node=\"n1\",model=\"a\\\"b\"} 3\n"), "{out}");
    assert!(out.contains("# TYPE legacy_count counter\nlegacy_count{node=\"n1\"} 1\n"));
    assert!(out.contains("# TYPE lat_seconds histogram\nlat_seconds_bucket{node=\"n1\",le=\"0.2\"} 4\nlat_seconds_bucket{node=\"n1\",le=\"+Inf\"} 5\nlat_seconds_sum{node=\"n1\"} 0.9\nlat_seconds_count{node=\"n1\"} 5\n"));
    assert!(
        out.ends_with("# TYPE free untyped\nfree{node=\"n1\"} NaN\n"),
        "{out}"
    );
    // After the catalog's families.
    assert!(out.find("dgx_pixels_source_up") < out.find("jobs_done_total"));
}

/// prometheus-client writes HELP before TYPE; an external histogram comes from the small writer
/// (its bounds as written), after prometheus-client's families.
#[test]
fn openmetrics_names_counter_families_without_total_and_keeps_eof_last() {
    let snaps = vec![snapshot("textfile", true, families())];
    let out = exposition(snaps, &[], Format::OpenMetrics);
    assert!(out.contains("# HELP jobs_done Jobs \\\"done\\\"\\\\n\n# TYPE jobs_done counter\njobs_done_total{model=\"a\\\"b\"} 3\n"), "{out}");
    assert!(out.contains("# TYPE legacy_count unknown\nlegacy_count 1\n"));
    assert!(out.contains("# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.2\"} 4\nlat_seconds_bucket{le=\"+Inf\"} 5\nlat_seconds_sum 0.9\nlat_seconds_count 5\n"), "{out}");
    assert!(out.contains("# TYPE free unknown\n"));
    assert!(out.contains("free NaN\n"));
    // The small writer's families (here the histogram, its bounds kept as written) come last.
    assert!(out.ends_with("lat_seconds_count 5\n# EOF\n"), "{out}");
    assert_eq!(out.matches("# EOF").count(), 1);
}

#[test]
fn a_down_source_serves_no_external_families_and_duplicates_are_dropped() {
    let down = exposition(
        vec![snapshot("textfile", false, families())],
        &[],
        Format::Text,
    );
    assert!(!down.contains("jobs_done"), "{down}");
    let twice = exposition(
        vec![
            snapshot("a", true, families()),
            snapshot("b", true, families()),
        ],
        &[],
        Format::Text,
    );
    assert_eq!(twice.matches("# TYPE lat_seconds ").count(), 1);
}

/// Issue 15: a textfile's 1e-300 was written as a 302-character decimal.
#[test]
fn values_are_written_short_in_both_formats_issue_15() {
    let f = Arc::new(vec![ExternalFamily {
        name: "tiny".into(),
        help: "h".into(),
        kind: ExternalKind::Gauge,
        samples: vec![
            sample("tiny", &[], 1e-300),
            sample("tiny", &[("a", "b")], f64::NAN),
        ],
    }]);
    for format in [Format::Text, Format::OpenMetrics] {
        let out = exposition(vec![snapshot("t", true, f.clone())], &[], format);
        assert!(out.contains("\ntiny 1e-300\ntiny{a=\"b\"} NaN\n"), "{out}");
    }
}

#[test]
fn samples_carrying_a_constant_label_are_skipped() {
    let f = Arc::new(vec![ExternalFamily {
        name: "g".into(),
        help: "h".into(),
        kind: ExternalKind::Gauge,
        samples: vec![
            sample("g", &[("node", "other")], 1.0),
            sample("g", &[("a", "b")], 2.0),
        ],
    }]);
    for format in [Format::Text, Format::OpenMetrics] {
        let out = exposition(
            vec![snapshot("t", true, f.clone())],
            &[("node", "n")],
            format,
        );
        assert!(!out.contains("other"));
        assert!(out.contains("g{node=\"n\",a=\"b\"} 2\n"), "{out}");
    }
}

/// Review of issue 16: an external histogram's bounds are served as its author wrote them in
/// both formats (prometheus-client would write `le="1.0"`, another series to a Prometheus before
/// 3.0 and to a `{le="1"}` selector).
#[test]
fn external_bucket_bounds_keep_their_spelling_in_openmetrics() {
    let f = Arc::new(vec![ExternalFamily {
        name: "wait_seconds".into(),
        help: "h".into(),
        kind: ExternalKind::Histogram,
        samples: vec![
            sample("wait_seconds_bucket", &[("le", "1")], 2.0),
            sample("wait_seconds_bucket", &[("le", "10")], 3.0),
            sample("wait_seconds_bucket", &[("le", "+Inf")], 3.0),
            sample("wait_seconds_sum", &[], 7.5),
            sample("wait_seconds_count", &[], 3.0),
        ],
    }]);
    for format in [Format::Text, Format::OpenMetrics] {
        let out = exposition(vec![snapshot("t", true, f.clone())], &[], format);
        assert!(out.contains("wait_seconds_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("wait_seconds_bucket{le=\"10\"} 3\n"), "{out}");
        assert!(!out.contains("le=\"1.0\""), "{out}");
    }
}

/// OpenMetrics allows `_count` only beside `_sum`: a summary without a sum serves its
/// quantiles alone there (the classic format keeps the count).
#[test]
fn openmetrics_writes_no_count_without_a_sum() {
    let f = Arc::new(vec![ExternalFamily {
        name: "rpc_seconds".into(),
        help: "h".into(),
        kind: ExternalKind::Summary,
        samples: vec![
            sample("rpc_seconds", &[("quantile", "0.5")], 0.2),
            sample("rpc_seconds_count", &[], 4.0),
        ],
    }]);
    let om = exposition(
        vec![snapshot("t", true, f.clone())],
        &[],
        Format::OpenMetrics,
    );
    assert!(om.contains("rpc_seconds{quantile=\"0.5\"} 0.2\n"), "{om}");
    assert!(!om.contains("rpc_seconds_count"), "{om}");
    let text = exposition(vec![snapshot("t", true, f)], &[], Format::Text);
    assert!(text.contains("rpc_seconds_count 4\n"), "{text}");
}
