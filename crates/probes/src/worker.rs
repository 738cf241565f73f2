//! Probes in a short-lived worker process, so the daemon never holds a GPU.
//!
//! On real drivers a CUDA context, once created, stays with its process: the first hardware
//! run saw the daemon keep 520 MiB, a process entry and a 42 W higher idle power after its
//! first probe. So the daemon side (`WorkerBackend`, in dgx-pixels-probe-source) never loads
//! CUDA: each discovery and
//! each probe run is one worker (the exporter's own binary, hidden subcommand `probe-worker`)
//! that gets a [`WorkerRequest`] on stdin, answers one [`WorkerReply`] on stdout and exits,
//! taking its context with it. The worker facility (dgx-pixels-worker) kills it at its
//! deadline, bounds what it prints and reaps it.
//!
//! The worker side ([`serve`]) is polite by construction: before it creates a context it asks
//! its [`Watch`] (NVML, in the exporter) whether the GPU may be touched (compute mode, MIG,
//! other processes), and while and after it runs it asks again: any other process seen on the
//! GPU makes the run `contended`, and its numbers are discarded, not served.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::probe::{ProbeKind, ProbeSizes};
use crate::ProbeError;

/// Most bytes a request may have.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Most bytes a worker may print; a reply is a few hundred bytes.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;
/// The hidden subcommand of the exporter binary that serves one request.
pub const SUBCOMMAND: &str = "probe-worker";

/// What the daemon asks a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WorkerRequest {
    /// List the GPUs CUDA sees (no context is created).
    Discover,
    /// Run one probe on one GPU.
    Run(RunRequest),
    /// Run `storage_read` on one configured path (a node probe: no GPU is touched).
    StorageRead(StorageRequest),
    /// Run `nccl_allreduce` over a set of GPUs (a node probe: every GPU is checked and held).
    NcclAllReduce(NcclRequest),
}

/// One `nccl_allreduce` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclRequest {
    /// The GPUs, in rank order, each checked as a probe's GPU.
    pub gpus: Vec<Peer>,
    /// Largest message, bytes per GPU.
    pub max_bytes: u64,
    /// Unrecorded timings per size.
    pub warmup: usize,
    /// Recorded timings per size.
    pub iterations: usize,
    /// Seconds one timing should last (repetitions are batched to reach it).
    pub target_seconds: f64,
}

/// One `storage_read` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageRequest {
    /// The path to read (a file, or a directory for the scratch file).
    pub path: std::path::PathBuf,
    /// `[probes] storage_paths`: the worker refuses any other path.
    pub allowed: Vec<std::path::PathBuf>,
    /// Bytes to read at most.
    pub bytes: u64,
}

/// One probe run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// The GPU's UUID: the worker refuses to run on an ordinal that is another GPU now.
    pub uuid: String,
    /// The probe (its [`ProbeKind::name`] on the wire).
    pub probe: ProbeKind,
    /// Workload sizes.
    pub sizes: ProbeSizes,
    /// Unrecorded iterations.
    pub warmup: usize,
    /// Recorded iterations.
    pub iterations: usize,
    /// Input seed.
    pub seed: u64,
    /// The peer of a pair probe (`p2p_copy`), checked and held like the GPU itself; `None`
    /// for single-GPU probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
}

/// The second GPU of a pair probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// UUID, checked as the GPU's.
    pub uuid: String,
}

/// Why a GPU was left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// Another process has a context on it.
    InUse,
    /// EXCLUSIVE_PROCESS or PROHIBITED compute mode: a context of ours could block its user.
    ComputeMode,
    /// MIG is enabled: a probe would need an instance of its own.
    Mig,
    /// NCCL (`libnccl.so.2`) cannot be loaded: `nccl_allreduce` does not apply to this node.
    NoNccl,
}

impl Skip {
    /// The `outcome` label value.
    pub fn outcome(self) -> &'static str {
        match self {
            Skip::InUse => "skipped_in_use",
            Skip::ComputeMode => "skipped_compute_mode",
            Skip::Mig => "skipped_mig",
            Skip::NoNccl => "skipped_no_nccl",
        }
    }
}

