//! What a benchmark (the exporter's CUDA probes) would measure on a simulated GPU, from the
//! same physics as its readings.
//!
//! - GEMM throughput is the part's dense rate per SM clock times the SM clock a full load
//!   would get now ([`GpuReading::full_load_sm_clock_hz`]: lower when the GPU is hot or its
//!   power limit caps it), times the share of peak a large cuBLAS GEMM reaches for the
//!   precision, times the share of the GPU left by whatever else runs on it (a busy GPU is
//!   time-sliced between the workload and the probe).
//! - Device copy bandwidth (bytes read plus written) follows the memory clock and bus width,
//!   less the traffic the workload puts on it; host copies follow the PCIe link (generation
//!   and width), less the traffic already on it in that direction; a part without PCIe (GB10,
//!   unified memory) copies through its own memory.
//! - Launch latency is host and driver time plus a device part that grows as the clock
//!   falls, plus waiting for a time slice on a busy GPU.
//!
//! Each run yields a few values with deterministic noise (about 1%), and how long it held the
//! GPU. See [`Node::benchmark`].

use std::time::Duration;

use crate::noise;
use crate::types::{GpuReading, GpuStatic};
use crate::Node;

/// Number formats of the GEMM benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// bf16 inputs, fp32 accumulation (tensor cores).
    Bf16,
    /// fp16 inputs, fp32 accumulation (tensor cores).
    Fp16,
    /// fp32 inputs on TF32 tensor cores.
    Tf32,
    /// fp32 on the FP32 pipes.
    Fp32,
    /// fp64 (tensor cores where the part has FP64 tensor cores).
    Fp64,
}

/// Directions of the copy benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transfer {
    /// Device memory to device memory (bytes read plus written).
    DeviceToDevice,
    /// Pinned host memory to the device.
    HostToDevice,
    /// The device to pinned host memory.
    DeviceToHost,
}

/// One benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Benchmark {
    /// A large square GEMM: FLOP/s.
    Gemm(Precision),
    /// A large copy: bytes per second.
    Copy(Transfer),
    /// Round trip of an empty kernel: seconds.
    LaunchLatency,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkRun {
    /// One value per measured iteration (FLOP/s, bytes per second or seconds).
    pub values: Vec<f64>,
    /// How long the run held the GPU, context setup included.
    pub held: Duration,
}

/// Why a benchmark cannot run on a simulated GPU.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BenchmarkError {
    /// No GPU with that index.
    #[error("no GPU {0} on the simulated node")]
    NoSuchGpu(usize),
    /// The GPU has fallen off the bus.
    #[error("GPU {0} is lost")]
    Lost(usize),
    /// The GPU is in MIG mode: a benchmark needs a MIG instance of its own.
    #[error("GPU {0} is in MIG mode")]
    MigMode(usize),
    /// The simulator has no rates of this model for this benchmark.
    #[error("the simulator has no {what} rates for {model}")]
    NoRates {
        /// The GPU model.
        model: String,
        /// What is missing.
        what: &'static str,
    },
}

/// Rates of one part: dense FLOP per SM clock of the whole GPU, per precision, and the memory
/// bus width. From the SM counts and per-SM rates of NVIDIA's architecture whitepapers (H100
/// SXM5: 132 SMs; A100: 108 SMs; 5120-bit HBM; GB10: 256-bit LPDDR5X).
struct Rates {
    names: &'static [&'static str],
    /// `[bf16/fp16, tf32, fp32, fp64]`; `None` where the whitepaper gives no figure.
    flop_per_clock: Option<[f64; 4]>,
    memory_bus_bytes: f64,
}

