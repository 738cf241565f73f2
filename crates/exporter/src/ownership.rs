//! One source per series when NVML and DCGM both run: DCGM's field choice decides which
//! catalog series it provides (a metric and its labels after `gpu` and `uuid`, e.g.
//! `gpu_clock_hertz{clock="sm"}`), and NVML's samples of those are dropped, so no series is
//! served twice while NVML keeps the ones DCGM does not read (`clock="graphics"`).
//!
//! By default DCGM provides the profiling metrics and NVML the device metrics;
//! `[dcgm] device_metrics = true` hands the device metrics DCGM can read to DCGM (the default
//! when the nvml collector is off). Without DCGM, the NVML source serves the profiling families
//! itself through GPM on Hopper and newer; the nvml collector does not read GPM when DCGM
//! provides every one of them (`collectors/nvml.rs`).

use std::collections::HashSet;

use dgx_pixels_dcgm::fields::{default_fields, FieldChoice, Target};
use dgx_pixels_metrics::{Metric, PollError, PollOutput, Sample, Source};

use crate::config::{self, ConfigError, Settings};

/// The DCGM fields to watch, after ownership: with `device_metrics` off, device fields with a
/// catalog row are left to NVML (named in the returned notes, logged at start).
pub fn dcgm_fields(settings: &Settings) -> Result<(Vec<FieldChoice>, Vec<String>), ConfigError> {
    let dcgm = crate::collectors::dcgm::options(settings);
    let device_metrics = dcgm
        .device_metrics
        .unwrap_or(!crate::collectors::nvml::COLLECTOR.enabled(settings, false));
    let (mut fields, mut notes) = match &dcgm.field_list {
        Some(path) => {
            let list = config::read_field_list(path)?;
            (list.fields, list.skipped)
        }
        None => (default_fields(device_metrics), Vec::new()),
    };
    if !device_metrics {
        let left: Vec<&str> = fields
            .iter()
            .filter(|f| !f.profiling && f.metric().is_some())
            .map(|f| f.name)
            .collect();
        if !left.is_empty() {
            notes.push(format!(
                "{} come from NVML ([dcgm] device_metrics = true to read them through DCGM)",
                left.join(", ")
            ));
        }
        fields.retain(|f| f.profiling || f.metric().is_none());
    }
    Ok((fields, notes))
}

/// A series family another source owns on every GPU: a metric and its own label values (those
/// after the device key's).
pub type Owned = (Metric, &'static [&'static str]);

/// The catalog series a DCGM field provides on every GPU.
pub fn series_of(field: &FieldChoice) -> Option<Owned> {
    match &field.target {
        Target::Catalog(m) => Some((m.metric, m.labels)),
        Target::Extra(_) => None,
    }
}

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
    fn name(&self) -> &'static str {
        self.inner.name()
    }

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
    use crate::cli::parse_from;
    use std::io::Write;

    fn settings(args: &[&str]) -> Settings {
        let mut all = vec!["x"];
        all.extend_from_slice(args);
        config::resolve(&parse_from(all).unwrap(), []).unwrap()
    }

    #[test]
    fn by_default_dcgm_provides_profiling_and_nvml_the_device_metrics() {
        let (fields, _) = dcgm_fields(&settings(&["--collector.dcgm"])).unwrap();
        assert!(!fields.is_empty() && fields.iter().all(|f| f.profiling));
        // Without NVML, DCGM provides the device metrics too.
        let (fields, _) =
            dcgm_fields(&settings(&["--collector.dcgm", "--no-collector.nvml"])).unwrap();
        assert!(fields
            .iter()
            .any(|f| f.metric() == Some(Metric::GpuUtilization)));
    }

    #[test]
    fn a_field_list_keeps_device_fields_with_nvml_unless_told_otherwise() {
        let mut csv = tempfile::NamedTempFile::new().unwrap();
        writeln!(csv, "DCGM_FI_DEV_GPU_UTIL, gauge, util\nDCGM_FI_DEV_XID_ERRORS, gauge, xid\nDCGM_FI_PROF_SM_ACTIVE, gauge, sm").unwrap();
        let mut toml = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        writeln!(
            toml,
            "[dcgm]\nfield_list = {:?}",
            csv.path().display().to_string()
        )
        .unwrap();
        let path = toml.path().to_str().unwrap();
        let (fields, notes) = dcgm_fields(&settings(&["--config.file", path])).unwrap();
        let ids: Vec<u16> = fields.iter().map(|f| f.id).collect();
        assert_eq!(ids, [230, 1002]);
        assert!(
            notes[0].starts_with("DCGM_FI_DEV_GPU_UTIL come from NVML"),
            "{notes:?}"
        );
    }

    #[test]
    fn series_owned_by_dcgm_never_leave_the_wrapped_source() {
        struct Two;
        impl Source for Two {
            fn name(&self) -> &'static str {
                "nvml"
            }
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
        assert_eq!(w.name(), "nvml");
    }
}