/// What a worker answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum WorkerReply {
    /// The GPUs CUDA sees.
    Devices {
        /// `(ordinal, uuid, model)`.
        gpus: Vec<(usize, String, String)>,
    },
    /// The probe ran alone on the GPU.
    Measured {
        /// One value per recorded iteration.
        values: Vec<f64>,
        /// Time from context creation to release, nanoseconds.
        held_ns: u64,
    },
    /// Another process used the GPU during the run: the values are not returned.
    Contended {
        /// How many other processes were seen.
        others: usize,
        /// Time the GPU was held, nanoseconds.
        held_ns: u64,
    },
    /// What a `storage_read` run measured.
    Read {
        /// Bytes read.
        bytes: u64,
        /// Read throughput, bytes per second.
        bytes_per_second: f64,
        /// Whether the page cache was bypassed (`O_DIRECT`).
        direct: bool,
        /// Time the run took, nanoseconds.
        held_ns: u64,
    },
    /// What an `nccl_allreduce` run measured.
    AllReduce {
        /// The result.
        result: crate::nccl::AllReduce,
        /// Time from the first context's creation to the last release, nanoseconds.
        held_ns: u64,
    },
    /// The GPU was not touched.
    Skipped {
        /// Why.
        skip: Skip,
        /// Details for the log.
        detail: String,
    },
    /// CUDA failed.
    Failed {
        /// CUDA (or cuBLAS) cannot be loaded at all.
        unavailable: bool,
        /// The error.
        message: String,
    },
}

/// What the worker can see of the GPU's other users (NVML, in the exporter).
pub trait Watch {
    /// Before the run: `Err` with the skip when the GPU must not be touched.
    fn admit(&mut self, uuid: &str) -> Result<(), (Skip, String)>;
    /// Processes other than this one with a context on the GPU now; an error when they
    /// cannot be listed (which makes the run contended: it cannot be shown to be alone).
    fn others(&mut self, uuid: &str) -> Result<usize, String>;
}

/// The worker side: answers `request` (one process, one request).
pub fn serve(request: &WorkerRequest, watch: &mut dyn Watch) -> WorkerReply {
    match request {
        WorkerRequest::Discover => match crate::cuda::list_devices() {
            Ok(gpus) => WorkerReply::Devices { gpus },
            Err(e) => failed(e),
        },
        WorkerRequest::Run(run) => serve_run(run, watch),
        WorkerRequest::NcclAllReduce(req) => serve_nccl(req, watch),
        WorkerRequest::StorageRead(req) => {
            let t0 = Instant::now();
            match crate::storage::read_throughput(&req.path, &req.allowed, req.bytes) {
                Ok(r) => WorkerReply::Read {
                    bytes: r.bytes,
                    bytes_per_second: r.bytes_per_second,
                    direct: r.direct,
                    held_ns: u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
                },
                Err(e) => failed(e),
            }
        }
    }
}

fn failed(e: ProbeError) -> WorkerReply {
    WorkerReply::Failed {
        unavailable: matches!(e, ProbeError::Unavailable(_)),
        message: e.to_string(),
    }
}

/// Opens CUDA device `ordinal` and checks it is still the GPU `uuid`.
fn open_checked(ordinal: usize, uuid: &str) -> Result<crate::cuda::Gpu, ProbeError> {
    let gpu = crate::cuda::Gpu::open(ordinal)?;
    if gpu.uuid != uuid {
        let msg = format!("CUDA ordinal {ordinal} is {} now, not {uuid}", gpu.uuid);
        let _ = gpu.release();
        return Err(ProbeError::Cuda(msg));
    }
    Ok(gpu)
}

fn serve_nccl(req: &NcclRequest, watch: &mut dyn Watch) -> WorkerReply {
    if req.gpus.len() < 2 {
        return failed(ProbeError::Config(format!(
            "nccl_allreduce needs two GPUs or more; {} given",
            req.gpus.len()
        )));
    }
    for g in &req.gpus {
        if let Err((skip, detail)) = watch.admit(&g.uuid) {
            return WorkerReply::Skipped { skip, detail };
        }
    }
    // Before any context: without NCCL no GPU is touched.
    let nccl = match crate::nccl::Nccl::load() {
        Ok(n) => n,
        Err(detail) => {
            return WorkerReply::Skipped {
                skip: Skip::NoNccl,
                detail,
            }
        }
    };
    let t0 = Instant::now();
    let mut open = Vec::with_capacity(req.gpus.len());
    for g in &req.gpus {
        match open_checked(g.ordinal, &g.uuid) {
            Ok(gpu) => open.push(gpu),
            Err(e) => {
                for gpu in open {
                    let _ = gpu.release();
                }
                return failed(e);
            }
        }
    }
    let mut seen = 0usize;
    let mut check = |watch: &mut dyn Watch| {
        for g in &req.gpus {
            match watch.others(&g.uuid) {
                Ok(n) => seen = seen.max(n),
                Err(_) => seen = seen.max(1),
            }
        }
    };
    let result = crate::nccl::run_allreduce(
        &nccl,
        &open,
        req.max_bytes,
        req.warmup,
        req.iterations,
        req.target_seconds,
        &mut || check(watch),
    );
    check(watch);
    let mut released = Ok(());
    for gpu in open {
        released = released.and(gpu.release());
    }
    let held_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let result = match (result, released) {
        (Err(e), _) | (Ok(_), Err(e)) => return failed(e),
        (Ok(r), Ok(())) => r,
    };
    if seen > 0 {
        return WorkerReply::Contended {
            others: seen,
            held_ns,
        };
    }
    WorkerReply::AllReduce { result, held_ns }
}

