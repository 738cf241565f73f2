//! What a GPU-to-GPU copy (the exporter's `p2p_copy` probe) would measure between two
//! simulated GPUs, from the same readings as everything else.
//!
//! The topology is the DGX one: every GPU's NVLink links go to the node's NVSwitches, so any
//! two GPUs are connected by as many links as the poorer of the two has up. A copy from `src`
//! to `dst` runs at that many links' per-direction rate times [`P2P_EFFICIENCY_MODEL`], less
//! what the workload already sends from `src` or receives at `dst`; a link that an `nvlink_down`
//! fault takes down slows every pair of its GPU. Without NVLink (or with every link down) the
//! copy crosses PCIe: the slower of the two links as trained now.

use std::time::Duration;

use crate::bench::{BenchmarkError, BenchmarkRun};
use crate::noise;
use crate::types::{GpuReading, GpuStatic};
use crate::{GpuState, Node};

/// The simulator's model of the share of the links' per-direction rate a large copy-engine
/// peer copy reaches: a parameter of the simulated node that shapes its figures, no sourced
/// fact and no threshold. No rule or alert compares with it (issue 43): `p2p_copy` results are
/// judged against the node's own pairs (deploy/prometheus, docs/probes.md).
pub const P2P_EFFICIENCY_MODEL: f64 = 0.85; // fact: sim.p2p-efficiency-model
/// The simulator's model of the share of the PCIe line rate a peer copy over PCIe reaches.
const PCIE_P2P_EFFICIENCY_MODEL: f64 = 0.80; // fact: sim.pcie-p2p-efficiency-model
/// Noise stream of peer copy values (the benchmarks' streams are 0x200 and up).
const S_PEER: u64 = 0x300;
/// Values a run measures, and the time it holds both GPUs: two contexts, one iteration of
/// about 20 ms each after one warm-up (the probes' sizing).
const ITERATIONS: u64 = 3;
const HELD: Duration = Duration::from_millis(2 * 150 + 20 * (ITERATIONS + 1));
/// The share of the links a probe keeps however busy they are.
pub(crate) const MIN_LINK_SHARE: f64 = 0.05;

/// Bytes per second of one NVLink link in one direction, by architecture (NVLink 2: 25 GB/s
/// per direction per link on V100; NVLink 3 on A100: 25; NVLink 4 on H100: 25, with 18 links
/// where A100 has 12; NVLink 5 on Blackwell: 50). `None`: unknown, no NVLink model.
pub fn nvlink_link_bytes_per_second(architecture: &str) -> Option<f64> {
    match architecture {
        "Volta" | "Ampere" | "Hopper" => Some(25e9),
        "Blackwell" => Some(50e9),
        _ => None,
    }
}

pub(crate) fn links_up(r: &GpuReading) -> usize {
    r.readout.nvlinks.iter().filter(|l| l.up).count()
}

pub(crate) fn pcie_rate(r: &GpuReading) -> Option<f64> {
    let generation = r.readout.pcie_link_generation?;
    let width = r.readout.pcie_link_width?;
    // The same line rates as the host copies (bench.rs): GT/s per lane after encoding.
    let gt = match generation as u32 {
        0..=2 => 2.5e9 * f64::from(1u32 << (generation as u32).saturating_sub(1)) * 0.8,
        3 => 8.0e9 * 128.0 / 130.0,
        4 => 16.0e9 * 128.0 / 130.0,
        5 => 32.0e9 * 128.0 / 130.0,
        _ => 64.0e9 * 242.0 / 256.0,
    };
    Some(gt / 8.0 * width * PCIE_P2P_EFFICIENCY_MODEL)
}

/// The expected bandwidth (before noise) of a copy from `src` to `dst`, bytes per second.
pub fn peer_expected(
    src: (&GpuStatic, &GpuReading),
    dst: (&GpuStatic, &GpuReading),
) -> Result<f64, BenchmarkError> {
    let ((gs, rs), (gd, rd)) = (src, dst);
    let links = links_up(rs).min(links_up(rd));
    let per_link = nvlink_link_bytes_per_second(&gs.architecture)
        .zip(nvlink_link_bytes_per_second(&gd.architecture))
        .map(|(a, b)| a.min(b));
    if let (Some(per_link), true) = (per_link, links > 0) {
        let line = links as f64 * per_link * P2P_EFFICIENCY_MODEL;
        let traffic = rs
            .nvlink_tx_bytes_per_second
            .max(rd.nvlink_rx_bytes_per_second);
        return Ok((line - traffic).max(MIN_LINK_SHARE * line));
    }
    match (pcie_rate(rs), pcie_rate(rd)) {
        (Some(a), Some(b)) => Ok(a.min(b)),
        _ => Err(BenchmarkError::NoRates {
            model: gs.name.clone(),
            what: "peer copy",
        }),
    }
}

