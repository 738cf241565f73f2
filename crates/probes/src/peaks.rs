//! Published peak rates per GPU model, to export the fraction of peak a probe achieved.
//!
//! Dense (no structured sparsity) tensor-core rates and HBM bandwidth from NVIDIA's data
//! sheets. A model missing here, or a rate a data sheet does not give, exports no fraction:
//! a guessed peak would make the ratio a lie.

use crate::probe::ProbeKind;

/// Peak rates of one model; FLOP/s and bytes/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    /// Model names as NVML and CUDA report them.
    pub names: &'static [&'static str],
    /// Dense bf16 (= fp16) tensor-core FLOP/s.
    pub bf16: f64,
    /// Dense TF32 tensor-core FLOP/s.
    pub tf32: f64,
    /// FP32 (non-tensor) FLOP/s.
    pub fp32: f64,
    /// FP64 FLOP/s (tensor core where the GPU has FP64 tensor cores, which cuBLAS uses).
    pub fp64: f64,
    /// Memory bandwidth, bytes/s.
    pub memory_bandwidth: f64,
}

const T: f64 = 1e12;

/// The table.
pub static PEAKS: &[Peaks] = &[
    Peaks {
        names: &[
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 SXM5 80GB",
            "NVIDIA H100",
        ],
        bf16: 989.4 * T,            // fact: peak.h100-sxm.bf16
        tf32: 494.7 * T,            // fact: peak.h100-sxm.tf32
        fp32: 66.9 * T,             // fact: peak.h100-sxm.fp32
        fp64: 66.9 * T,             // fact: peak.h100-sxm.fp64
        memory_bandwidth: 3.35 * T, // fact: peak.h100-sxm.memory
    },
    Peaks {
        names: &["NVIDIA H100 PCIe"],
        bf16: 756.5 * T,           // fact: peak.h100-pcie.bf16
        tf32: 378.0 * T,           // fact: peak.h100-pcie.tf32
        fp32: 51.2 * T,            // fact: peak.h100-pcie.fp32
        fp64: 51.2 * T,            // fact: peak.h100-pcie.fp64
        memory_bandwidth: 2.0 * T, // fact: peak.h100-pcie.memory
    },
    Peaks {
        names: &["NVIDIA H200"],
        bf16: 989.4 * T,           // fact: peak.h200.bf16
        tf32: 494.7 * T,           // fact: peak.h200.tf32
        fp32: 66.9 * T,            // fact: peak.h200.fp32
        fp64: 66.9 * T,            // fact: peak.h200.fp64
        memory_bandwidth: 4.8 * T, // fact: peak.h200.memory
    },
    Peaks {
        names: &["NVIDIA A100-SXM4-80GB"],
        bf16: 312.0 * T,             // fact: peak.a100-sxm4-80gb.bf16
        tf32: 156.0 * T,             // fact: peak.a100-sxm4-80gb.tf32
        fp32: 19.5 * T,              // fact: peak.a100-sxm4-80gb.fp32
        fp64: 19.5 * T,              // fact: peak.a100-sxm4-80gb.fp64
        memory_bandwidth: 2.039 * T, // fact: peak.a100-sxm4-80gb.memory
    },
    Peaks {
        names: &["NVIDIA A100-SXM4-40GB"],
        bf16: 312.0 * T,             // fact: peak.a100-sxm4-40gb.bf16
        tf32: 156.0 * T,             // fact: peak.a100-sxm4-40gb.tf32
        fp32: 19.5 * T,              // fact: peak.a100-sxm4-40gb.fp32
        fp64: 19.5 * T,              // fact: peak.a100-sxm4-40gb.fp64
        memory_bandwidth: 1.555 * T, // fact: peak.a100-sxm4-40gb.memory
    },
    Peaks {
        names: &["NVIDIA A100 80GB PCIe"],
        bf16: 312.0 * T,             // fact: peak.a100-pcie-80gb.bf16
        tf32: 156.0 * T,             // fact: peak.a100-pcie-80gb.tf32
        fp32: 19.5 * T,              // fact: peak.a100-pcie-80gb.fp32
        fp64: 19.5 * T,              // fact: peak.a100-pcie-80gb.fp64
        memory_bandwidth: 1.935 * T, // fact: peak.a100-pcie-80gb.memory
    },
    Peaks {
        names: &["NVIDIA B200"],
        bf16: 2250.0 * T,          // fact: peak.b200.bf16
        tf32: 1100.0 * T,          // fact: peak.b200.tf32
        fp32: 75.0 * T,            // fact: peak.b200.fp32
        fp64: 37.0 * T,            // fact: peak.b200.fp64
        memory_bandwidth: 7.7 * T, // fact: peak.b200.memory
    },
    Peaks {
        names: &["NVIDIA GB200"],
        bf16: 2500.0 * T,          // fact: peak.gb200.bf16
        tf32: 1250.0 * T,          // fact: peak.gb200.tf32
        fp32: 80.0 * T,            // fact: peak.gb200.fp32
        fp64: 40.0 * T,            // fact: peak.gb200.fp64
        memory_bandwidth: 8.0 * T, // fact: peak.gb200.memory
    },
];

