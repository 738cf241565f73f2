//! `storage_read` in the daemon's scheduler: configured paths read only while every GPU is
//! idle, their throughput and outcomes served per path, bad settings refused.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample, Source};
use dgx_pixels_probe_source::settings::ProbesSettings;
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::storage::{self, StorageRead};
use dgx_pixels_probes::{ProbeError, ProbeKind};

/// Two GPUs whose probes answer at once; storage reads are the real ones.
struct Node {
    reads: Arc<Mutex<Vec<PathBuf>>>,
}

impl Backend for Node {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok((0..2)
            .map(|i| GpuId {
                ordinal: i,
                uuid: format!("GPU-{i}"),
                model: "NVIDIA H100 80GB HBM3".into(),
            })
            .collect())
    }
    fn run(&mut self, _: &GpuId, _: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        Ok(vec![1.0])
    }
    fn read_storage(
        &mut self,
        path: &Path,
        allowed: &[PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        self.reads.lock().unwrap().push(path.to_path_buf());
        storage::read_throughput(path, allowed, bytes)
    }
}

#[derive(Clone, Default)]
struct Util(Arc<Mutex<HashMap<String, f64>>>);
impl UtilizationView for Util {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        let i = uuid.strip_prefix("GPU-")?.parse().ok()?;
        Some((i, self.0.lock().unwrap().get(uuid).copied().unwrap_or(0.0)))
    }
}

fn source(paths: Vec<PathBuf>, util: &Util) -> (ProbeSource<Node, Util>, Arc<Mutex<Vec<PathBuf>>>) {
    let reads = Arc::new(Mutex::new(Vec::new()));
    let s = ProbeSource::new(
        Node {
            reads: reads.clone(),
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![ProbeKind::LaunchLatency],
            settle: Duration::ZERO,
            storage_paths: paths,
            storage_read_bytes: storage::MIN_READ_BYTES,
            ..Default::default()
        },
    )
    .unwrap();
    (s, reads)
}

fn node_value(samples: &[Sample], metric: Metric, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.metric == metric && s.device.is_none() && s.labels.iter().eq(labels.iter()))
        .map(|s| s.value)
}

#[test]
fn an_idle_node_reads_its_paths_and_a_busy_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let label = dir.path().display().to_string();
    let util = Util::default();
    // A GPU at 90%: no read, the path's skip counted, nothing written.
    util.0.lock().unwrap().insert("GPU-1".into(), 0.9);
    let (mut s, reads) = source(vec![dir.path().to_path_buf()], &util);
    let samples = s.poll().unwrap().samples;
    assert!(reads.lock().unwrap().is_empty());
    assert!(!dir.path().join(storage::SCRATCH_FILE).exists());
    assert_eq!(
        node_value(
            &samples,
            Metric::ProbeStorageRuns,
            &[&label, "skipped_busy"]
        ),
        Some(1.0)
    );
    assert!(samples.iter().all(|x| x.metric != Metric::ProbeStorageRead));
    // Every GPU idle: the path is read once, its throughput served.
    let util = Util::default();
    let (mut s, reads) = source(vec![dir.path().to_path_buf()], &util);
    let samples = s.poll().unwrap().samples;
    assert_eq!(*reads.lock().unwrap(), [dir.path().to_path_buf()]);
    assert_eq!(
        node_value(&samples, Metric::ProbeStorageRuns, &[&label, "ok"]),
        Some(1.0)
    );
    let read = samples
        .iter()
        .find(|x| x.metric == Metric::ProbeStorageRead)
        .unwrap();
    assert_eq!(read.labels[0], label);
    assert!(read.labels[1] == "true" || read.labels[1] == "false");
    assert!(read.value > 0.0);
    // The run's own scratch file is gone with the run.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert!(samples.iter().all(Sample::is_well_formed));
    // The next read waits for the duty cycle: the next poll runs a GPU probe instead.
    s.poll().unwrap();
    assert_eq!(reads.lock().unwrap().len(), 1);
}

#[test]
fn a_path_that_fails_counts_an_error_and_serves_no_throughput() {
    let gone = PathBuf::from("/nonexistent/dgx-pixels-storage-probe");
    let (mut s, _) = source(vec![gone.clone()], &Util::default());
    let samples = s.poll().unwrap().samples;
    assert_eq!(
        node_value(
            &samples,
            Metric::ProbeStorageRuns,
            &[&gone.display().to_string(), "error"]
        ),
        Some(1.0)
    );
    assert!(samples.iter().all(|x| x.metric != Metric::ProbeStorageRead));
}

/// Issue 42: a path that fails at once came due again at once (110 worker processes in
/// 40 s); now each failure in a row doubles the wait, from 10 s, and a success resets it.
#[test]
fn a_failing_path_backs_off() {
    use dgx_pixels_probe_source::{storage_backoff, STORAGE_BACKOFF_BASE, STORAGE_BACKOFF_MAX};
    let gone = PathBuf::from("/nonexistent/dgx-pixels-storage-probe");
    let (mut s, reads) = source(vec![gone.clone()], &Util::default());
    for _ in 0..60 {
        s.poll().unwrap();
    }
    assert_eq!(reads.lock().unwrap().len(), 1, "retried without back-off");
    assert_eq!(storage_backoff(0), Duration::ZERO);
    assert_eq!(storage_backoff(1), STORAGE_BACKOFF_BASE);
    assert_eq!(storage_backoff(2), 2 * STORAGE_BACKOFF_BASE);
    assert_eq!(storage_backoff(5), 16 * STORAGE_BACKOFF_BASE);
    assert_eq!(storage_backoff(40), STORAGE_BACKOFF_MAX);
}

#[test]
fn storage_settings_are_checked() {
    let parse = |text: &str| -> Result<ScheduleSettings, String> {
        let s: ProbesSettings = toml::from_str(text).map_err(|e| e.to_string())?;
        s.schedule().map_err(|e| e.to_string())
    };
    let ok =
        parse("storage_paths = [\"/data\", \"/scratch/f.bin\"]\nstorage_read_bytes = 1048576\n")
            .unwrap();
    assert_eq!(
        ok.storage_paths,
        [PathBuf::from("/data"), PathBuf::from("/scratch/f.bin")]
    );
    assert_eq!(ok.storage_read_bytes, 1 << 20);
    assert_eq!(
        parse("").unwrap().storage_read_bytes,
        storage::DEFAULT_READ_BYTES
    );
    let e = parse("storage_paths = [\"data\"]\n").unwrap_err();
    assert!(
        e.contains("probes.storage_paths: data is not an absolute path"),
        "{e}"
    );
    let e = parse("storage_read_bytes = 1\n").unwrap_err();
    assert!(e.contains("probes.storage_read_bytes"), "{e}");
    let many: Vec<String> = (0..17).map(|i| format!("\"/d{i}\"")).collect();
    let e = parse(&format!("storage_paths = [{}]\n", many.join(", "))).unwrap_err();
    assert!(e.contains("at most 16"), "{e}");
}
