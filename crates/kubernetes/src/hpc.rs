//! HPC job mapping: a directory with one file per GPU listing the ids of the jobs on it, the
//! convention of dcgm-exporter's `--hpc-job-mapping-dir`, so Slurm prolog and epilog scripts
//! written for it work unchanged.
//!
//! A file is named by the GPU index (`0`) or, for a MIG instance, `INDEX.GPU_INSTANCE` (`0.3`);
//! each non-empty line is a job id. Other names (editor and temp files) are ignored.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dgx_pixels_metrics::{AttributionSet, DeviceRef, Holder, PollError, Sample, Source};

/// A job file larger than this is not a list of job ids; it is skipped.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Reads the job files on each poll.
#[derive(Debug)]
pub struct HpcJobSource {
    dir: PathBuf,
    latest: Option<AttributionSet>,
}

impl HpcJobSource {
    /// A source reading `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> HpcJobSource {
        HpcJobSource {
            dir: dir.into(),
            latest: None,
        }
    }
}

/// The device a job file's name names: `INDEX` or `INDEX.GPU_INSTANCE`.
pub fn device_of_file(name: &str) -> Option<DeviceRef> {
    let (gpu, gpu_instance) = match name.split_once('.') {
        Some((g, i)) => (g, Some(i.parse().ok()?)),
        None => (name, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(gpu) {
        return None;
    }
    Some(DeviceRef::Index {
        gpu: gpu.parse().ok()?,
        gpu_instance,
    })
}

/// Reads every job file of `dir`.
pub fn read_dir(dir: &Path) -> Result<Vec<(DeviceRef, Holder)>, PollError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        PollError::new(
            "directory_unreadable",
            format!("HPC job mapping directory {}: {e}", dir.display()),
        )
    })?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(device) = name.to_str().and_then(device_of_file) else {
            continue;
        };
        let path = entry.path();
        // A file removed between listing and reading just ended its job.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE_BYTES {
            tracing::warn!(file = %path.display(), "HPC job file over {MAX_FILE_BYTES} bytes; skipped");
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for job in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            out.push((device.clone(), Holder::Job(job.to_string())));
        }
    }
    Ok(out)
}

impl Source for HpcJobSource {
    fn name(&self) -> &'static str {
        "hpc"
    }

    fn poll(&mut self) -> Result<Vec<Sample>, PollError> {
        self.latest = None;
        self.latest = Some(Arc::new(read_dir(&self.dir)?));
        Ok(Vec::new())
    }

    fn take_attribution(&mut self) -> Option<AttributionSet> {
        self.latest.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_indices_or_index_dot_instance() {
        assert_eq!(
            device_of_file("3"),
            Some(DeviceRef::Index {
                gpu: 3,
                gpu_instance: None
            })
        );
        assert_eq!(
            device_of_file("0.7"),
            Some(DeviceRef::Index {
                gpu: 0,
                gpu_instance: Some(7)
            })
        );
        for bad in ["", ".3", "0.", "gpu0", "0.x", "1.tmp", "-1", ".0.swp"] {
            assert_eq!(device_of_file(bad), None, "{bad}");
        }
    }
}
