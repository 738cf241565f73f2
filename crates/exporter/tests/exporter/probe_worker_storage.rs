//! `storage_read` end to end: the daemon reads a configured directory through a probe worker
//! while the node's (fake) GPUs are idle and serves its throughput; a worker asked for a path
//! outside the configured list refuses it with a clear error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

use common::{fake_cuda_dir, fake_nvml_library, start_with_env, value, wait_until};
use dgx_pixels_probes::worker::{StorageRequest, WorkerReply, WorkerRequest};

const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/p2p-node.toml");

#[test]
fn the_daemon_reads_a_configured_path_through_a_worker_on_an_idle_node() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().to_str().unwrap().to_string();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "[probes]\nprobes = \"launch_latency\"\nsettle = \"0s\"\n\
             storage_paths = [\"{path}\"]\nstorage_read_bytes = 4194304\n\
             [collector.probes]\ninterval = \"100ms\"\n[collector.nvml]\ninterval = \"200ms\"\n"
        ),
    )
    .unwrap();
    // Issue 42, item 5: a FIFO planted under the old fixed scratch name made every run an
    // error; each run now writes, reads and removes a scratch file of its own.
    let planted = data.path().join(dgx_pixels_probes::storage::SCRATCH_FILE);
    assert!(std::process::Command::new("mkfifo")
        .arg(&planted)
        .status()
        .unwrap()
        .success());
    let lib_dir = fake_cuda_dir().to_str().unwrap().to_string();
    let daemon = start_with_env(
        &[
            "--config.file",
            config.path().to_str().unwrap(),
            "--collector.probes",
            "--no-collector.dcgm",
            "--nvml.library",
            fake_nvml_library(),
        ],
        &[
            ("FAKE_NVML_SCENARIO", SCENARIO),
            ("FAKE_NVML_TIME", "30"),
            ("FAKE_CUDA_SCENARIO", SCENARIO),
            ("FAKE_CUDA_TIME", "30"),
            ("LD_LIBRARY_PATH", &lib_dir),
        ],
    );
    let read = |body: &str| {
        value(
            body,
            "dgx_pixels_probe_storage_read_bytes_per_second",
            &[("path", &path)],
        )
    };
    // The first poll comes before NVML's first reading: the node cannot be shown idle, so the
    // read is skipped and tried again 30 s later, as the GPU probes are.
    let (body, took) = wait_until(daemon.port, Duration::from_secs(75), |b| read(b).is_some());
    let bps = read(&body).unwrap_or_else(|| panic!("no read in {took:?}:\n{body}"));
    assert!(bps > 0.0);
    // Nothing is left behind but what was planted, untouched (a run in flight has its own
    // file for a few milliseconds).
    let left = || -> Vec<_> {
        std::fs::read_dir(data.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while left() != std::slice::from_ref(&planted) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(left(), std::slice::from_ref(&planted));
    drop(daemon);
    assert!(std::fs::symlink_metadata(&planted)
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn a_worker_refuses_a_path_outside_the_configured_list() {
    let allowed = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let req = WorkerRequest::StorageRead(StorageRequest {
        path: other.path().to_path_buf(),
        allowed: vec![allowed.path().to_path_buf()],
        bytes: 1 << 20,
    });
    let out = common::probe_worker(
        fake_nvml_library(),
        &serde_json::to_vec(&req).unwrap(),
        &[("FAKE_NVML_SCENARIO", SCENARIO)],
    );
    let reply: WorkerReply = serde_json::from_slice(&out.stdout).unwrap();
    match reply {
        WorkerReply::Failed {
            unavailable: false,
            message,
        } => assert!(
            message.contains(&format!(
                "{} is not one of the configured storage paths",
                other.path().display()
            )),
            "{message}"
        ),
        r => panic!("{r:?}"),
    }
    assert!(!other
        .path()
        .join(dgx_pixels_probes::storage::SCRATCH_FILE)
        .exists());
}
