//! Encoders: OpenMetrics 1.0 through prometheus-client, and the classic Prometheus text format
//! 0.0.4 (which prometheus-client does not write), both from the same grouped samples.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit as PcUnit};

use crate::attribution::{self, Join};
use crate::catalog::{Kind, Metric, MetricDef};
use crate::histogram;
use crate::snapshot::{Sample, Snapshot};
use crate::syntax::{push_escaped, push_value};

/// Content type of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic text exposition.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Exposition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The HTTP content type of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// Options applied to every series at encoding time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EncodeOptions {
    /// Labels added to every series, e.g. `node` when a node name is configured.
    pub const_labels: Vec<(String, String)>,
}

/// Everything one exposition is made of: static samples (build info) and the latest snapshot
/// of each source. Every field is shared, so a clone costs a few reference counts.
#[derive(Debug, Clone)]
pub struct ExpositionInput {
    /// Samples that never change (e.g. `dgx_pixels_exporter_build_info`).
    pub statics: Arc<Vec<Sample>>,
    /// The latest snapshot of each source.
    pub snapshots: Vec<Arc<Snapshot>>,
    /// Labels and other options.
    pub options: Arc<EncodeOptions>,
}

/// Extra (attribution) labels of one sample.
type Extra<'a> = Option<&'a attribution::Extra>;

/// Samples grouped into families, in catalog order.
struct Families<'a> {
    groups: Vec<(&'static MetricDef, Vec<(&'a Sample, Extra<'a>)>)>,
}

fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The `dgx_pixels_source_*` self-metrics of every source.
fn health_samples(snapshots: &[Arc<Snapshot>]) -> Vec<Sample> {
    let mut out = Vec::with_capacity(snapshots.len() * 5);
    for snap in snapshots {
        let h = &snap.health;
        let src = [snap.source.as_str()];
        out.push(Sample::new(
            Metric::SourceUp,
            src,
            if h.up { 1.0 } else { 0.0 },
        ));
        if let Some(d) = h.last_poll_duration {
            out.push(Sample::new(
                Metric::SourcePollDuration,
                src,
                d.as_secs_f64(),
            ));
        }
        if let Some(t) = h.last_success {
            out.push(Sample::new(Metric::SourceLastSuccess, src, unix_seconds(t)));
        }
        out.push(Sample::new(Metric::SourcePolls, src, h.polls as f64));
        out.push(Sample::new(Metric::SourcePollErrors, src, h.errors as f64));
    }
    out
}

fn group<'a>(input: &'a ExpositionInput, health: &'a [Sample], join: &'a Join) -> Families<'a> {
    let mut all: Vec<&Sample> = input
        .statics
        .iter()
        .chain(health.iter())
        .chain(join.info.iter())
        .collect();
    for output in input.snapshots.iter().filter_map(|s| s.served()) {
        all.extend(output.samples.iter());
    }
    all.retain(|s| s.is_well_formed() && !s.value.is_nan());
    // Stable: series keep their source order within a family.
    all.sort_by_key(|s| s.metric);
    let mut groups: Vec<(&'static MetricDef, Vec<(&Sample, Extra<'a>)>)> = Vec::new();
    for s in all {
        let extra = join.labels_for(s);
        match groups.last_mut() {
            Some((def, v)) if def.metric == s.metric => v.push((s, extra)),
            _ => groups.push((s.metric.def(), vec![(s, extra)])),
        }
    }
    Families { groups }
}

