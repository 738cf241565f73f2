//! The `probes` collector of a simulated node: the real probe scheduler
//! ([`ProbeSource`]: the same politeness rules, cadence, families and labels as on hardware)
//! over a backend that asks the simulator what each probe would measure
//! ([`Node::benchmark`]; [`Node::peer_benchmark`] for the pair probe, `p2p_copy`). The daemon
//! reads which GPUs to leave alone from its device view ([`source_over`]), as on hardware; the
//! simulator's own utilization ([`SimUtilization`]) serves tests of the model alone.
//!
//! A simulated run answers at once but reports the time a real one holds the GPU
//! ([`Backend::held_for`]), so the duty cycle and the duration histogram are those of real
//! probes. GPUs in MIG mode are not probed (a probe would need a MIG instance of its own); a
//! lost GPU has no utilization reading and is skipped, as on hardware.
//!
//! The node probes are simulated too: `storage_read` from the scenario's `[[storage]]` mounts
//! ([`Node::storage_read`]; any other configured path reads at the simulator's default rate),
//! `nccl_allreduce` from its ring model ([`Node::allreduce_benchmark`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::nccl::{AllReduce, SizeResult};
use dgx_pixels_probes::{ProbeError, ProbeKind};
use dgx_pixels_sim::{Benchmark, BenchmarkError, GpuState, Node, Precision, Transfer};

/// The simulated node the backend and the utilization view share, and when its time started.
struct Shared {
    node: Node,
    started: Instant,
    /// GPU index by UUID.
    index: HashMap<String, usize>,
}

impl Shared {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }
}

type Handle = Arc<Mutex<Shared>>;

fn lock(h: &Handle) -> std::sync::MutexGuard<'_, Shared> {
    h.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The benchmark a single-GPU probe runs; `None` for the pair probe (`p2p_copy`, the
/// simulator's [`Node::peer_benchmark`]).
pub fn benchmark(kind: ProbeKind) -> Option<Benchmark> {
    Some(match kind {
        ProbeKind::GemmBf16 => Benchmark::Gemm(Precision::Bf16),
        ProbeKind::GemmFp16 => Benchmark::Gemm(Precision::Fp16),
        ProbeKind::GemmTf32 => Benchmark::Gemm(Precision::Tf32),
        ProbeKind::GemmFp32 => Benchmark::Gemm(Precision::Fp32),
        ProbeKind::GemmFp64 => Benchmark::Gemm(Precision::Fp64),
        ProbeKind::CopyD2D => Benchmark::Copy(Transfer::DeviceToDevice),
        ProbeKind::CopyH2D => Benchmark::Copy(Transfer::HostToDevice),
        ProbeKind::CopyD2H => Benchmark::Copy(Transfer::DeviceToHost),
        ProbeKind::LaunchLatency => Benchmark::LaunchLatency,
        ProbeKind::P2pCopy => return None,
    })
}

fn probe_error(e: BenchmarkError) -> ProbeError {
    match e {
        BenchmarkError::NoRates { .. } => ProbeError::Unavailable(e.to_string()),
        e => ProbeError::Cuda(e.to_string()),
    }
}

/// Runs probes on the simulator.
pub struct SimBackend {
    shared: Handle,
    held: Option<Duration>,
}

impl Backend for SimBackend {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        let s = lock(&self.shared);
        Ok((0..s.node.gpu_count())
            .filter_map(|i| s.node.gpu(i))
            .filter(|g| g.mig.is_none())
            .map(|g| GpuId {
                ordinal: g.index as usize,
                uuid: g.uuid.clone(),
                model: g.name.clone(),
            })
            .collect())
    }

    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        let mut s = lock(&self.shared);
        let t = s.now();
        self.held = None;
        let b = benchmark(kind)
            .ok_or_else(|| ProbeError::Config(format!("{kind} runs on a pair of GPUs")))?;
        let run = s.node.benchmark(gpu.ordinal, t, b).map_err(probe_error)?;
        self.held = Some(run.held);
        Ok(run.values)
    }

    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        _: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        let mut s = lock(&self.shared);
        let t = s.now();
        self.held = None;
        let run = s
            .node
            .peer_benchmark(gpu.ordinal, peer.ordinal, t)
            .map_err(probe_error)?;
        self.held = Some(run.held);
        Ok(run.values)
    }

    fn read_storage(
        &mut self,
        path: &std::path::Path,
        allowed: &[std::path::PathBuf],
        bytes: u64,
    ) -> Result<dgx_pixels_probes::storage::StorageRead, ProbeError> {
        self.held = None;
        // As the worker does, but on the names only: nothing of the host is read.
        if !allowed.iter().any(|a| a == path) {
            return Err(ProbeError::Config(format!(
                "storage_read: {} is not one of the configured storage paths",
                path.display()
            )));
        }
        let s = lock(&self.shared);
        let run = s
            .node
            .storage_read(&path.display().to_string(), bytes, s.now());
        self.held = Some(run.held);
        Ok(dgx_pixels_probes::storage::StorageRead {
            file: path.to_path_buf(),
            bytes,
            bytes_per_second: run.bytes_per_second,
            // A simulated mount has no page cache to bypass or not: served as a direct read.
            direct: true,
        })
    }

    fn run_nccl(&mut self, gpus: &[GpuId], max_bytes: u64) -> Result<AllReduce, ProbeError> {
        let mut s = lock(&self.shared);
        let t = s.now();
        self.held = None;
        let ordinals: Vec<usize> = gpus.iter().map(|g| g.ordinal).collect();
        let sizes = dgx_pixels_probes::nccl::message_sizes(max_bytes);
        let run = s
            .node
            .allreduce_benchmark(&ordinals, &sizes, t)
            .map_err(probe_error)?;
        self.held = Some(run.held);
        Ok(AllReduce {
            gpus: gpus.len(),
            version: "simulated".into(),
            sizes: run
                .sizes
                .into_iter()
                .map(|(bytes, algbw, busbw)| SizeResult {
                    bytes,
                    algbw,
                    busbw,
                    busbw_values: vec![busbw],
                })
                .collect(),
        })
    }

    fn held_for(&self) -> Option<Duration> {
        self.held
    }
}

