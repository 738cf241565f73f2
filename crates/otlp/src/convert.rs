//! One generation's family model (what `/metrics` writes) as one OTLP
//! `ExportMetricsServiceRequest`. The mapping, documented in docs/otlp.md:
//!
//! - gauges and untyped families → Gauge; counters → Sum (monotonic, cumulative, start time the
//!   process' start); histograms → Histogram (cumulative, explicit bounds, per-bucket counts);
//!   summaries → Summary;
//! - the name is the classic one, a counter's without `_total` (what OpenMetrics calls the
//!   family; Prometheus' OTLP receiver appends `_total` to a monotonic sum);
//! - the unit in UCUM (`seconds` → `s`, ...); help as description;
//! - every label, the constant ones first, as a string attribute;
//! - where the OpenTelemetry hardware conventions name a GPU metric, that metric as well
//!   ([`HW_METRICS`]).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::number_data_point;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, summary_data_point::ValueAtQuantile, AggregationTemporality, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use dgx_pixels_exposition::family::{Exposition, Family, Point, Series, Type};

/// The instrumentation scope the points are reported under.
pub const SCOPE: &str = "dgx-pixels-exporter";

/// The times of one push, in nanoseconds since the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    /// The process' start: every cumulative point's start time.
    pub start_ns: u64,
    /// The push: every point's time.
    pub now_ns: u64,
}

/// A catalog family also sent under its OpenTelemetry hardware semantic-conventions name
/// (`hw.*`, status Development: docs/otlp.md): our name, theirs, their unit, whether it is an
/// UpDownCounter (a non-monotonic Sum) rather than the type ours has.
pub struct HwMetric {
    /// Our family name (classic).
    pub ours: &'static str,
    /// The convention's metric name.
    pub otel: &'static str,
    /// The convention's unit.
    pub unit: &'static str,
    /// The convention's instrument is an UpDownCounter.
    pub up_down: bool,
}

/// The families sent under a `hw.*` name as well, with `hw.id` (the GPU's uuid) and
/// `hw.type = "gpu"`; whole GPUs only (a MIG instance's series are not).
pub const HW_METRICS: &[HwMetric] = &[
    HwMetric {
        ours: "dgx_pixels_gpu_utilization_ratio",
        otel: "hw.gpu.utilization",
        unit: "1",
        up_down: false,
    },
    HwMetric {
        ours: "dgx_pixels_gpu_memory_used_bytes",
        otel: "hw.gpu.memory.usage",
        unit: "By",
        up_down: true,
    },
    HwMetric {
        ours: "dgx_pixels_gpu_memory_total_bytes",
        otel: "hw.gpu.memory.limit",
        unit: "By",
        up_down: true,
    },
    HwMetric {
        ours: "dgx_pixels_gpu_power_watts",
        otel: "hw.power",
        unit: "W",
        up_down: false,
    },
    HwMetric {
        ours: "dgx_pixels_gpu_energy_joules_total",
        otel: "hw.energy",
        unit: "J",
        up_down: false,
    },
];

