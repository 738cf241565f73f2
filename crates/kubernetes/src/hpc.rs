//! HPC job mapping: a directory with one file per GPU listing the ids of the jobs on it, the
//! convention of dcgm-exporter's `--hpc-job-mapping-dir`, so Slurm prolog and epilog scripts
//! written for it work unchanged.
//!
//! A file is named by the GPU index (`0`) or, for a MIG instance, `INDEX.GPU_INSTANCE` (`0.3`);
//! each non-empty line is a job id. Other names (editor and temp files) are ignored.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;

use dgx_pixels_metrics::{
    DeviceRef, Holder, Metric, PollError, PollErrorKind, PollOutput, Sample, Source,
};
use dgx_pixels_settings::file::{Dir, Untrusted};

use crate::cap::{MAX_JOBS_PER_DEVICE, MAX_JOB_INFO};

/// A job file larger than this is not a list of job ids; it is skipped.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Most directory entries looked at per poll: a node's GPUs and MIG instances, and whatever
/// else a prolog leaves there, many times over.
const MAX_ENTRIES: usize = 4096;
/// How each job file is read: a regular file (never a FIFO, a device or a link to one: the
/// open does not wait and does not follow a link), at most [`MAX_FILE_BYTES`].
const JOB_FILE: Untrusted = Untrusted::regular(MAX_FILE_BYTES).no_follow();

/// Reads the job files on each poll.
#[derive(Debug)]
pub struct HpcJobSource {
    dir: PathBuf,
    /// Files skipped and why, to warn once per file and reason rather than on every poll.
    skipped: BTreeMap<String, Skipped>,
    /// Job info series left out over the caps so far.
    dropped: u64,
}

impl HpcJobSource {
    /// A source reading `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> HpcJobSource {
        HpcJobSource {
            dir: dir.into(),
            skipped: BTreeMap::new(),
            dropped: 0,
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

/// Why a job file was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Over [`MAX_FILE_BYTES`].
    Oversized,
    /// Not a regular file: a link (to `/dev/zero`, say), a FIFO, a device, a directory.
    NotRegular,
}

/// What one read of the directory found.
#[derive(Debug, Default)]
pub struct JobFiles {
    /// The job on each device, at most [`MAX_JOBS_PER_DEVICE`] per device and [`MAX_JOB_INFO`]
    /// in all.
    pub jobs: Vec<(DeviceRef, Holder)>,
    /// Job files skipped, by name (a device's name: digits and a dot).
    pub skipped: BTreeMap<String, Skipped>,
    /// Jobs left out over the caps.
    pub dropped: u64,
}

/// Reads every job file of `dir`: the directory opened once, each file read relative to it,
/// once, as [`JOB_FILE`] says.
pub fn read_dir(dir: &std::path::Path) -> Result<JobFiles, PollError> {
    let unreadable = |e: std::io::Error| {
        PollError::new(
            PollErrorKind::DirectoryUnreadable,
            format!("HPC job mapping directory {}: {e}", dir.display()),
        )
    };
    let handle = Dir::open(dir).map_err(unreadable)?;
    let mut names: Vec<(DeviceRef, String)> = handle
        .names(MAX_ENTRIES)
        .map_err(unreadable)?
        .into_iter()
        .filter_map(|n| {
            let name = n.to_str()?.to_string();
            Some((device_of_file(&name)?, name))
        })
        .collect();
    // A stable order, so the caps keep the same jobs on every poll.
    names.sort_by(|a, b| a.1.cmp(&b.1));
    let mut out = JobFiles::default();
    let mut pairs = Vec::new();
    for (device, name) in names {
        let bytes = match handle.read(OsStr::new(&name), &JOB_FILE) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                out.skipped.insert(name, Skipped::Oversized);
                continue;
            }
            // Removed between listing and reading: its job ended.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => {
                out.skipped.insert(name, Skipped::NotRegular);
                continue;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        for job in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            pairs.push((device.clone(), Holder::Job(job.to_string())));
        }
    }
    (out.jobs, out.dropped) = crate::cap::cap(pairs, MAX_JOBS_PER_DEVICE, MAX_JOB_INFO);
    Ok(out)
}

impl Source for HpcJobSource {
    fn poll(&mut self) -> Result<PollOutput, PollError> {
        let found = read_dir(&self.dir)?;
        for (name, why) in &found.skipped {
            if self.skipped.get(name) == Some(why) {
                continue;
            }
            // The name is digits and at most one dot (device_of_file): safe to log.
            match why {
                Skipped::Oversized => {
                    tracing::warn!(file = %name, dir = %self.dir.display(), "HPC job file over {MAX_FILE_BYTES} bytes; skipped")
                }
                Skipped::NotRegular => {
                    tracing::warn!(file = %name, dir = %self.dir.display(), "HPC job file is not a regular file (a link, a FIFO, a device); skipped")
                }
            }
        }
        self.skipped = found.skipped;
        if found.dropped > 0 && self.dropped == 0 {
            tracing::warn!(
                "HPC job files name more jobs than dgx_pixels_gpu_hpc_job_info serves (at most {MAX_JOBS_PER_DEVICE} per device, {MAX_JOB_INFO} in all); the rest are counted in dgx_pixels_source_series_dropped_total"
            );
        }
        self.dropped += found.dropped;
        Ok(PollOutput {
            samples: vec![Sample::new(
                Metric::SourceSeriesDropped,
                ["hpc", Metric::GpuHpcJobInfo.def().name],
                self.dropped as f64,
            )],
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
