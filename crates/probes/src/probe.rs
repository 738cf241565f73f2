//! What a probe is: its kind, unit, sizes and device memory needs (pure, no CUDA).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ProbeError;

/// The unit a probe's measurements are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeUnit {
    /// Floating-point operations per second.
    Flops,
    /// Bytes per second.
    BytesPerSecond,
    /// Seconds.
    Seconds,
}

impl ProbeUnit {
    /// Whether a larger value is better (throughput) or worse (latency).
    pub fn higher_is_better(self) -> bool {
        !matches!(self, ProbeUnit::Seconds)
    }

    /// Short unit name for tables.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeUnit::Flops => "FLOP/s",
            ProbeUnit::BytesPerSecond => "B/s",
            ProbeUnit::Seconds => "s",
        }
    }
}

macro_rules! probe_kinds {
    ($( $id:ident $name:literal $unit:ident $help:literal; )*) => {
        /// One probe workload.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ProbeKind { $( #[doc = $help] $id, )* }

        impl ProbeKind {
            /// Every probe, in the order they run.
            pub const ALL: &'static [ProbeKind] = &[$(ProbeKind::$id),*];

            /// The name used on the command line, in result files and in the `probe` label.
            pub fn name(self) -> &'static str {
                match self { $( ProbeKind::$id => $name, )* }
            }

            /// The unit of its measurements.
            pub fn unit(self) -> ProbeUnit {
                match self { $( ProbeKind::$id => ProbeUnit::$unit, )* }
            }

            /// One-line description.
            pub fn help(self) -> &'static str {
                match self { $( ProbeKind::$id => $help, )* }
            }
        }
    };
}

probe_kinds! {
    GemmBf16 "gemm_bf16" Flops "Square GEMM through cuBLAS, bf16 inputs and output, fp32 accumulation.";
    GemmFp16 "gemm_fp16" Flops "Square GEMM through cuBLAS, fp16 inputs and output, fp32 accumulation.";
    GemmTf32 "gemm_tf32" Flops "Square fp32 GEMM through cuBLAS with TF32 tensor cores allowed.";
    GemmFp32 "gemm_fp32" Flops "Square fp32 GEMM through cuBLAS in its default math mode (no TF32).";
    GemmFp64 "gemm_fp64" Flops "Square fp64 GEMM through cuBLAS.";
    CopyD2D "copy_d2d" BytesPerSecond "Device-to-device copy; bytes read plus bytes written per second.";
    CopyH2D "copy_h2d" BytesPerSecond "Host-to-device copy from pinned host memory.";
    CopyD2H "copy_d2h" BytesPerSecond "Device-to-host copy into pinned host memory.";
    LaunchLatency "launch_latency" Seconds "Round trip of an empty kernel: launch, then wait for completion.";
    P2pCopy "p2p_copy" BytesPerSecond "Copy from the GPU to a peer GPU with peer access enabled (NVLink, or PCIe without it); bytes per second in one direction.";
}

impl ProbeKind {
    /// What the daemon rotates through unless `[probes] probes` says otherwise: the tensor-core
    /// GEMM that training and diffusion run (fp16 takes the same path as bf16), device memory,
    /// the host link jobs load data over (device-to-host mirrors it) and the launch path. The
    /// TF32/FP32/FP64 GEMMs are for HPC nodes: each probe costs its GPUs three series and GPU
    /// time (docs/metrics.md, "Series budget"), so they are opt-in (`probes = "all"`).
    pub const DAEMON_DEFAULT: &'static [ProbeKind] = &[
        ProbeKind::GemmBf16,
        ProbeKind::CopyD2D,
        ProbeKind::CopyH2D,
        ProbeKind::LaunchLatency,
    ];

    /// Whether the probe runs on a pair of GPUs (the GPU and a peer) rather than one.
    pub fn needs_peer(self) -> bool {
        self == ProbeKind::P2pCopy
    }

    /// Whether the probe needs cuBLAS.
    pub fn needs_cublas(self) -> bool {
        self.unit() == ProbeUnit::Flops
    }

    /// Bytes per element of a GEMM probe's matrices.
    fn gemm_element_bytes(self) -> Option<usize> {
        match self {
            ProbeKind::GemmBf16 | ProbeKind::GemmFp16 => Some(2),
            ProbeKind::GemmTf32 | ProbeKind::GemmFp32 => Some(4),
            ProbeKind::GemmFp64 => Some(8),
            _ => None,
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ProbeKind {
    type Err = ProbeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProbeKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                let known: Vec<_> = ProbeKind::ALL.iter().map(|k| k.name()).collect();
                ProbeError::Config(format!("unknown probe {s:?}; known: {}", known.join(", ")))
            })
    }
}

