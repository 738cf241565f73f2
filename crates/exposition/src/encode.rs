//! Encoding an exposition: the served snapshots become one family model (`family.rs`), which
//! the one writer (`writer.rs`) writes as OpenMetrics 1.0 or the classic text format 0.0.4.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use crate::family::{self, Exposition};
use crate::writer;
use dgx_pixels_metrics::catalog::{serves, Detail, Metric};
use dgx_pixels_metrics::snapshot::{Sample, Snapshot};
use dgx_pixels_metrics::view::DeviceView;

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
    /// The series budget's profile (`--metrics.detail`): what the default one trims is listed
    /// in `dgx_pixels_metrics::catalog::POLICIES`.
    pub detail: Detail,
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

/// Builds the families of `input` (catalog ones in catalog order, then the external ones by
/// source), joined with the holders of `view` (the device view of the same snapshots), and
/// hands them to `write`. Only served snapshots count (see [`Snapshot::served`]).
pub(crate) fn with_exposition<T>(
    input: &ExpositionInput,
    view: &DeviceView,
    write: impl FnOnce(&Exposition<'_>) -> T,
) -> T {
    let health = health_samples(&input.snapshots);
    let join = view.join();
    let served: Vec<_> = input.snapshots.iter().filter_map(|s| s.served()).collect();
    let count = served.iter().map(|o| o.samples.len()).sum::<usize>();
    let mut samples: Vec<&Sample> =
        Vec::with_capacity(input.statics.len() + health.len() + join.info.len() + count);
    samples.extend(input.statics.iter().chain(&health).chain(&join.info));
    for output in &served {
        samples.extend(output.samples.iter());
    }
    let detail = input.options.detail;
    samples.retain(|s| serves(detail, s.metric, |name| s.label(name), s.value));
    let consts = &input.options.const_labels;
    let mut families = Vec::new();
    family::catalog(samples, join, &mut families);
    let catalog_end = families.len();
    family::external(
        served.iter().map(|o| &o.external[..]),
        consts,
        &mut families,
    );
    // The self-count is served where the profile serves it (not at lean), after the other
    // catalog families, before the external ones.
    let series_counts = if serves(detail, Metric::ExporterSeries, |_| None, 0.0) {
        family::series_counts(&families)
    } else {
        Vec::new()
    };
    let mut counts = Vec::with_capacity(1);
    family::catalog(series_counts.iter().collect(), join, &mut counts);
    families.splice(catalog_end..catalog_end, counts);
    write(&Exposition { consts, families })
}

/// Bytes to reserve for the exposition of `input`: about what a series and a family header
/// take, so the output is not copied while it grows.
fn capacity(input: &ExpositionInput) -> usize {
    let series: usize = input.statics.len()
        + input
            .snapshots
            .iter()
            .map(|s| {
                let external = s.output.external.iter().map(|f| f.samples.len());
                s.output.samples.len() + external.sum::<usize>() + 5
            })
            .sum::<usize>();
    series * 160 + 64 * 256
}

/// Encodes the input in the given format (building the device view of its snapshots; a
/// generation encodes with the one it keeps, see [`encode_with`]).
pub fn encode(input: &ExpositionInput, format: Format) -> String {
    encode_with(
        input,
        &Arc::new(DeviceView::build(&input.snapshots)),
        format,
    )
}

/// Encodes the input in the given format, with `view`: the device view of `input.snapshots`,
/// whose attribution join labels the device series.
pub fn encode_with(input: &ExpositionInput, view: &Arc<DeviceView>, format: Format) -> String {
    with_exposition(input, view, |exposition| {
        let mut out = String::with_capacity(capacity(input));
        writer::write(&mut out, exposition, format);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::snapshot::SourceHealth;
    use std::time::{Duration, SystemTime};

    fn input(up: bool) -> ExpositionInput {
        let samples = vec![
            Sample::for_gpu(0, "GPU-a", Metric::GpuPower, &[], 312.5),
            Sample::for_gpu(0, "GPU-a", Metric::GpuEnergy, &[], 1234.0),
            Sample::for_gpu(1, "GPU-b", Metric::GpuPower, &[], 80.0),
            Sample::for_gpu(
                0,
                "GPU-a",
                Metric::GpuInfo,
                &["H100 \"SXM\"\n", "s", "b", "v", "d", "12.4", "0", "nvidia0"],
                1.0,
            ),
            Sample::for_gpu(0, "GPU-a", Metric::GpuTemperature, &["gpu"], f64::INFINITY),
            // Malformed (wrong label count) and NaN samples are never served.
            Sample::new(Metric::GpuUp, ["0"], 1.0),
            Sample::for_gpu(0, "GPU-a", Metric::GpuUtilization, &[], f64::NAN),
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
                    last_error: None,
                },
                output: samples.into(),
            })],
            options: Arc::new(EncodeOptions {
                const_labels: vec![("node".into(), "dgx-01".into())],
                ..Default::default()
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
        // The prometheus-client spelling (the catalog's OpenMetrics samples) is short too.
        let mut i = input(true);
        let tiny = Sample::for_gpu(2, "GPU-c", Metric::GpuPower, &[], 1e-300);
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