const RATES: &[Rates] = &[
    Rates {
        names: &[
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 SXM5 80GB",
            "NVIDIA H100",
        ],
        // 132 SMs x (4096, 2048, 256, 256) FLOP per clock.
        flop_per_clock: Some([540_672.0, 270_336.0, 33_792.0, 33_792.0]),
        memory_bus_bytes: 640.0,
    },
    Rates {
        names: &["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"],
        // 108 SMs x (2048, 1024, 128, 128) FLOP per clock.
        flop_per_clock: Some([221_184.0, 110_592.0, 13_824.0, 13_824.0]),
        memory_bus_bytes: 640.0,
    },
    // NVIDIA publishes no SM count or per-SM rate for Blackwell parts: the data sheets' dense
    // peaks (docs/facts.md, peak.b200.* and peak.gb200.*) over the maximum SM clock of the
    // built-in scenarios (1,965 MHz B200, 2,062 MHz GB200); 8 HBM3e stacks of 1024 bits.
    Rates {
        names: &["NVIDIA B200"],
        flop_per_clock: Some([
            2.25e15 / 1.965e9,
            1.1e15 / 1.965e9,
            75e12 / 1.965e9,
            37e12 / 1.965e9,
        ]),
        memory_bus_bytes: 1024.0,
    },
    Rates {
        names: &["NVIDIA GB200"],
        flop_per_clock: Some([
            2.5e15 / 2.062e9,
            1.25e15 / 2.062e9,
            80e12 / 2.062e9,
            40e12 / 2.062e9,
        ]),
        memory_bus_bytes: 1024.0,
    },
    Rates {
        names: &["NVIDIA GB10"],
        flop_per_clock: None,
        memory_bus_bytes: 32.0,
    },
];

/// Share of the dense peak a large cuBLAS GEMM reaches, per precision (measured H100 and A100
/// results are 70-85% of the data-sheet peak).
fn gemm_efficiency(p: Precision) -> f64 {
    match p {
        Precision::Bf16 | Precision::Fp16 => 0.72,
        Precision::Tf32 => 0.70,
        Precision::Fp32 => 0.80,
        Precision::Fp64 => 0.85,
    }
}

/// Share of the DRAM peak a device copy reaches.
const COPY_EFFICIENCY: f64 = 0.90;
/// Share of the PCIe line rate left after packet overhead, host to device and back.
const H2D_EFFICIENCY: f64 = 0.86;
const D2H_EFFICIENCY: f64 = 0.82;
/// A host link busier than this keeps at least this share for the probe.
const MIN_LINK_SHARE: f64 = 0.05;
/// Launch latency: host and driver part, device part at the maximum clock, and the most a
/// fully busy GPU adds while the kernel waits for a time slice.
const LAUNCH_HOST_S: f64 = 2.5e-6;
const LAUNCH_DEVICE_S: f64 = 1.5e-6;
const LAUNCH_BUSY_S: f64 = 40e-6;
/// Iterations a run measures (after one warm-up), as the daemon's probes do.
const ITERATIONS: u64 = 3;
/// Time one iteration takes (the probes size their work for about 20 ms), and the context
/// setup of a run (CUDA context, and cuBLAS for a GEMM).
const ITERATION: Duration = Duration::from_millis(20);
const SETUP_GEMM: Duration = Duration::from_millis(250);
const SETUP: Duration = Duration::from_millis(150);
/// Noise stream of benchmark values.
const S_BENCH: u64 = 0x200;

fn rates(model: &str) -> Option<&'static Rates> {
    RATES.iter().find(|r| r.names.contains(&model.trim()))
}

/// Transfers per second of one PCIe lane, by generation, after line encoding, in bytes.
fn lane_bytes_per_second(generation: u32) -> f64 {
    let (gt, encoding) = match generation {
        0 | 1 => (2.5e9, 0.8),
        2 => (5.0e9, 0.8),
        3 => (8.0e9, 128.0 / 130.0),
        4 => (16.0e9, 128.0 / 130.0),
        5 => (32.0e9, 128.0 / 130.0),
        _ => (64.0e9, 242.0 / 256.0),
    };
    gt * encoding / 8.0
}