/// On the wire (the worker's requests) a probe is its name, as on the command line.
impl Serialize for ProbeKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ProbeKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Parses a comma-separated probe list ("all" or empty means every probe).
pub fn parse_list(s: &str) -> Result<Vec<ProbeKind>, ProbeError> {
    if s.trim().is_empty() || s.trim() == "all" {
        return Ok(ProbeKind::ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let k: ProbeKind = part.parse()?;
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

/// Workload sizes. The defaults make one measurement take about `target_seconds` (20 ms) on
/// an H100: each measurement repeats the operation as often as the warm-up showed fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSizes {
    /// Matrix side of the bf16/fp16 GEMMs (three n×n matrices).
    pub gemm_n_16bit: usize,
    /// Matrix side of the tf32/fp32 GEMMs.
    pub gemm_n_32bit: usize,
    /// Matrix side of the fp64 GEMM.
    pub gemm_n_64bit: usize,
    /// Bytes copied per device-to-device copy (two buffers of this size), and per peer copy
    /// (one buffer of this size on each GPU of the pair).
    pub copy_bytes: usize,
    /// Bytes per host/device copy (one pinned host and one device buffer).
    pub host_copy_bytes: usize,
    /// Kernel launches per launch-latency measurement.
    pub launches: usize,
    /// Target duration of one throughput measurement, seconds.
    pub target_seconds: f64,
}

impl Default for ProbeSizes {
    fn default() -> Self {
        ProbeSizes {
            // 8192³ bf16: 1.1 TFLOP, about 1.6 ms at 700 TFLOP/s; 384 MiB of matrices.
            gemm_n_16bit: 8192,
            // 768 MiB of fp32 matrices, under the daemon's 1 GiB default cap.
            gemm_n_32bit: 8192,
            // 384 MiB of fp64 matrices.
            gemm_n_64bit: 4096,
            // 2 × 256 MiB: well past every L2 cache, about 0.17 ms per copy on HBM3.
            copy_bytes: 256 << 20,
            // 64 MiB: about 1.3 ms per copy over PCIe Gen5.
            host_copy_bytes: 64 << 20,
            launches: 1000,
            target_seconds: 0.02,
        }
    }
}

impl ProbeSizes {
    /// Matrix side of a GEMM probe (0 for other probes).
    pub fn gemm_n(&self, kind: ProbeKind) -> usize {
        match kind.gemm_element_bytes() {
            Some(2) => self.gemm_n_16bit,
            Some(4) => self.gemm_n_32bit,
            Some(_) => self.gemm_n_64bit,
            None => 0,
        }
    }

    /// Device memory the probe allocates, bytes (the CUDA context's own overhead excluded).
    pub fn device_bytes(&self, kind: ProbeKind) -> u64 {
        match kind.gemm_element_bytes() {
            // Saturating: an absurd n must fail the memory check, not wrap around under it.
            Some(b) => (self.gemm_n(kind) as u64)
                .saturating_pow(2)
                .saturating_mul(3 * b as u64),
            None => match kind {
                ProbeKind::CopyD2D => 2 * self.copy_bytes as u64,
                // One buffer on each GPU of the pair: this is each GPU's share.
                ProbeKind::P2pCopy => self.copy_bytes as u64,
                ProbeKind::CopyH2D | ProbeKind::CopyD2H => self.host_copy_bytes as u64,
                _ => 0,
            },
        }
    }

    /// Checks sizes are usable.
    pub fn validate(&self) -> Result<(), ProbeError> {
        let n_max = i32::MAX as usize;
        for (k, n) in [
            ("gemm_n_16bit", self.gemm_n_16bit),
            ("gemm_n_32bit", self.gemm_n_32bit),
            ("gemm_n_64bit", self.gemm_n_64bit),
            ("copy_bytes", self.copy_bytes),
            ("host_copy_bytes", self.host_copy_bytes),
            ("launches", self.launches),
        ] {
            if n == 0 || (k.starts_with("gemm") && n > n_max) {
                return Err(ProbeError::Config(format!(
                    "{k}: must be between 1 and {n_max}"
                )));
            }
        }
        if !(self.target_seconds > 0.0 && self.target_seconds <= 10.0) {
            return Err(ProbeError::Config(
                "target_seconds: must be in (0, 10]".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_lists_parse() {
        for k in ProbeKind::ALL {
            assert_eq!(k.name().parse::<ProbeKind>().ok(), Some(*k));
        }
        assert_eq!(
            parse_list("all").ok().map(|v| v.len()),
            Some(ProbeKind::ALL.len())
        );
        assert_eq!(
            parse_list("gemm_bf16, copy_d2d,gemm_bf16").ok(),
            Some(vec![ProbeKind::GemmBf16, ProbeKind::CopyD2D])
        );
        let e = parse_list("gemm_bf16,gemm_int4")
            .err()
            .map(|e| e.to_string());
        assert!(
            e.is_some_and(|e| e.contains("unknown probe \"gemm_int4\"") && e.contains("copy_h2d"))
        );
    }

    #[test]
    fn default_sizes_fit_the_daemons_memory_cap() {
        let s = ProbeSizes::default();
        assert!(s.validate().is_ok());
        for k in ProbeKind::ALL {
            assert!(s.device_bytes(*k) <= 1 << 30, "{k}");
        }
        assert_eq!(s.device_bytes(ProbeKind::GemmBf16), 3 * 8192 * 8192 * 2);
        assert_eq!(s.device_bytes(ProbeKind::GemmFp64), 3 * 4096 * 4096 * 8);
        assert!(ProbeKind::GemmTf32.needs_cublas() && !ProbeKind::CopyD2D.needs_cublas());
        assert!(ProbeKind::P2pCopy.needs_peer() && !ProbeKind::CopyD2D.needs_peer());
        assert_eq!(s.device_bytes(ProbeKind::P2pCopy), 256 << 20);
        assert!(!ProbeKind::LaunchLatency.unit().higher_is_better());
    }

    #[test]
    fn a_huge_gemm_saturates_instead_of_wrapping_under_the_memory_cap() {
        let s = ProbeSizes {
            gemm_n_64bit: i32::MAX as usize,
            ..ProbeSizes::default()
        };
        assert_eq!(s.device_bytes(ProbeKind::GemmFp64), u64::MAX);
    }
}