/// Groups the input into families and hands them to `write`.
fn with_families<T>(input: &ExpositionInput, write: impl FnOnce(&Families<'_>) -> T) -> T {
    let health = health_samples(&input.snapshots);
    let join = Join::build(&input.snapshots);
    write(&group(input, &health, &join))
}

/// Bytes to reserve for the exposition of `input`: about what a series and a family header
/// take, so the output is not copied while it grows.
fn capacity(input: &ExpositionInput) -> usize {
    let series: usize = input.statics.len()
        + input
            .snapshots
            .iter()
            .map(|s| s.output.samples.len() + 5)
            .sum::<usize>();
    series * 160 + 64 * 256
}

/// Encodes the input in the given format.
pub fn encode(input: &ExpositionInput, format: Format) -> String {
    match format {
        Format::Text => with_families(input, |f| encode_text(f, &input.options, capacity(input))),
        Format::OpenMetrics => encode_openmetrics(input),
    }
}

// ---- classic text format ----

fn encode_text(families: &Families<'_>, options: &EncodeOptions, capacity: usize) -> String {
    let mut out = String::with_capacity(capacity);
    for (def, samples) in &families.groups {
        out.push_str("# HELP ");
        out.push_str(def.name);
        out.push(' ');
        push_escaped(&mut out, def.help, false);
        out.push_str("\n# TYPE ");
        out.push_str(def.name);
        out.push(' ');
        out.push_str(def.kind.as_str());
        out.push('\n');
        if def.kind == Kind::Histogram {
            // Histograms are not joined (their extra bound label would need its own rules).
            let plain: Vec<&Sample> = samples.iter().map(|(s, _)| *s).collect();
            histogram::write_text(&mut out, def, &plain, &options.const_labels, push_escaped);
            continue;
        }
        for (s, extra) in samples {
            out.push_str(def.name);
            let pairs = options
                .const_labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(
                    def.labels
                        .iter()
                        .copied()
                        .zip(s.labels.iter().map(String::as_str)),
                )
                .chain(
                    extra
                        .iter()
                        .flat_map(|e| e.iter())
                        .map(|(k, v)| (*k, v.as_str())),
                );
            let mut first = true;
            for (k, v) in pairs {
                out.push(if first { '{' } else { ',' });
                first = false;
                out.push_str(k);
                out.push_str("=\"");
                push_escaped(&mut out, v, true);
                out.push('"');
            }
            if !first {
                out.push('}');
            }
            out.push(' ');
            push_value(&mut out, s.value);
            out.push('\n');
        }
    }
    out
}

// ---- OpenMetrics through prometheus-client ----

struct Labels<'a> {
    consts: &'a [(String, String)],
    names: &'static [&'static str],
    values: &'a [String],
    extra: Option<&'a attribution::Extra>,
}

impl EncodeLabelSet for Labels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let consts = self.consts.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let own = self
            .names
            .iter()
            .copied()
            .zip(self.values.iter().map(String::as_str));
        let extra = self
            .extra
            .iter()
            .flat_map(|e| e.iter())
            .map(|(k, v)| (*k, v.as_str()));
        for (k, v) in consts.chain(own).chain(extra) {
            let mut label = encoder.encode_label();
            let mut key = label.encode_label_key()?;
            key.write_str(k)?;
            let mut value = key.encode_label_value()?;
            value.write_str(v)?;
            value.finish()?;
        }
        Ok(())
    }
}

fn pc_unit(def: &MetricDef) -> Option<PcUnit> {
    def.unit.suffix().map(|u| PcUnit::Other(u.to_string()))
}

/// A collector over one exposition's input. prometheus-client's collectors must be `'static`:
/// it holds the input's shared parts (no sample is copied) and groups them while encoding.
#[derive(Debug)]
struct FamiliesCollector {
    input: ExpositionInput,
}

impl Collector for FamiliesCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        with_families(&self.input, |families| {
            write_families(families, &self.input.options.const_labels, encoder)
        })
    }
}