/// The expected value (before noise) of benchmark `b` on GPU `g` in state `r`.
pub fn expected(g: &GpuStatic, r: &GpuReading, b: Benchmark) -> Result<f64, BenchmarkError> {
    let no_rates = |what| BenchmarkError::NoRates {
        model: g.name.clone(),
        what,
    };
    // A reading the GPU lacks counts as idle (the simulator fills them all); the memory clock
    // is fixed, so its maximum stands in for a missing one.
    let readout = &r.readout;
    let busy = readout.utilization_ratio.unwrap_or(0.0).clamp(0.0, 1.0);
    let memory_busy = readout
        .memory_utilization_ratio
        .unwrap_or(0.0)
        .clamp(0.0, 1.0);
    let memory_hz = readout.clocks.memory.unwrap_or(g.max_clocks.memory_hz);
    let dram = || -> Result<f64, BenchmarkError> {
        let part = rates(&g.name).ok_or_else(|| no_rates("memory"))?;
        Ok(memory_hz * 2.0 * part.memory_bus_bytes * COPY_EFFICIENCY)
    };
    match b {
        Benchmark::Gemm(p) => {
            let per_clock = rates(&g.name)
                .and_then(|part| part.flop_per_clock)
                .ok_or_else(|| no_rates("GEMM"))?;
            let i = match p {
                Precision::Bf16 | Precision::Fp16 => 0,
                Precision::Tf32 => 1,
                Precision::Fp32 => 2,
                Precision::Fp64 => 3,
            };
            // Time-sliced with the workload: the probe gets about half of the busy time.
            Ok(per_clock[i] * r.full_load_sm_clock_hz * gemm_efficiency(p) * (1.0 - 0.5 * busy))
        }
        Benchmark::Copy(Transfer::DeviceToDevice) => Ok(dram()? * (1.0 - 0.5 * memory_busy)),
        Benchmark::Copy(t) => {
            let (efficiency, traffic) = if t == Transfer::HostToDevice {
                (H2D_EFFICIENCY, readout.pcie_receive_bytes_per_second)
            } else {
                (D2H_EFFICIENCY, readout.pcie_transmit_bytes_per_second)
            };
            let traffic = traffic.unwrap_or(0.0);
            // The link as trained now (a degraded link copies slower).
            let (Some(generation), Some(width)) =
                (readout.pcie_link_generation, readout.pcie_link_width)
            else {
                // Unified memory: a host copy reads and writes the same memory.
                return Ok(0.5 * dram()? * (1.0 - 0.5 * memory_busy));
            };
            let line = lane_bytes_per_second(generation as u32) * width * efficiency;
            Ok((line - traffic).max(MIN_LINK_SHARE * line))
        }
        Benchmark::LaunchLatency => {
            let max = g.max_clocks.sm_hz;
            let clock = r.full_load_sm_clock_hz.max(1.0);
            Ok(LAUNCH_HOST_S + LAUNCH_DEVICE_S * (max / clock).max(1.0) + LAUNCH_BUSY_S * busy)
        }
    }
}

fn code(b: Benchmark) -> u64 {
    match b {
        Benchmark::Gemm(p) => p as u64,
        Benchmark::Copy(t) => 8 + t as u64,
        Benchmark::LaunchLatency => 16,
    }
}

