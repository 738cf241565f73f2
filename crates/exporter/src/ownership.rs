//! One source per metric when NVML and DCGM both run: DCGM's field choice decides which
//! catalog metrics it provides, and NVML's samples of those metrics are dropped, so no series
//! is served twice.
//!
//! By default DCGM provides the profiling metrics and NVML the device metrics;
//! `[dcgm] device_metrics = true` hands the device metrics DCGM can read to DCGM (the default
//! when the nvml collector is off).

use std::collections::HashSet;

use dgx_pixels_dcgm::fields::{default_fields, FieldChoice};
use dgx_pixels_metrics::{ExtraSample, Metric, PollError, Sample, Source};

use crate::config::{self, ConfigError, Settings};

/// The DCGM fields to watch, after ownership: with `device_metrics` off, device fields with a
/// catalog row are left to NVML (named in the returned notes, logged at start).
pub fn dcgm_fields(settings: &Settings) -> Result<(Vec<FieldChoice>, Vec<String>), ConfigError> {
    let device_metrics = settings
        .dcgm
        .device_metrics
        .unwrap_or(!settings.collector_enabled("nvml"));
    let (mut fields, mut notes) = match &settings.dcgm.field_list {
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

/// A source whose samples of some metrics are dropped because another source owns them.
pub struct Without {
    inner: Box<dyn Source>,
    dropped: HashSet<Metric>,
}

impl Without {
    /// `inner` without `dropped`.
    pub fn new(inner: Box<dyn Source>, dropped: HashSet<Metric>) -> Without {
        Without { inner, dropped }
    }
}

impl Source for Without {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
        let mut samples = self.inner.poll()?;
        samples.retain(|s| !self.dropped.contains(&s.metric));
        Ok(samples)
    }

    fn take_extra(&mut self) -> Vec<ExtraSample> {
        self.inner.take_extra()
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
    fn dropped_metrics_never_leave_the_wrapped_source() {
        struct Two;
        impl Source for Two {
            fn name(&self) -> &'static str {
                "nvml"
            }
            fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
                Ok(vec![
                    Sample::new(Metric::PcieTransmit, ["0", "u"], 1.0),
                    Sample::new(Metric::GpuPower, ["0", "u"], 2.0),
                ])
            }
        }
        let mut w = Without::new(Box::new(Two), [Metric::PcieTransmit].into_iter().collect());
        let got: Vec<Metric> = w.poll().unwrap().iter().map(|s| s.metric).collect();
        assert_eq!(got, [Metric::GpuPower]);
        assert_eq!(w.name(), "nvml");
    }
}