fn serve_run(req: &RunRequest, watch: &mut dyn Watch) -> WorkerReply {
    let kind = req.probe;
    let peer = match (kind.needs_peer(), &req.peer) {
        (true, Some(p)) if p.uuid != req.uuid => Some(p),
        (true, _) => {
            return failed(ProbeError::Config(format!(
                "{kind} needs a peer GPU other than the GPU itself"
            )))
        }
        (false, _) => None,
    };
    // Every GPU the run touches must be free, the peer as much as the GPU.
    let uuids: Vec<&str> = std::iter::once(req.uuid.as_str())
        .chain(peer.map(|p| p.uuid.as_str()))
        .collect();
    for uuid in &uuids {
        if let Err((skip, detail)) = watch.admit(uuid) {
            return WorkerReply::Skipped { skip, detail };
        }
    }
    let t0 = Instant::now();
    let mut gpu = match open_checked(req.ordinal, &req.uuid) {
        Ok(g) => g,
        Err(e) => return failed(e),
    };
    let peer_gpu = match peer.map(|p| open_checked(p.ordinal, &p.uuid)).transpose() {
        Ok(p) => p,
        Err(e) => {
            let _ = gpu.release();
            return failed(e);
        }
    };
    // Checked after every iteration and once more at the end: a job that starts mid-run
    // shares the GPU with the probe, and the numbers describe the sharing, not the GPU.
    let mut seen = 0usize;
    let mut check = |watch: &mut dyn Watch| {
        for uuid in &uuids {
            match watch.others(uuid) {
                Ok(n) => seen = seen.max(n),
                Err(_) => seen = seen.max(1),
            }
        }
    };
    let values = match &peer_gpu {
        Some(p) => gpu.run_peer(p, &req.sizes, req.warmup, req.iterations, &mut || {
            check(watch)
        }),
        None => gpu.run(
            kind,
            &req.sizes,
            req.seed,
            req.warmup,
            req.iterations,
            &mut || check(watch),
        ),
    };
    check(watch);
    let mut released = gpu.release();
    if let Some(p) = peer_gpu {
        released = released.and(p.release());
    }
    let held_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let values = match (values, released) {
        (Err(e), _) | (Ok(_), Err(e)) => return failed(e),
        (Ok(v), Ok(())) => v,
    };
    if seen > 0 {
        return WorkerReply::Contended {
            others: seen,
            held_ns,
        };
    }
    WorkerReply::Measured { values, held_ns }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip_as_json() {
        let req = WorkerRequest::Run(RunRequest {
            ordinal: 3,
            uuid: "GPU-1".into(),
            probe: ProbeKind::GemmBf16,
            sizes: ProbeSizes::default(),
            warmup: 1,
            iterations: 3,
            seed: 42,
            peer: None,
        });
        let text = serde_json::to_string(&req).unwrap();
        assert!(text.starts_with(r#"{"op":"run""#), "{text}");
        // The probe travels by its name, as before it was typed.
        assert!(text.contains(r#""probe":"gemm_bf16""#), "{text}");
        let unknown = text.replace("gemm_bf16", "gemm_int4");
        let e = serde_json::from_str::<WorkerRequest>(&unknown).unwrap_err();
        assert!(e.to_string().contains("unknown probe \"gemm_int4\""), "{e}");
        assert_eq!(serde_json::from_str::<WorkerRequest>(&text).unwrap(), req);
        // A pair probe names its peer; a single-GPU request has no peer key at all.
        assert!(!text.contains("peer"), "{text}");
        let WorkerRequest::Run(mut pair) = req else {
            unreachable!()
        };
        pair.probe = ProbeKind::P2pCopy;
        pair.peer = Some(Peer {
            ordinal: 5,
            uuid: "GPU-5".into(),
        });
        let pair = WorkerRequest::Run(pair);
        let text = serde_json::to_string(&pair).unwrap();
        assert!(
            text.contains(r#""peer":{"ordinal":5,"uuid":"GPU-5"}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<WorkerRequest>(&text).unwrap(), pair);
        for reply in [
            WorkerReply::Measured {
                values: vec![1.0, 2.0],
                held_ns: 5,
            },
            WorkerReply::Contended {
                others: 2,
                held_ns: 7,
            },
            WorkerReply::Skipped {
                skip: Skip::ComputeMode,
                detail: "exclusive".into(),
            },
            WorkerReply::Failed {
                unavailable: true,
                message: "no".into(),
            },
            WorkerReply::Devices {
                gpus: vec![(0, "GPU-a".into(), "H100".into())],
            },
        ] {
            let text = serde_json::to_string(&reply).unwrap();
            assert_eq!(serde_json::from_str::<WorkerReply>(&text).unwrap(), reply);
        }
    }

    /// A watch that admits everything and records what it was asked about.
    #[derive(Default)]
    struct Asked(Vec<String>);

    impl Watch for Asked {
        fn admit(&mut self, uuid: &str) -> Result<(), (Skip, String)> {
            self.0.push(uuid.to_string());
            if uuid == "GPU-busy" {
                return Err((Skip::InUse, "someone".into()));
            }
            Ok(())
        }
        fn others(&mut self, _: &str) -> Result<usize, String> {
            Ok(0)
        }
    }

    fn pair(peer: Option<&str>) -> WorkerRequest {
        WorkerRequest::Run(RunRequest {
            ordinal: 0,
            uuid: "GPU-0".into(),
            probe: ProbeKind::P2pCopy,
            sizes: ProbeSizes::default(),
            warmup: 1,
            iterations: 3,
            seed: 42,
            peer: peer.map(|u| Peer {
                ordinal: 1,
                uuid: u.into(),
            }),
        })
    }

    #[test]
    fn a_storage_read_outside_its_list_is_refused_and_one_inside_measured() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let req = |path: &std::path::Path| {
            WorkerRequest::StorageRead(StorageRequest {
                path: path.to_path_buf(),
                allowed: vec![dir.path().to_path_buf()],
                bytes: crate::storage::MIN_READ_BYTES,
            })
        };
        let text = serde_json::to_string(&req(dir.path())).unwrap();
        assert!(text.starts_with(r#"{"op":"storage_read""#), "{text}");
        let mut w = Asked::default();
        match serve(&req(other.path()), &mut w) {
            WorkerReply::Failed {
                unavailable: false,
                message,
            } => assert!(
                message.contains("not one of the configured storage paths"),
                "{message}"
            ),
            r => panic!("{r:?}"),
        }
        match serve(&req(dir.path()), &mut w) {
            WorkerReply::Read {
                bytes,
                bytes_per_second,
                ..
            } => assert!(bytes == crate::storage::MIN_READ_BYTES && bytes_per_second > 0.0),
            r => panic!("{r:?}"),
        }
        assert!(w.0.is_empty(), "no GPU is asked about");
    }

    #[test]
    fn a_pair_probe_needs_a_distinct_peer_and_admits_it_before_any_cuda() {
        for bad in [None, Some("GPU-0")] {
            let mut w = Asked::default();
            let reply = serve(&pair(bad), &mut w);
            assert!(
                matches!(&reply, WorkerReply::Failed { unavailable: false, message } if message.contains("needs a peer GPU")),
                "{reply:?}"
            );
            assert!(w.0.is_empty(), "nothing admitted: {:?}", w.0);
        }
        // A peer in use leaves both GPUs alone (no CUDA here: a context would fail otherwise).
        let mut w = Asked::default();
        let reply = serve(&pair(Some("GPU-busy")), &mut w);
        assert!(
            matches!(
                reply,
                WorkerReply::Skipped {
                    skip: Skip::InUse,
                    ..
                }
            ),
            "{reply:?}"
        );
        assert_eq!(w.0, vec!["GPU-0", "GPU-busy"]);
    }
}