/// NVLink bandwidth of one GPU in one direction (half the data sheets' bidirectional figure),
/// for `p2p_copy`: what one GPU can send to the others over all its links. Parts without
/// NVLink, or with a bridge that joins only a pair (PCIe cards), have no entry. Sources, in
/// docs/probes.md ("Expected P2P bandwidth"): the A100 data sheet (NVLink 600 GB/s, SXM4),
/// the H100 data sheet (900 GB/s, SXM5), the H200 data sheet (900 GB/s, SXM) and the
/// HGX/DGX B200 and GB200 NVL72 data sheets (fifth-generation NVLink, 1.8 TB/s per GPU).
pub static NVLINK_PER_DIRECTION: &[(&[&str], f64)] = &[
    (
        &[
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 SXM5 80GB",
            "NVIDIA H100",
            "NVIDIA H200",
        ],
        450e9, // fact: nvlink.per-direction.hopper
    ),
    (&["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"], 300e9), // fact: nvlink.per-direction.a100
    (&["NVIDIA B200"], 900e9),                                    // fact: nvlink.per-direction.b200
    (&["NVIDIA GB200"], 900e9), // fact: nvlink.per-direction.gb200
];

/// The per-direction NVLink bandwidth of `model` ([`NVLINK_PER_DIRECTION`]).
pub fn nvlink_per_direction(model: &str) -> Option<f64> {
    let model = model.trim();
    NVLINK_PER_DIRECTION
        .iter()
        .find(|(names, _)| names.contains(&model))
        .map(|(_, v)| *v)
}

/// Expected NCCL all-reduce bus bandwidth (nccl-tests' `busbw`, ring algorithm: the
/// `nccl_allreduce` probe turns NVLink SHARP off) of a node of NVSwitch-connected GPUs of a
/// part, bytes per second: measured figures only, since the health rule and the alert compare
/// against them. Sources, in docs/probes.md ("Expected NCCL bus bandwidth"): 8 x H100 reach
/// about 370 GB/s in a ring (nccl-tests issues 212 and 309, 368.76 GB/s measured); H200 has the
/// same NVLink 4 and switches. No A100 or B200 row (issue 43): the A100 figure once here (205
/// GB/s) came from a 2-GPU run on NVLink-bridged pairs (nccl-tests issue 178), not an 8-GPU
/// NVSwitch node, and the B200 one (740 GB/s) was a derivation; neither is served or alerted
/// on until a measured 8-GPU figure is.
pub static NCCL_RING_BUS_BANDWIDTH: &[(&[&str], f64)] = &[(
    &[
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 SXM5 80GB",
        "NVIDIA H100",
        "NVIDIA H200",
    ],
    370e9, // fact: nccl.ring-busbw.hopper
)];

/// The metrics framework's targets (../shared/seeds/metrics-framework.md): NCCL bus bandwidth
/// across 8 GPUs and storage read throughput, bytes per second.
pub const TARGET_NCCL_BUS_BANDWIDTH: f64 = 200e9; // fact: target.nccl-busbw
/// See [`TARGET_NCCL_BUS_BANDWIDTH`].
pub const TARGET_STORAGE_READ: f64 = 8e9; // fact: target.storage-read

/// The expected all-reduce bus bandwidth of a node of `model` GPUs
/// ([`NCCL_RING_BUS_BANDWIDTH`]).
pub fn nccl_ring_bus_bandwidth(model: &str) -> Option<f64> {
    let model = model.trim();
    NCCL_RING_BUS_BANDWIDTH
        .iter()
        .find(|(names, _)| names.contains(&model))
        .map(|(_, v)| *v)
}