/// The simulator's utilization of a GPU now, by UUID; none for a lost GPU (or one that does not
/// report it).
pub struct SimUtilization(Handle);

impl UtilizationView for SimUtilization {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        let mut s = lock(&self.0);
        let i = *s.index.get(uuid)?;
        let t = s.now();
        match s.node.reading(i, t)? {
            GpuState::Ok(r) => Some((u32::try_from(i).ok()?, r.readout.utilization_ratio?)),
            GpuState::Lost { .. } => None,
        }
    }
}

/// The simulated probes source over `node` on `schedule` (`[probes]`), whose scenario time
/// started at `started` (the simulated node's own start, so both read the same moment), with
/// the daemon's checks reading `view`: the daemon's device view, as on hardware, so a GPU the
/// job's process is on is `skipped_in_use` and one a pod or HPC job holds `skipped_held`
/// (never a number measured under the job's load, which a real worker would discard).
pub fn source_over<U: UtilizationView>(
    schedule: ScheduleSettings,
    node: Node,
    started: Instant,
    view: U,
) -> Result<ProbeSource<SimBackend, U>, ProbeError> {
    let (backend, _) = backend(node, started);
    ProbeSource::new(backend, view, schedule)
}

/// As [`source_over`] with the simulator's own utilization as the view (no holders, no
/// processes): the model alone, busy GPUs probed where `busy_threshold` lets them.
pub fn source(
    schedule: ScheduleSettings,
    node: Node,
    started: Instant,
) -> Result<ProbeSource<SimBackend, SimUtilization>, ProbeError> {
    let (backend, shared) = backend(node, started);
    ProbeSource::new(backend, SimUtilization(shared), schedule)
}