fn write_families(
    families: &Families<'_>,
    consts: &[(String, String)],
    mut encoder: DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    for (def, samples) in &families.groups {
        let unit = pc_unit(def);
        let kind = match def.kind {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
            Kind::Histogram => MetricType::Histogram,
        };
        let mut family =
            encoder.encode_descriptor(def.openmetrics_base, def.help, unit.as_ref(), kind)?;
        if def.kind == Kind::Histogram {
            let refs: Vec<&Sample> = samples.iter().map(|(s, _)| *s).collect();
            for h in histogram::series(def, &refs) {
                let labels = Labels {
                    consts,
                    names: def.labels,
                    values: h.labels,
                    extra: None,
                };
                ConstHistogram(&h).encode(family.encode_family(&labels)?)?;
            }
            continue;
        }
        for (s, extra) in samples {
            let labels = Labels {
                consts,
                names: def.labels,
                values: &s.labels,
                extra: *extra,
            };
            let series = family.encode_family(&labels)?;
            match def.kind {
                Kind::Gauge => ConstGauge::new(s.value).encode(series)?,
                Kind::Counter => ConstCounter::new(s.value).encode(series)?,
                // Handled above.
                Kind::Histogram => {}
            }
        }
    }
    Ok(())
}

/// A histogram series with fixed values, for prometheus-client's encoder.
struct ConstHistogram<'a, 'b>(&'a histogram::Series<'b>);

