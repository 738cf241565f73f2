//! HPC job mapping: a directory with one file per GPU listing the ids of the jobs on it, the
//! convention of dcgm-exporter's `--hpc-job-mapping-dir`, so Slurm prolog and epilog scripts
//! written for it work unchanged.
//!
//! A file is named by the GPU index (`0`) or, for a MIG instance, `INDEX.GPU_INSTANCE` (`0.3`);
//! each non-empty line is a job id. Other names (editor and temp files) are ignored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dgx_pixels_metrics::{DeviceRef, Holder, PollError, PollErrorKind, PollOutput, Source};

/// A job file larger than this is not a list of job ids; it is skipped.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Reads the job files on each poll.
#[derive(Debug)]
pub struct HpcJobSource {
    dir: PathBuf,
    /// Files skipped for their size, to warn once per file rather than on every poll.
    oversized: BTreeSet<PathBuf>,
}

impl HpcJobSource {
    /// A source reading `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> HpcJobSource {
        HpcJobSource {
            dir: dir.into(),
            oversized: BTreeSet::new(),
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

/// What one read of the directory found.
#[derive(Debug, Default)]
pub struct JobFiles {
    /// The job on each device.
    pub jobs: Vec<(DeviceRef, Holder)>,
    /// Job files skipped for being over the size limit.
    pub oversized: BTreeSet<PathBuf>,
}

/// Reads every job file of `dir`.
pub fn read_dir(dir: &Path) -> Result<JobFiles, PollError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        PollError::new(
            PollErrorKind::DirectoryUnreadable,
            format!("HPC job mapping directory {}: {e}", dir.display()),
        )
    })?;
    let mut out = JobFiles::default();
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
            out.oversized.insert(path);
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for job in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            out.jobs
                .push((device.clone(), Holder::Job(job.to_string())));
        }
    }
    Ok(out)
}

impl Source for HpcJobSource {
    fn name(&self) -> &'static str {
        "hpc"
    }

    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let found = read_dir(&self.dir)?;
        for path in found.oversized.difference(&self.oversized) {
            tracing::warn!(file = %path.display(), "HPC job file over {MAX_FILE_BYTES} bytes; skipped");
        }
        self.oversized = found.oversized;
        Ok(PollOutput {
            attribution: Some(Arc::new(found.jobs)),
            ..PollOutput::default()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The log lines `f` writes at warn level.
    fn warnings(f: impl FnOnce()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    /// Regression (hardening round 2, item 11): an oversized job file was warned about on
    /// every poll. It is reported once, and again only after it was fixed and broke again.
    #[test]
    fn an_oversized_job_file_is_reported_once_per_change() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("0");
        let oversize = || std::fs::write(&big, vec![b'1'; MAX_FILE_BYTES as usize + 1]).unwrap();
        oversize();
        std::fs::write(dir.path().join("1"), "job-7\n").unwrap();
        let mut s = HpcJobSource::new(dir.path());
        let mut per_round = Vec::new();
        for round in 0..6 {
            match round {
                3 => std::fs::write(&big, "job-1\n").unwrap(),
                4 => oversize(),
                _ => {}
            }
            let mut jobs = None;
            let lines = warnings(|| {
                jobs = s.poll().unwrap().attribution;
            });
            per_round.push(
                lines
                    .iter()
                    .filter(|l| l.contains("HPC job file over"))
                    .count(),
            );
            let jobs = jobs.unwrap();
            assert!(jobs.contains(&(
                DeviceRef::Index {
                    gpu: 1,
                    gpu_instance: None
                },
                Holder::Job("job-7".into())
            )));
        }
        assert_eq!(per_round, [1, 0, 0, 0, 1, 0]);
    }

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