fn backend(node: Node, started: Instant) -> (SimBackend, Handle) {
    let index = (0..node.gpu_count())
        .filter_map(|i| Some((node.gpu(i)?.uuid.clone(), i)))
        .collect();
    let shared = Arc::new(Mutex::new(Shared {
        node,
        started,
        index,
    }));
    let backend = SimBackend {
        shared: Arc::clone(&shared),
        held: None,
    };
    (backend, shared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_metrics::{Metric, Sample, Source};
    use dgx_pixels_sim::Scenario;

    fn settings() -> ScheduleSettings {
        ScheduleSettings {
            settle: Duration::ZERO,
            ..ScheduleSettings::default()
        }
    }

    fn node(name: &str) -> Node {
        Node::new(Scenario::builtin(name).unwrap())
    }

    fn find<'a>(out: &'a [Sample], m: Metric, labels: &[&str]) -> Option<&'a Sample> {
        out.iter()
            .find(|s| s.metric == m && labels.iter().zip(s.label_values()).all(|(a, b)| *a == b))
    }

    #[test]
    fn the_node_probes_serve_the_models_storage_and_fabric() {
        // A mount degraded from the start, another path at the default rate, and NCCL over
        // every GPU (busy ones allowed: dgx-h100 trains).
        let mut text = Scenario::builtin_text("dgx-h100").unwrap().to_string();
        text.push_str(
            "\n[[storage]]\npath = \"/raid\"\nread_bytes_per_second = 20e9\n\
             degraded_at_s = 0\ndegraded_factor = 0.25\n",
        );
        let cfg = ScheduleSettings {
            busy_threshold: 1.0,
            storage_paths: vec!["/raid".into(), "/data".into()],
            nccl_allreduce: true,
            ..settings()
        };
        let n = Node::new(Scenario::from_toml_str(&text, "s.toml").unwrap());
        let mut s = source(cfg, n, Instant::now()).unwrap();
        let mut out = Vec::new();
        for _ in 0..4 {
            out = s.poll().unwrap().samples;
        }
        let read = |path: &str| find(&out, Metric::ProbeStorageRead, &[path]).map(|x| x.value);
        let raid = read("/raid").unwrap();
        assert!((raid / 5e9 - 1.0).abs() <= 0.02, "{raid}");
        let data = read("/data").unwrap();
        let default = dgx_pixels_sim::storage::DEFAULT_READ_BYTES_PER_SECOND;
        assert!((data / default - 1.0).abs() <= 0.02, "{data}");
        let bus = find(&out, Metric::ProbeNcclLargestBusBandwidth, &[])
            .unwrap_or_else(|| panic!("no all-reduce: {out:?}"))
            .value;
        // The training job's 150 GB/s of NVLink traffic leaves the ring less than 370 GB/s.
        assert!(bus > 100e9 && bus < 370e9, "{bus}");
        assert_eq!(find(&out, Metric::ProbeNcclGpus, &[]).unwrap().value, 8.0);
    }

    #[test]
    fn busy_gpus_are_left_alone_as_on_hardware() {
        // dgx-h100 40 s into its cycle: its job runs on GPUs 0-6 from 30 s (GPU 7 joins at
        // 50 s): those are skipped as busy, the idle one is measured.
        let started = Instant::now() - Duration::from_secs(40);
        let mut s = source(settings(), node("dgx-h100"), started).unwrap();
        for _ in 0..8 {
            s.poll().unwrap();
        }
        let out = s.poll().unwrap().samples;
        let mut measured: Vec<_> = out
            .iter()
            .filter(|x| {
                matches!(
                    x.metric,
                    Metric::ProbeGemm | Metric::ProbeBandwidth | Metric::ProbeLaunchLatency
                )
            })
            .map(|x| x.label_values()[0].to_string())
            .collect();
        measured.dedup();
        assert_eq!(measured, ["7"]);
        let skipped = out.iter().find(|x| {
            x.metric == Metric::ProbeRuns
                && x.label_values()[0] == "0"
                && x.label_values()[2] == "gemm_bf16"
                && x.label_values()[3] == "skipped_busy"
        });
        assert_eq!(skipped.map(|x| x.value), Some(1.0));
    }

    #[test]
    fn probes_measure_what_the_simulator_says_at_the_pace_of_real_ones() {
        // With busy GPUs allowed, each GPU is probed in turn, one probe per poll: the first
        // pass runs each GPU's two kinds one after the other (GPUs 0-3 start with the GEMM,
        // 4-7 with the copy), the second once the first has held the GPU its 330 ms.
        let cfg = ScheduleSettings {
            busy_threshold: 1.0,
            probes: dgx_pixels_probes::probe::parse_list("gemm_bf16,copy_h2d").unwrap(),
            settle: Duration::ZERO,
            ..ScheduleSettings::default()
        };
        let started = Instant::now() - Duration::from_secs(60);
        let mut s = source(cfg, node("dgx-h100"), started).unwrap();
        let mut out = Vec::new();
        for _ in 0..8 {
            out = s.poll().unwrap().samples;
        }
        std::thread::sleep(Duration::from_millis(340));
        for _ in 0..8 {
            out = s.poll().unwrap().samples;
        }
        let mut n = node("dgx-h100");
        for gpu in 0..8 {
            let label = gpu.to_string();
            let uuid = n.gpu(gpu).unwrap().uuid.clone();
            let served = find(&out, Metric::ProbeGemm, &[&label, &uuid, "gemm_bf16"])
                .unwrap_or_else(|| panic!("GPU {gpu} probed: {out:?}"))
                .value;
            // The median of the simulator's values around the poll's moment.
            let want = n
                .benchmark(
                    gpu,
                    started.elapsed(),
                    benchmark(ProbeKind::GemmBf16).unwrap(),
                )
                .unwrap()
                .values;
            let lo = want.iter().copied().fold(f64::MAX, f64::min) * 0.95;
            let hi = want.iter().copied().fold(0.0, f64::max) * 1.05;
            assert!((lo..=hi).contains(&served), "{lo} <= {served} <= {hi}");
            let fraction = find(
                &out,
                Metric::ProbePeakFraction,
                &[&label, &uuid, "gemm_bf16"],
            )
            .unwrap()
            .value;
            assert!((0.3..0.9).contains(&fraction), "{fraction}");
        }
        // The simulated run held the GPU for the modelled time: the histogram has it, and
        // after its first pass a GPU rests the pass's runs' rests (each held / duty cycle,
        // 330 ms / 0.005 = 66 s).
        let sum = out
            .iter()
            .find(|x| x.metric == Metric::ProbeDuration && x.label_values()[0] == "0")
            .map(|x| x.value);
        assert!(sum.is_some());
        let ok = |out: &[Sample]| -> f64 {
            out.iter()
                .filter(|x| x.metric == Metric::ProbeRuns && x.label_values()[3] == "ok")
                .map(|x| x.value)
                .sum()
        };
        assert_eq!(ok(&out), 16.0, "each GPU's first pass");
        std::thread::sleep(Duration::from_millis(340));
        let again = s.poll().unwrap().samples;
        assert_eq!(ok(&again), 16.0, "not due yet");
    }

    #[test]
    fn mig_gpus_are_not_probed_and_lost_gpus_are_skipped() {
        let mut s = source(settings(), node("dgx-a100-mig"), Instant::now()).unwrap();
        let gpus = s_gpus(&mut s);
        assert_eq!(gpus, ["2", "3", "4", "5", "6", "7"]);
        let started = Instant::now() - Duration::from_secs(40);
        let mut s = source(settings(), node("fault-gpu-lost"), started).unwrap();
        for _ in 0..8 {
            s.poll().unwrap();
        }
        let out = s.poll().unwrap().samples;
        // Counted against the kind its rotation was at, whichever that is.
        let lost: f64 = out
            .iter()
            .filter(|x| {
                x.metric == Metric::ProbeRuns
                    && x.label_values()[0] == "3"
                    && x.label_values()[3] == "skipped_no_utilization"
            })
            .map(|x| x.value)
            .sum();
        assert_eq!(lost, 1.0);
    }

    fn s_gpus(s: &mut ProbeSource<SimBackend, SimUtilization>) -> Vec<String> {
        let out = s.poll().unwrap().samples;
        let mut gpus: Vec<String> = out
            .iter()
            .filter(|x| x.metric == Metric::ProbeRuns)
            .map(|x| x.label_values()[0].to_string())
            .collect();
        gpus.dedup();
        gpus
    }
}
