//! The fast power samples' series (docs/power.md).

use std::sync::Arc;

use super::{PowerSamples, NO_LABELS, POWER_BUCKETS_WATTS};
use crate::catalog::Metric;
use crate::device::DeviceKey;
use crate::histogram::HistogramPoint;
use crate::snapshot::Sample;

/// The fast power samples of one GPU: which reading they are, the histogram (8 bounds, `+Inf`,
/// sum and count, one typed [`HistogramPoint`]) and the window's peak and minimum: 14 series.
pub(super) fn push_power_samples(key: &Arc<DeviceKey>, p: &PowerSamples, out: &mut Vec<Sample>) {
    out.push(Sample::of(
        key,
        Metric::GpuPowerSampleInfo,
        [p.reading.as_str()],
        1.0,
    ));
    out.push(Sample::histogram(
        Some(key),
        Metric::GpuPowerSample,
        NO_LABELS,
        HistogramPoint::from_counts(&POWER_BUCKETS_WATTS, &p.counts, p.sum_watts),
    ));
    for (metric, v) in [
        (Metric::GpuPowerSamplePeak, p.peak_watts),
        (Metric::GpuPowerSampleMin, p.min_watts),
    ] {
        if let Some(v) = v {
            out.push(Sample::of(key, metric, NO_LABELS, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{push_gpu_samples, GpuIdentity, GpuReadout};
    use super::*;
    use crate::labels::PowerReading;

    fn readout(up: bool) -> GpuReadout {
        GpuReadout {
            up,
            power_watts: Some(520.0),
            power_samples: Some(PowerSamples {
                reading: PowerReading::Instant,
                counts: [0, 0, 4, 0, 6, 0, 0, 0, 0],
                sum_watts: 5200.0,
                peak_watts: Some(697.0),
                min_watts: Some(280.0),
            }),
            ..Default::default()
        }
    }

    type Row = (String, Vec<String>, f64, Option<HistogramPoint>);

    fn series(r: &GpuReadout) -> Vec<Row> {
        let id = GpuIdentity {
            uuid: "GPU-p".into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        push_gpu_samples(&id, r, &mut out);
        out.iter()
            .filter(|s| {
                s.metric
                    .def()
                    .name
                    .starts_with("dgx_pixels_gpu_power_sample")
            })
            .map(|s| {
                let name = s.metric.def().name.to_string();
                (
                    name,
                    s.labels.clone(),
                    s.value,
                    s.histogram.as_deref().cloned(),
                )
            })
            .collect()
    }

    #[test]
    fn power_samples_are_a_watt_histogram_a_peak_a_minimum_and_the_reading() {
        let got = series(&readout(true));
        let gauge = |name: &str, v: f64| (name.to_string(), vec![], v, None);
        let buckets = [
            100.0,
            250.0,
            400.0,
            550.0,
            700.0,
            850.0,
            1000.0,
            1200.0,
            f64::INFINITY,
        ]
        .into_iter()
        .zip([0, 0, 4, 4, 10, 10, 10, 10, 10])
        .collect();
        let point = HistogramPoint {
            buckets,
            sum: 5200.0,
            count: 10,
        };
        assert_eq!(
            got,
            [
                (
                    "dgx_pixels_gpu_power_sample_info".to_string(),
                    vec!["instant".to_string()],
                    1.0,
                    None
                ),
                (
                    "dgx_pixels_gpu_power_sample_watts".to_string(),
                    vec![],
                    10.0,
                    Some(point)
                ),
                gauge("dgx_pixels_gpu_power_sample_peak_watts", 697.0),
                gauge("dgx_pixels_gpu_power_sample_min_watts", 280.0),
            ]
        );
    }

    #[test]
    fn a_gpu_that_is_down_serves_no_power_samples() {
        assert!(series(&readout(false)).is_empty());
    }
}