/// The peaks of `model`, if the table knows it.
pub fn lookup(model: &str) -> Option<&'static Peaks> {
    let model = model.trim();
    PEAKS.iter().find(|p| p.names.contains(&model))
}

/// The published peak of `kind` on `model`; `None` for unknown models and for probes without
/// a published peak (host copies and launch latency depend on the host and PCIe link); for
/// `p2p_copy`, the per-direction NVLink bandwidth.
pub fn peak(model: &str, kind: ProbeKind) -> Option<f64> {
    if kind == ProbeKind::P2pCopy {
        return nvlink_per_direction(model);
    }
    let p = lookup(model)?;
    match kind {
        ProbeKind::GemmBf16 | ProbeKind::GemmFp16 => Some(p.bf16),
        ProbeKind::GemmTf32 => Some(p.tf32),
        ProbeKind::GemmFp32 => Some(p.fp32),
        ProbeKind::GemmFp64 => Some(p.fp64),
        ProbeKind::CopyD2D => Some(p.memory_bandwidth),
        ProbeKind::CopyH2D | ProbeKind::CopyD2H | ProbeKind::LaunchLatency | ProbeKind::P2pCopy => {
            None
        }
    }
}

/// `value / peak` for a probe result on `model`, when the peak is known.
pub fn fraction(model: &str, kind: ProbeKind, value: f64) -> Option<f64> {
    peak(model, kind).map(|p| value / p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h100_sxm_peaks_are_the_published_ones() {
        assert_eq!(
            peak("NVIDIA H100 80GB HBM3", ProbeKind::GemmBf16),
            Some(989.4e12)
        );
        assert_eq!(
            peak("NVIDIA H100 80GB HBM3", ProbeKind::CopyD2D),
            Some(3.35e12)
        );
        let f = fraction("NVIDIA H100 80GB HBM3", ProbeKind::GemmBf16, 700e12);
        assert!(f.is_some_and(|f| (f - 700.0 / 989.4).abs() < 1e-12));
    }

    #[test]
    fn unknown_models_and_unpublished_rates_have_no_fraction() {
        assert_eq!(fraction("NVIDIA GB10", ProbeKind::GemmBf16, 1.0), None);
        assert_eq!(
            fraction("NVIDIA H100 80GB HBM3", ProbeKind::CopyH2D, 1.0),
            None
        );
        assert_eq!(
            fraction("NVIDIA H100 80GB HBM3", ProbeKind::LaunchLatency, 1.0),
            None
        );
    }

    #[test]
    fn p2p_peaks_are_half_the_published_nvlink_bandwidth() {
        let p = |m| peak(m, ProbeKind::P2pCopy);
        assert_eq!(p("NVIDIA H100 80GB HBM3"), Some(450e9));
        assert_eq!(p("NVIDIA H200"), Some(450e9));
        assert_eq!(p("NVIDIA A100-SXM4-80GB"), Some(300e9));
        assert_eq!(p("NVIDIA B200"), Some(900e9));
        // PCIe cards (a bridge joins a pair at most) and unknown parts: no fraction.
        assert_eq!(p("NVIDIA H100 PCIe"), None);
        assert_eq!(p("NVIDIA GB10"), None);
        let mut all: Vec<_> = NVLINK_PER_DIRECTION
            .iter()
            .flat_map(|(n, _)| n.iter())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn expected_nccl_bus_bandwidth_only_for_measured_parts() {
        assert_eq!(
            nccl_ring_bus_bandwidth("NVIDIA H100 80GB HBM3"),
            Some(370e9)
        );
        assert_eq!(nccl_ring_bus_bandwidth(" NVIDIA H200 "), Some(370e9));
        // No measured 8-GPU figure: nothing expected, nothing alerted on (issue 43).
        assert_eq!(nccl_ring_bus_bandwidth("NVIDIA A100-SXM4-40GB"), None);
        assert_eq!(nccl_ring_bus_bandwidth("NVIDIA B200"), None);
        assert_eq!(nccl_ring_bus_bandwidth("NVIDIA H100 PCIe"), None);
        // Every expected figure is at or above the seed's A100-class target.
        assert!(NCCL_RING_BUS_BANDWIDTH
            .iter()
            .all(|(_, v)| *v >= TARGET_NCCL_BUS_BANDWIDTH));
    }

    #[test]
    fn model_names_are_unique() {
        let mut all: Vec<_> = PEAKS.iter().flat_map(|p| p.names.iter()).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