impl Node {
    /// The expected bandwidth of a copy from GPU `src` to GPU `dst` at time `t`
    /// ([`peer_expected`]); lost GPUs, GPUs in MIG mode and a GPU paired with itself cannot
    /// run it.
    pub fn peer_expected(
        &mut self,
        src: usize,
        dst: usize,
        t: Duration,
    ) -> Result<f64, BenchmarkError> {
        let mut side = |i: usize| -> Result<(GpuStatic, GpuReading), BenchmarkError> {
            let g = self.gpu(i).cloned().ok_or(BenchmarkError::NoSuchGpu(i))?;
            if g.mig.is_some() {
                return Err(BenchmarkError::MigMode(i));
            }
            match self.reading(i, t) {
                Some(GpuState::Ok(r)) => Ok((g, r)),
                _ => Err(BenchmarkError::Lost(i)),
            }
        };
        if src == dst {
            return Err(BenchmarkError::NoSuchGpu(dst));
        }
        let (gs, rs) = side(src)?;
        let (gd, rd) = side(dst)?;
        peer_expected((&gs, &rs), (&gd, &rd))
    }

    /// Runs the peer copy from `src` to `dst` at time `t`: three values around
    /// [`Node::peer_expected`] with about 1% deterministic noise, and how long the run held
    /// the two GPUs.
    pub fn peer_benchmark(
        &mut self,
        src: usize,
        dst: usize,
        t: Duration,
    ) -> Result<BenchmarkRun, BenchmarkError> {
        let mean = self.peer_expected(src, dst, t)?;
        let seed = self.scenario().seed();
        let step = u64::try_from(t.as_millis() / 100).unwrap_or(u64::MAX);
        let values = (0..ITERATIONS)
            .map(|i| {
                let n = noise::unit(seed, src as u64, S_PEER + dst as u64, step * 8 + i);
                mean * (1.0 + 0.01 * n)
            })
            .collect();
        Ok(BenchmarkRun { values, held: HELD })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Scenario;

    /// dgx-h100 with one more fault: `link` of GPU 3 down for good from the start.
    fn degraded(links: &[u32]) -> Node {
        let mut text = Scenario::builtin_text("dgx-h100").unwrap().to_string();
        for link in links {
            text.push_str(&format!(
                "\n[[faults]]\nkind = \"nvlink_down\"\ngpu = 3\nlink = {link}\nat_s = 0\n"
            ));
        }
        Node::new(Scenario::from_toml_str(&text, "degraded.toml").unwrap())
    }

    /// GPU `i`'s static facts and reading at `t`, with no NVLink traffic.
    fn quiet(n: &mut Node, i: usize, t: Duration) -> (GpuStatic, GpuReading) {
        let Some(GpuState::Ok(mut r)) = n.reading(i, t) else {
            panic!("GPU {i} is up")
        };
        r.nvlink_tx_bytes_per_second = 0.0;
        r.nvlink_rx_bytes_per_second = 0.0;
        (n.gpu(i).unwrap().clone(), r)
    }

    fn rate(n: &mut Node, src: usize, dst: usize, t: Duration) -> f64 {
        let (gs, rs) = quiet(n, src, t);
        let (gd, rd) = quiet(n, dst, t);
        peer_expected((&gs, &rs), (&gd, &rd)).unwrap()
    }

    #[test]
    fn an_idle_h100_pair_copies_at_the_share_of_eighteen_links() {
        let mut n = Node::new(Scenario::builtin("dgx-h100").unwrap());
        let t = Duration::from_secs(5);
        // 18 links x 25 GB/s per direction = 450 GB/s.
        let v = rate(&mut n, 0, 7, t);
        assert!((v - 450e9 * P2P_EFFICIENCY_MODEL).abs() < 1.0, "{v}");
        // Traffic on the links leaves less: the training phase sends 150 GB/s.
        let busy = n.peer_expected(0, 1, Duration::from_secs(60)).unwrap();
        assert!((busy - (v - 150e9)).abs() < 10e9, "{busy}");
        assert!(matches!(
            n.peer_expected(0, 0, t),
            Err(BenchmarkError::NoSuchGpu(0))
        ));
        let run = n.peer_benchmark(0, 7, t).unwrap();
        let mean = n.peer_expected(0, 7, t).unwrap();
        assert_eq!(run.values.len(), 3);
        assert!(run.values.iter().all(|v| (v / mean - 1.0).abs() <= 0.01));
        assert!(run.values.windows(2).any(|w| w[0] != w[1]));
        assert_eq!(run, n.peer_benchmark(0, 7, t).unwrap());
        let mut lost = Node::new(Scenario::builtin("fault-gpu-lost").unwrap());
        assert_eq!(
            lost.peer_benchmark(0, 3, Duration::from_secs(31)),
            Err(BenchmarkError::Lost(3))
        );
    }

    #[test]
    fn a_link_down_slows_every_pair_of_its_gpu_and_no_other() {
        let t = Duration::from_secs(5);
        let mut n = degraded(&[4, 9]);
        let healthy = rate(&mut n, 0, 1, t);
        let to3 = rate(&mut n, 0, 3, t);
        assert!(
            (to3 / healthy - 16.0 / 18.0).abs() < 1e-9,
            "{to3} {healthy}"
        );
        assert_eq!(rate(&mut n, 3, 6, t), to3);
        assert_eq!(rate(&mut n, 5, 6, t), healthy);
        // Every link of GPU 3 down: its copies cross PCIe gen5 x16.
        let mut pcie = degraded(&(0..18).collect::<Vec<_>>());
        let v = rate(&mut pcie, 2, 3, t);
        assert!((40e9..60e9).contains(&v), "{v}");
    }
}
