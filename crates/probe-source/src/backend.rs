//! What runs the probes ([`Backend`]: a worker process in the daemon, CUDA in-process in the
//! GPU tests, a scripted fake elsewhere) and what the scheduler reads of the node
//! ([`UtilizationView`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use dgx_pixels_probes::nccl::AllReduce;
use dgx_pixels_probes::probe::{ProbeKind, ProbeSizes};
use dgx_pixels_probes::storage::{self, StorageRead};
use dgx_pixels_probes::ProbeError;

/// A GPU as the backend sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuId {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// UUID in NVML notation (joins with NVML series).
    pub uuid: String,
    /// Model name.
    pub model: String,
}

/// What actually runs probes: CUDA in the daemon, a scripted fake in tests.
pub trait Backend: Send {
    /// The GPUs to probe; an error when CUDA is unavailable.
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError>;
    /// Runs one probe on one GPU and returns its measured values.
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError>;

    /// Runs a pair probe ([`ProbeKind::needs_peer`]) from `gpu` to `peer`. The default: the
    /// backend runs none (an error, so the scheduler serves nothing for it).
    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        let _ = (gpu, peer);
        Err(ProbeError::Config(format!(
            "{kind}: this backend runs no pair probes"
        )))
    }

    /// Runs `storage_read` on `path`, one of `allowed`, reading at most `bytes`. The default:
    /// the backend reads no storage.
    fn read_storage(
        &mut self,
        path: &Path,
        allowed: &[PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        let _ = (allowed, bytes);
        Err(ProbeError::Config(format!(
            "storage_read of {}: this backend reads no storage",
            path.display()
        )))
    }

    /// Runs `nccl_allreduce` over `gpus` (in rank order) up to `max_bytes` per GPU. The
    /// default: the backend runs no NCCL.
    fn run_nccl(&mut self, gpus: &[GpuId], max_bytes: u64) -> Result<AllReduce, ProbeError> {
        let _ = (gpus, max_bytes);
        Err(ProbeError::Config(
            "nccl_allreduce: this backend runs no NCCL".into(),
        ))
    }

    /// How long the last [`Backend::run`] held the GPU, where the backend knows it better than
    /// the wall clock around the call: a simulated GPU answers at once but models the time a
    /// real run takes, which sets the pause before the next probe (the duty cycle) and the
    /// duration histogram. `None` (the default): the wall time of the call.
    fn held_for(&self) -> Option<Duration> {
        None
    }

    /// Peak resident memory of the process that did the last call, where it was another
    /// process (a worker); `None` (the default) for in-process backends.
    fn worker_peak_rss_bytes(&self) -> Option<u64> {
        None
    }
}

/// The CUDA backend: opens the GPU, runs 1 warm-up and 3 measured iterations, releases it.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    /// Workload sizes.
    pub sizes: ProbeSizes,
}

impl Backend for CudaBackend {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(dgx_pixels_probes::cuda::list_devices()?
            .into_iter()
            .map(|(ordinal, uuid, model)| GpuId {
                ordinal,
                uuid,
                model,
            })
            .collect())
    }

    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        let mut g = dgx_pixels_probes::cuda::Gpu::open(gpu.ordinal)?;
        let values = g.run(kind, &self.sizes, 42, 1, 3, &mut || {});
        g.release()?;
        values
    }

    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        _: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        let mut g = dgx_pixels_probes::cuda::Gpu::open(gpu.ordinal)?;
        let p = match dgx_pixels_probes::cuda::Gpu::open(peer.ordinal) {
            Ok(p) => p,
            Err(e) => {
                let _ = g.release();
                return Err(e);
            }
        };
        let values = g.run_peer(&p, &self.sizes, 1, 3, &mut || {});
        let released = g.release().and(p.release());
        let values = values?;
        released.map(|()| values)
    }

    fn read_storage(
        &mut self,
        path: &Path,
        allowed: &[PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        storage::read_throughput(path, allowed, bytes)
    }
}

/// Utilization and exported GPU index of a GPU, by UUID, from the latest telemetry snapshot.
pub trait UtilizationView: Send {
    /// `(exported GPU index, utilization 0–1)` when a current reading exists.
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)>;

    /// Who else is on the GPU, from the same snapshot. The default (a view that knows only
    /// utilization) says nobody: the worker checks processes again itself.
    fn occupancy(&self, uuid: &str) -> Occupancy {
        let _ = uuid;
        Occupancy::default()
    }
}

/// Who else is on a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// A pod or HPC job holds it (attribution).
    pub held: bool,
    /// Processes other than the exporter's own workers with a context on it.
    pub processes: usize,
    /// It is in MIG mode.
    pub mig: bool,
}