impl Node {
    /// Runs benchmark `b` on GPU `index` at time `t` since scenario start: [`ITERATIONS`]
    /// values around [`expected`] with about 1% deterministic noise, and how long the run
    /// held the GPU. A lost GPU or one in MIG mode cannot run it.
    pub fn benchmark(
        &mut self,
        index: usize,
        t: Duration,
        b: Benchmark,
    ) -> Result<BenchmarkRun, BenchmarkError> {
        let g = self
            .gpu(index)
            .cloned()
            .ok_or(BenchmarkError::NoSuchGpu(index))?;
        if g.mig.is_some() {
            return Err(BenchmarkError::MigMode(index));
        }
        let r = match self.reading(index, t) {
            Some(crate::GpuState::Ok(r)) => r,
            _ => return Err(BenchmarkError::Lost(index)),
        };
        let mean = expected(&g, &r, b)?;
        let seed = self.scenario().seed();
        let step = u64::try_from(t.as_millis() / 100).unwrap_or(u64::MAX);
        let values = (0..ITERATIONS)
            .map(|i| {
                let n = noise::unit(
                    seed,
                    index as u64,
                    S_BENCH + code(b),
                    step.wrapping_mul(8) + i,
                );
                mean * (1.0 + 0.01 * n)
            })
            .collect();
        let setup = if matches!(b, Benchmark::Gemm(_)) {
            SETUP_GEMM
        } else {
            SETUP
        };
        let held = setup + ITERATION * (ITERATIONS as u32 + 1);
        Ok(BenchmarkRun { values, held })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{GpuState, Scenario};
    use dgx_pixels_readout::labels::ThrottleReason;

    fn node(name: &str) -> Node {
        Node::new(Scenario::builtin(name).unwrap())
    }

    fn reading(n: &mut Node, gpu: usize, s: u64) -> GpuReading {
        match n.reading(gpu, Duration::from_secs(s)) {
            Some(GpuState::Ok(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    const BF16: Benchmark = Benchmark::Gemm(Precision::Bf16);

    /// Whether either thermal slowdown holds the clocks down.
    fn thermal(r: &GpuReading) -> Option<bool> {
        let reason = |t| r.readout.throttle_reason(t);
        Some(
            reason(ThrottleReason::HwThermalSlowdown)?
                || reason(ThrottleReason::SwThermalSlowdown)?,
        )
    }

    #[test]
    fn an_idle_h100_reaches_a_plausible_share_of_its_data_sheet_rates() {
        let mut h = node("dgx-h100");
        let g = h.gpu(0).unwrap().clone();
        let mut r = reading(&mut h, 0, 60);
        r.readout.utilization_ratio = Some(0.0);
        r.readout.memory_utilization_ratio = Some(0.0);
        r.readout.pcie_receive_bytes_per_second = Some(0.0);
        r.readout.pcie_transmit_bytes_per_second = Some(0.0);
        let e = |b| expected(&g, &r, b).unwrap();
        // Data sheet: 989.4 TFLOP/s bf16, 3.35 TB/s HBM3; PCIe gen5 x16 moves about 55 GB/s.
        let bf16 = e(BF16) / 989.4e12;
        assert!((0.65..0.85).contains(&bf16), "{bf16}");
        assert_eq!(e(BF16), e(Benchmark::Gemm(Precision::Fp16)));
        assert!(e(Benchmark::Gemm(Precision::Tf32)) < e(BF16));
        assert!(e(Benchmark::Gemm(Precision::Fp64)) < e(Benchmark::Gemm(Precision::Tf32)));
        let d2d = e(Benchmark::Copy(Transfer::DeviceToDevice)) / 3.35e12;
        assert!((0.85..0.95).contains(&d2d), "{d2d}");
        let h2d = e(Benchmark::Copy(Transfer::HostToDevice));
        assert!((50e9..58e9).contains(&h2d), "{h2d}");
        assert!(e(Benchmark::Copy(Transfer::DeviceToHost)) < h2d);
        let lat = e(Benchmark::LaunchLatency);
        assert!((3e-6..6e-6).contains(&lat), "{lat}");
    }

    #[test]
    fn gemm_follows_the_clock_a_full_load_gets_throttled_gpus_are_slower() {
        // fault-thermal: a cooling failure from 20 s heats GPU 5 past its slowdown temperature.
        let mut n = node("fault-thermal");
        let g = n.gpu(5).unwrap().clone();
        let cool = reading(&mut n, 5, 15);
        let hot = (20..120)
            .step_by(2)
            .map(|s| reading(&mut n, 5, s))
            .filter(|r| thermal(r) == Some(true))
            .min_by(|a, b| a.full_load_sm_clock_hz.total_cmp(&b.full_load_sm_clock_hz))
            .expect("fault-thermal throttles GPU 5");
        assert_eq!(thermal(&cool), Some(false));
        assert!(hot.full_load_sm_clock_hz < cool.full_load_sm_clock_hz);
        let rate = |r: &GpuReading| {
            expected(&g, r, BF16).unwrap() / (1.0 - 0.5 * r.readout.utilization_ratio.unwrap())
        };
        let ratio = rate(&hot) / rate(&cool);
        let clocks = hot.full_load_sm_clock_hz / cool.full_load_sm_clock_hz;
        assert!(
            (ratio - clocks).abs() < 1e-9,
            "GEMM scales with the clock: {ratio} {clocks}"
        );
        assert!(ratio < 0.95, "{ratio}");
    }

    #[test]
    fn the_power_cap_lowers_the_full_load_clock_of_an_h100() {
        let mut n = node("dgx-h100");
        let g = n.gpu(0).unwrap().clone();
        let r = reading(&mut n, 0, 60);
        // 735 W of demand at full clocks against a 700 W limit.
        assert!(r.full_load_sm_clock_hz < g.max_clocks.sm_hz);
        assert!(r.full_load_sm_clock_hz > 0.9 * g.max_clocks.sm_hz);
    }

    #[test]
    fn a_busy_gpu_and_a_busy_link_leave_less_to_the_probe() {
        let mut n = node("dgx-h100");
        let g = n.gpu(0).unwrap().clone();
        let busy = reading(&mut n, 0, 60); // training
        let mut idle = busy.clone();
        idle.readout.utilization_ratio = Some(0.0);
        idle.readout.memory_utilization_ratio = Some(0.0);
        idle.readout.pcie_receive_bytes_per_second = Some(0.0);
        for b in [BF16, Benchmark::Copy(Transfer::DeviceToDevice)] {
            assert!(expected(&g, &busy, b).unwrap() < expected(&g, &idle, b).unwrap());
        }
        let h2d = Benchmark::Copy(Transfer::HostToDevice);
        let gap = expected(&g, &idle, h2d).unwrap() - expected(&g, &busy, h2d).unwrap();
        assert!((gap - busy.readout.pcie_receive_bytes_per_second.unwrap()).abs() < 1.0);
        let lat = Benchmark::LaunchLatency;
        assert!(expected(&g, &busy, lat).unwrap() > expected(&g, &idle, lat).unwrap());
    }

    #[test]
    fn copy_bandwidth_follows_the_link_and_the_memory() {
        let mut a = node("dgx-a100-mig");
        let g = a.gpu(2).unwrap().clone(); // not MIG
        let mut r = reading(&mut a, 2, 60);
        r.readout.memory_utilization_ratio = Some(0.0);
        r.readout.pcie_receive_bytes_per_second = Some(0.0);
        // A100 80GB: 2.04 TB/s HBM2e; PCIe gen4 x16: half of gen5.
        let d2d = expected(&g, &r, Benchmark::Copy(Transfer::DeviceToDevice)).unwrap();
        assert!((d2d / 2.039e12 - COPY_EFFICIENCY).abs() < 0.01, "{d2d}");
        let h2d = expected(&g, &r, Benchmark::Copy(Transfer::HostToDevice)).unwrap();
        assert!((25e9..29e9).contains(&h2d), "{h2d}");
        // GB10 has no PCIe link and no published GEMM rates.
        let mut s = node("dgx-spark");
        let gs = s.gpu(0).unwrap().clone();
        assert!(gs.pcie_link.is_none());
        let rs = reading(&mut s, 0, 300);
        let host = expected(&gs, &rs, Benchmark::Copy(Transfer::HostToDevice)).unwrap();
        let dev = expected(&gs, &rs, Benchmark::Copy(Transfer::DeviceToDevice)).unwrap();
        assert_eq!(host, 0.5 * dev);
        assert!(matches!(
            expected(&gs, &rs, BF16),
            Err(BenchmarkError::NoRates { what: "GEMM", .. })
        ));
    }

    #[test]
    fn runs_are_deterministic_noisy_and_refused_on_lost_and_mig_gpus() {
        let mut n = node("dgx-h100");
        let t = Duration::from_secs(42);
        let a = n.benchmark(1, t, BF16).unwrap();
        let b = node("dgx-h100").benchmark(1, t, BF16).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.values.len(), ITERATIONS as usize);
        assert!(a.values.windows(2).any(|w| w[0] != w[1]));
        let r = reading(&mut n, 1, 42);
        let mean = expected(n.gpu(1).unwrap(), &r, BF16).unwrap();
        assert!(a.values.iter().all(|v| (v / mean - 1.0).abs() <= 0.01));
        assert_eq!(a.held, Duration::from_millis(330));
        assert_eq!(n.benchmark(9, t, BF16), Err(BenchmarkError::NoSuchGpu(9)));
        let mut lost = node("fault-gpu-lost");
        assert_eq!(
            lost.benchmark(3, Duration::from_secs(31), BF16),
            Err(BenchmarkError::Lost(3))
        );
        let mut mig = node("dgx-a100-mig");
        assert_eq!(mig.benchmark(0, t, BF16), Err(BenchmarkError::MigMode(0)));
        assert!(mig.benchmark(2, t, BF16).is_ok());
    }
}
