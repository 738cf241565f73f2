//! One source per series when NVML and DCGM both run: DCGM's field choice decides which
//! catalog series it provides (a metric and its labels after `gpu` and `uuid`, e.g.
//! `gpu_clock_hertz{clock="sm"}`), and NVML's samples of those are dropped, so no series is
//! served twice while NVML keeps the ones DCGM does not read (`clock="graphics"`).
//!
//! By default DCGM provides the profiling metrics and NVML the device metrics;
//! `[dcgm] device_metrics = true` hands the device metrics DCGM can read to DCGM (the default
//! when the nvml collector is off). Without DCGM, the NVML source serves the profiling families
//! itself through GPM on Hopper and newer; the nvml collector does not read GPM when DCGM
//! provides every one of them (`dgx_pixels_nvml::collector`). The field choice is the dcgm
//! crate's (`dgx_pixels_dcgm::collector`); the plan applies it here.

use std::collections::HashSet;

use dgx_pixels_metrics::{PollError, PollOutput, Sample, Source};
pub use dgx_pixels_registry::Owned;

/// A source whose samples of some series are dropped because another source owns them.
pub struct Without {
    inner: Box<dyn Source>,
    dropped: HashSet<Owned>,
}

impl Without {
    /// `inner` without the `dropped` series.
    pub fn new(inner: Box<dyn Source>, dropped: HashSet<Owned>) -> Without {
        Without { inner, dropped }
    }

    fn owned_elsewhere(&self, s: &Sample) -> bool {
        // The device key names the GPU; the own labels name the series on it.
        self.dropped
            .iter()
            .any(|(metric, labels)| *metric == s.metric && s.labels == *labels)
    }
}

impl Source for Without {
    /// The inner output, whole, but for the catalog series owned elsewhere.
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let mut output = self.inner.poll()?;
        output.samples.retain(|s| !self.owned_elsewhere(s));
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_dcgm::collector::series_of;
    use dgx_pixels_dcgm::fields::default_fields;
    use dgx_pixels_metrics::Metric;

    #[test]
    fn series_owned_by_dcgm_never_leave_the_wrapped_source() {
        struct Two;
        impl Source for Two {
            fn poll(&mut self) -> Result<PollOutput, PollError> {
                Ok(PollOutput {
                    samples: vec![
                        Sample::for_gpu(0, "u", Metric::PcieTransmit, &[], 1.0),
                        Sample::for_gpu(0, "u", Metric::GpuPower, &[], 2.0),
                        Sample::for_gpu(0, "u", Metric::GpuClock, &["sm"], 3.0),
                        Sample::for_gpu(0, "u", Metric::GpuClock, &["graphics"], 4.0),
                    ],
                    external: std::sync::Arc::new(vec![dgx_pixels_metrics::ExternalFamily {
                        name: "dcgm_fi_dev_extra".into(),
                        help: "h".into(),
                        kind: dgx_pixels_metrics::ExternalKind::Gauge,
                        samples: vec![],
                    }]),
                    attribution: None,
                })
            }
        }
        let dcgm = [default_fields(true)[0].clone()];
        assert_eq!(series_of(&dcgm[0]), Some((Metric::GpuClock, &["sm"][..])));
        let owned = dcgm
            .iter()
            .filter_map(series_of)
            .chain([(Metric::PcieTransmit, &[][..])])
            .collect();
        let mut w = Without::new(Box::new(Two), owned);
        let output = w.poll().unwrap();
        let got: Vec<f64> = output.samples.iter().map(|s| s.value).collect();
        assert_eq!(got, [2.0, 4.0], "NVML keeps the clocks DCGM does not read");
        // The rest of the output passes whole (the old decorator lost a channel this way).
        assert_eq!(output.external.len(), 1);
    }
}