/// The UCUM unit of a family's unit suffix, as OpenTelemetry spells units.
pub fn ucum(suffix: Option<&str>) -> &'static str {
    match suffix {
        Some("seconds") => "s",
        Some("bytes") => "By",
        Some("bytes_per_second") => "By/s",
        Some("joules") => "J",
        Some("watts") => "W",
        Some("hertz") => "Hz",
        Some("celsius") => "Cel",
        Some("ratio") => "1",
        Some("flops") => "{flop}/s",
        // An external family's unit we do not know: left unset rather than guessed.
        _ => "",
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// The attributes of a series: the constant labels, then its own.
fn attributes(consts: &[(String, String)], series: &Series<'_>) -> Vec<KeyValue> {
    consts
        .iter()
        .map(|(k, v)| string(k, v))
        .chain(series.labels.pairs().map(|(k, v)| string(k, v)))
        .collect()
}

fn number(attributes: Vec<KeyValue>, value: f64, start: u64, t: &Times) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: t.now_ns,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

/// The OTLP data of one family, or `None` if none of its series can be sent.
fn data(f: &Family<'_>, consts: &[(String, String)], t: &Times) -> Option<metric::Data> {
    let cumulative = AggregationTemporality::Cumulative as i32;
    let values = |start: u64| -> Vec<NumberDataPoint> {
        f.series
            .iter()
            .filter_map(|s| match s.point {
                Point::Value(v) => Some(number(attributes(consts, s), v, start, t)),
                _ => None,
            })
            .collect()
    };
    let data = match f.kind {
        Type::Gauge | Type::Unknown => metric::Data::Gauge(Gauge {
            data_points: values(0),
        }),
        Type::Counter => metric::Data::Sum(Sum {
            data_points: values(t.start_ns),
            aggregation_temporality: cumulative,
            is_monotonic: true,
        }),
        Type::Histogram => metric::Data::Histogram(Histogram {
            data_points: f
                .series
                .iter()
                .filter_map(|s| histogram(consts, s, t))
                .collect(),
            aggregation_temporality: cumulative,
        }),
        Type::Summary => metric::Data::Summary(Summary {
            data_points: f
                .series
                .iter()
                .filter_map(|s| summary(consts, s, t))
                .collect(),
        }),
    };
    let empty = match &data {
        metric::Data::Gauge(g) => g.data_points.is_empty(),
        metric::Data::Sum(s) => s.data_points.is_empty(),
        metric::Data::Histogram(h) => h.data_points.is_empty(),
        metric::Data::Summary(s) => s.data_points.is_empty(),
        metric::Data::ExponentialHistogram(_) => true,
    };
    (!empty).then_some(data)
}

/// A histogram point: OTLP counts per bucket, not cumulatively, and leaves `+Inf` out of the
/// bounds. A series whose cumulative counts are not whole and non-decreasing is not sent.
fn histogram(consts: &[(String, String)], s: &Series<'_>, t: &Times) -> Option<HistogramDataPoint> {
    let Point::Histogram(h) = &s.point else {
        return None;
    };
    let mut bounds = Vec::with_capacity(h.buckets.len());
    let mut counts = Vec::with_capacity(h.buckets.len());
    let mut previous = 0u64;
    for b in &h.buckets {
        if !(b.count >= 0.0 && b.count.fract() == 0.0 && b.count <= u64::MAX as f64) {
            return None;
        }
        let c = b.count as u64;
        counts.push(c.checked_sub(previous)?);
        previous = c;
        if b.bound != f64::INFINITY {
            bounds.push(b.bound);
        }
    }
    Some(HistogramDataPoint {
        attributes: attributes(consts, s),
        start_time_unix_nano: t.start_ns,
        time_unix_nano: t.now_ns,
        count: previous,
        sum: h.sum,
        bucket_counts: counts,
        explicit_bounds: bounds,
        ..Default::default()
    })
}

fn summary(consts: &[(String, String)], s: &Series<'_>, t: &Times) -> Option<SummaryDataPoint> {
    let Point::Summary(p) = &s.point else {
        return None;
    };
    let quantile_values = p
        .quantiles
        .iter()
        .filter_map(|(q, v)| {
            Some(ValueAtQuantile {
                quantile: q.parse().ok()?,
                value: *v,
            })
        })
        .collect();
    Some(SummaryDataPoint {
        attributes: attributes(consts, s),
        start_time_unix_nano: t.start_ns,
        time_unix_nano: t.now_ns,
        count: p.count.filter(|c| *c >= 0.0).map_or(0, |c| c as u64),
        sum: p.sum.unwrap_or(0.0),
        quantile_values,
        ..Default::default()
    })
}

/// The `hw.*` form of a family listed in [`HW_METRICS`]: one point per whole-GPU series.
fn hw_metric(hw: &HwMetric, f: &Family<'_>, t: &Times) -> Option<Metric> {
    let points: Vec<NumberDataPoint> = f
        .series
        .iter()
        .filter_map(|s| {
            let Point::Value(v) = s.point else {
                return None;
            };
            let mut uuid = None;
            for (k, v) in s.labels.pairs() {
                match k {
                    "uuid" => uuid = Some(v),
                    "gpu_instance" | "compute_instance" => return None,
                    _ => {}
                }
            }
            let attributes = vec![string("hw.id", uuid?), string("hw.type", "gpu")];
            let start = if f.kind == Type::Counter || hw.up_down {
                t.start_ns
            } else {
                0
            };
            Some(number(attributes, v, start, t))
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let data = if f.kind == Type::Counter || hw.up_down {
        metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: f.kind == Type::Counter,
        })
    } else {
        metric::Data::Gauge(Gauge {
            data_points: points,
        })
    };
    Some(Metric {
        name: hw.otel.to_string(),
        description: f.help.to_string(),
        unit: hw.unit.to_string(),
        data: Some(data),
        ..Default::default()
    })
}

/// The request for one generation's model.
pub fn request(
    model: &Exposition<'_>,
    resource: &[(String, String)],
    t: &Times,
) -> ExportMetricsServiceRequest {
    let mut metrics = Vec::with_capacity(model.families.len() + HW_METRICS.len());
    for f in &model.families {
        let Some(data) = data(f, model.consts, t) else {
            continue;
        };
        let name = if f.kind == Type::Counter {
            f.openmetrics_name
        } else {
            f.name
        };
        metrics.push(Metric {
            name: name.to_string(),
            description: f.help.to_string(),
            unit: ucum(f.unit).to_string(),
            data: Some(data),
            ..Default::default()
        });
        if let Some(hw) = HW_METRICS.iter().find(|h| h.ours == f.name) {
            metrics.extend(hw_metric(hw, f, t));
        }
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.iter().map(|(k, v)| string(k, v)).collect(),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