impl EncodeMetric for ConstHistogram<'_, '_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // prometheus-client wants per-bucket counts; the samples hold cumulative ones.
        let mut previous = 0;
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets
            .iter()
            .map(|(_, bound, cumulative)| {
                let own = cumulative.saturating_sub(previous);
                previous = *cumulative;
                (*bound, own)
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum, self.0.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn encode_openmetrics(input: &ExpositionInput) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(FamiliesCollector {
        input: input.clone(),
    }));
    let mut out = String::with_capacity(capacity(input));
    // Writing into a String cannot fail; an error here would be a bug in the encoder, and an
    // empty exposition is still better than a panic on the serving path.
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SourceHealth;
    use std::time::{Duration, SystemTime};

    fn input(up: bool) -> ExpositionInput {
        let samples = vec![
            Sample::new(Metric::GpuPower, ["0", "GPU-a"], 312.5),
            Sample::new(Metric::GpuEnergy, ["0", "GPU-a"], 1234.0),
            Sample::new(Metric::GpuPower, ["1", "GPU-b"], 80.0),
            Sample::new(
                Metric::GpuInfo,
                [
                    "0",
                    "GPU-a",
                    "H100 \"SXM\"\n",
                    "s",
                    "b",
                    "v",
                    "d",
                    "12.4",
                    "0",
                    "nvidia0",
                ],
                1.0,
            ),
            Sample::new(Metric::GpuTemperature, ["0", "GPU-a", "gpu"], f64::INFINITY),
            // Malformed (wrong label count) and NaN samples are never served.
            Sample::new(Metric::GpuUp, ["0"], 1.0),
            Sample::new(Metric::GpuUtilization, ["0", "GPU-a"], f64::NAN),
        ];
        ExpositionInput {
            statics: Arc::new(vec![Sample::new(
                Metric::ExporterBuildInfo,
                ["0.1.0", "abc", "1.95", "simulated", "dgx-h100"],
                1.0,
            )]),
            snapshots: vec![Arc::new(Snapshot {
                source: "sim".into(),
                health: SourceHealth {
                    up,
                    last_poll_duration: Some(Duration::from_millis(3)),
                    last_success: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
                    polls: 7,
                    errors: 1,
                },
                output: samples.into(),
            })],
            options: Arc::new(EncodeOptions {
                const_labels: vec![("node".into(), "dgx-01".into())],
            }),
        }
    }

    #[test]
    fn text_format_groups_families_and_escapes() {
        let text = encode(&input(true), Format::Text);
        let expected_power = "# HELP dgx_pixels_gpu_power_watts Power draw of the GPU board.\n\
            # TYPE dgx_pixels_gpu_power_watts gauge\n\
            dgx_pixels_gpu_power_watts{node=\"dgx-01\",gpu=\"0\",uuid=\"GPU-a\"} 312.5\n\
            dgx_pixels_gpu_power_watts{node=\"dgx-01\",gpu=\"1\",uuid=\"GPU-b\"} 80\n";
        assert!(text.contains(expected_power), "{text}");
        assert!(text.contains("# TYPE dgx_pixels_gpu_energy_joules_total counter\n"));
        assert!(text.contains(
            "dgx_pixels_gpu_energy_joules_total{node=\"dgx-01\",gpu=\"0\",uuid=\"GPU-a\"} 1234\n"
        ));
        assert!(text.contains("model=\"H100 \\\"SXM\\\"\\n\""), "{text}");
        assert!(text.contains("sensor=\"gpu\"} +Inf\n"));
        assert!(text.contains("dgx_pixels_source_up{node=\"dgx-01\",source=\"sim\"} 1\n"));
        assert!(text.contains("dgx_pixels_source_last_success_timestamp_seconds{node=\"dgx-01\",source=\"sim\"} 1700000000\n"));
        assert!(text.contains(
            "dgx_pixels_source_poll_duration_seconds{node=\"dgx-01\",source=\"sim\"} 0.003\n"
        ));
        assert!(
            !text.contains("dgx_pixels_gpu_up"),
            "malformed sample leaked"
        );
        assert!(!text.contains("NaN"));
        // Each family's TYPE line appears once.
        assert_eq!(
            text.matches("# TYPE dgx_pixels_gpu_power_watts ").count(),
            1
        );
    }

    #[test]
    fn openmetrics_has_units_total_and_eof() {
        let om = encode(&input(true), Format::OpenMetrics);
        assert!(om.contains("# TYPE dgx_pixels_gpu_energy_joules counter\n# UNIT dgx_pixels_gpu_energy_joules joules\n"), "{om}");
        assert!(om.contains(
            "dgx_pixels_gpu_energy_joules_total{node=\"dgx-01\",gpu=\"0\",uuid=\"GPU-a\"} 1234"
        ));
        assert!(om.contains("# UNIT dgx_pixels_gpu_power_watts watts\n"));
        assert!(om.contains("model=\"H100 \\\"SXM\\\"\\n\""));
        assert!(om.ends_with("# EOF\n"));
    }

    /// Issue 15: `{}` wrote 1e-300 as a 302-character decimal (`syntax` tests the value writer).
    #[test]
    fn values_are_written_short_in_both_formats_issue_15() {
        // prometheus-client (the catalog's OpenMetrics samples) writes shortest forms too.
        let mut i = input(true);
        let tiny = Sample::new(Metric::GpuPower, ["2", "GPU-c"], 1e-300);
        Arc::make_mut(&mut i.snapshots[0]).output.samples.push(tiny);
        let om = encode(&i, Format::OpenMetrics);
        assert!(om.contains("uuid=\"GPU-c\"} 1e-300\n"), "{om}");
        let text = encode(&i, Format::Text);
        assert!(text.contains("uuid=\"GPU-c\"} 1e-300\n"), "{text}");
    }

    #[test]
    fn a_down_source_serves_only_its_health() {
        let text = encode(&input(false), Format::Text);
        assert!(text.contains("dgx_pixels_source_up{node=\"dgx-01\",source=\"sim\"} 0\n"));
        assert!(!text.contains("dgx_pixels_gpu_power_watts{"));
        assert!(text.contains("dgx_pixels_exporter_build_info{"));
    }

    #[test]
    fn both_formats_carry_the_same_series() {
        fn series(text: &str) -> Vec<String> {
            let mut v: Vec<String> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| {
                    l.rsplit_once(' ')
                        .map(|(k, _)| k.to_string())
                        .unwrap_or_default()
                })
                .collect();
            v.sort();
            v
        }
        let i = input(true);
        assert_eq!(
            series(&encode(&i, Format::Text)),
            series(&encode(&i, Format::OpenMetrics))
        );
    }
}
