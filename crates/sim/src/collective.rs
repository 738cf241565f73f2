//! What an NCCL all-reduce (the exporter's `nccl_allreduce` probe) would measure across a set
//! of simulated GPUs, from the same readings and NVLink model as the peer copies
//! ([`crate::peer`]).
//!
//! A ring all-reduce moves `2(n-1)/n` of the buffer through every GPU's links in each
//! direction, so its bus bandwidth (nccl-tests' `busbw`) is bounded by the slowest GPU of the
//! ring: the links it has up times the per-link rate, less the traffic the workload already
//! sends, times [`RING_EFFICIENCY`]. A GPU without NVLink (or with every link down) joins the
//! ring over PCIe. Each call also pays a fixed latency per ring step, so small messages reach
//! far less than the peak, as on hardware.

use std::time::Duration;

use crate::bench::BenchmarkError;
use crate::peer::{links_up, nvlink_link_bytes_per_second, pcie_rate, MIN_LINK_SHARE};
use crate::types::{GpuReading, GpuStatic};
use crate::{GpuState, Node};

/// Share of a GPU's NVLink rate per direction a ring all-reduce's bus bandwidth reaches:
/// 8 x H100 (18 NVLink 4 links, 450 GB/s per direction) reach about 370 GB/s busbw in
/// nccl-tests' ring all-reduce (nccl-tests issue 212).
pub const RING_EFFICIENCY: f64 = 370.0 / 450.0;
/// Fixed cost of one ring step (a chunk handed to the next GPU), seconds.
pub const STEP_LATENCY_S: f64 = 3e-6;

/// The bus bandwidth (bytes per second, before latency and noise) of a ring all-reduce over
/// `gpus`: the slowest member's.
pub fn ring_bus_bandwidth(gpus: &[(&GpuStatic, &GpuReading)]) -> Result<f64, BenchmarkError> {
    let mut slowest = f64::INFINITY;
    for (g, r) in gpus {
        let links = links_up(r);
        let rate = match nvlink_link_bytes_per_second(&g.architecture) {
            Some(per_link) if links > 0 => {
                let line = links as f64 * per_link;
                let traffic = r
                    .nvlink_tx_bytes_per_second
                    .max(r.nvlink_rx_bytes_per_second);
                (line - traffic).max(MIN_LINK_SHARE * line) * RING_EFFICIENCY
            }
            _ => pcie_rate(r).ok_or_else(|| BenchmarkError::NoRates {
                model: g.name.clone(),
                what: "all-reduce",
            })?,
        };
        slowest = slowest.min(rate);
    }
    if slowest.is_finite() {
        Ok(slowest)
    } else {
        Err(BenchmarkError::NoRates {
            model: String::new(),
            what: "all-reduce (no GPU)",
        })
    }
}

/// Seconds one all-reduce of `bytes` per GPU over `n` GPUs takes at bus bandwidth `busbw`:
/// `2(n-1)` ring steps of latency, and `bytes x 2(n-1)/n` through each GPU's links.
pub fn allreduce_seconds(n: usize, bytes: u64, busbw: f64) -> f64 {
    let steps = 2.0 * n.saturating_sub(1) as f64;
    let moved = bytes as f64 * steps / n.max(1) as f64;
    steps * STEP_LATENCY_S + moved / busbw
}

/// nccl-tests' bus bandwidth from the algorithm bandwidth (`bytes / time`) of an all-reduce
/// over `n` GPUs: `algbw x 2(n-1)/n`.
pub fn bus_from_algorithm(algbw: f64, n: usize) -> f64 {
    algbw * 2.0 * n.saturating_sub(1) as f64 / n.max(1) as f64
}

impl Node {
    /// The bus bandwidth of a ring all-reduce over GPUs `gpus` at time `t`
    /// ([`ring_bus_bandwidth`]); it needs two distinct GPUs or more, none lost or in MIG mode.
    pub fn allreduce_bus_bandwidth(
        &mut self,
        gpus: &[usize],
        t: Duration,
    ) -> Result<f64, BenchmarkError> {
        let mut sides = Vec::with_capacity(gpus.len());
        for (k, &i) in gpus.iter().enumerate() {
            if gpus[..k].contains(&i) {
                return Err(BenchmarkError::NoSuchGpu(i));
            }
            let g = self.gpu(i).cloned().ok_or(BenchmarkError::NoSuchGpu(i))?;
            if g.mig.is_some() {
                return Err(BenchmarkError::MigMode(i));
            }
            match self.reading(i, t) {
                Some(GpuState::Ok(r)) => sides.push((g, r)),
                _ => return Err(BenchmarkError::Lost(i)),
            }
        }
        if sides.len() < 2 {
            return Err(BenchmarkError::NoRates {
                model: String::new(),
                what: "all-reduce of fewer than two GPUs",
            });
        }
        let refs: Vec<(&GpuStatic, &GpuReading)> = sides.iter().map(|(g, r)| (g, r)).collect();
        ring_bus_bandwidth(&refs)
    }

    /// What an all-reduce of `bytes` per GPU over `gpus` measures at `t` before noise:
    /// `(algbw, busbw)` in bytes per second, latency included.
    pub fn allreduce_expected(
        &mut self,
        gpus: &[usize],
        bytes: u64,
        t: Duration,
    ) -> Result<(f64, f64), BenchmarkError> {
        let peak = self.allreduce_bus_bandwidth(gpus, t)?;
        let algbw = bytes as f64 / allreduce_seconds(gpus.len(), bytes, peak);
        Ok((algbw, bus_from_algorithm(algbw, gpus.len())))
    }
}

/// Noise stream of all-reduce timings (the peer copies' is 0x300, storage's 0x400).
const S_ALLREDUCE: u64 = 0x500;

/// What a simulated `nccl_allreduce` run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReduceRun {
    /// `(bytes, algbw, busbw)` per message size, in the order asked.
    pub sizes: Vec<(u64, f64, f64)>,
    /// How long the run holds the GPUs: a context per GPU, then 5 timings of about 20 ms
    /// per size (the probe's sizing).
    pub held: Duration,
}

impl Node {
    /// Runs the all-reduce over `gpus` at each of `sizes` at `t`: the expected bandwidths with
    /// about 1% deterministic noise.
    pub fn allreduce_benchmark(
        &mut self,
        gpus: &[usize],
        sizes: &[u64],
        t: Duration,
    ) -> Result<AllReduceRun, BenchmarkError> {
        let seed = self.scenario().seed();
        let step = u64::try_from(t.as_millis() / 100).unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity(sizes.len());
        for (k, &bytes) in sizes.iter().enumerate() {
            let (alg, _) = self.allreduce_expected(gpus, bytes, t)?;
            let n = crate::noise::unit(seed, gpus.len() as u64, S_ALLREDUCE + k as u64, step);
            let alg = alg * (1.0 + 0.01 * n);
            out.push((bytes, alg, bus_from_algorithm(alg, gpus.len())));
        }
        let held = Duration::from_millis(150 * gpus.len() as u64 + 100 * sizes.len() as u64);
        Ok(AllReduceRun { sizes: out, held })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Scenario;

    const T: Duration = Duration::from_secs(5);

    /// The bus bandwidth over `gpus` of `n` with the workload's NVLink traffic taken away.
    fn quiet(n: &mut Node, gpus: &[usize]) -> f64 {
        let sides: Vec<(GpuStatic, GpuReading)> = gpus
            .iter()
            .map(|&i| {
                let Some(GpuState::Ok(mut r)) = n.reading(i, T) else {
                    panic!("GPU {i} is up")
                };
                r.nvlink_tx_bytes_per_second = 0.0;
                r.nvlink_rx_bytes_per_second = 0.0;
                (n.gpu(i).unwrap().clone(), r)
            })
            .collect();
        let refs: Vec<(&GpuStatic, &GpuReading)> = sides.iter().map(|(g, r)| (g, r)).collect();
        ring_bus_bandwidth(&refs).unwrap()
    }

    #[test]
    fn eight_idle_h100s_reach_the_published_ring_figure_at_large_sizes() {
        let mut n = Node::new(Scenario::builtin("dgx-h100").unwrap());
        let all: Vec<usize> = (0..8).collect();
        let peak = quiet(&mut n, &all);
        assert!((peak - 370e9).abs() < 1e3, "{peak}");
        let t = allreduce_seconds(8, 8 << 30, peak);
        let bus = bus_from_algorithm((8u64 << 30) as f64 / t, 8);
        assert!(bus > 0.99 * peak && bus < peak, "{bus}");
        // Small messages are latency bound.
        let small =
            bus_from_algorithm((1u64 << 20) as f64 / allreduce_seconds(8, 1 << 20, peak), 8);
        assert!(small < 0.5 * peak, "{small}");
        // The node's own answer includes the training traffic (150 GB/s on GPUs 0-6 at 60 s).
        let (alg, bus) = n
            .allreduce_expected(&all, 8 << 30, Duration::from_secs(60))
            .unwrap();
        assert!((bus / alg - 1.75).abs() < 1e-12);
        assert!(bus < 0.7 * peak, "{bus}");
        assert!(matches!(
            n.allreduce_bus_bandwidth(&[0], T),
            Err(BenchmarkError::NoRates { .. })
        ));
        assert_eq!(
            n.allreduce_bus_bandwidth(&[0, 0], T),
            Err(BenchmarkError::NoSuchGpu(0))
        );
        assert_eq!(
            n.allreduce_bus_bandwidth(&[0, 9], T),
            Err(BenchmarkError::NoSuchGpu(9))
        );
    }

    #[test]
    fn a_gpu_with_links_down_slows_the_whole_ring() {
        let mut text = Scenario::builtin_text("dgx-h100").unwrap().to_string();
        for link in 0..6 {
            text.push_str(&format!(
                "\n[[faults]]\nkind = \"nvlink_down\"\ngpu = 3\nlink = {link}\nat_s = 0\n"
            ));
        }
        let mut n = Node::new(Scenario::from_toml_str(&text, "degraded.toml").unwrap());
        let all: Vec<usize> = (0..8).collect();
        let ring = quiet(&mut n, &all);
        assert!((ring / 370e9 - 12.0 / 18.0).abs() < 1e-9, "{ring}");
        let without: Vec<usize> = all.iter().copied().filter(|&i| i != 3).collect();
        let healthy = quiet(&mut n, &without);
        assert!((healthy - 370e9).abs() < 1e3, "{healthy}");
    }
}
