//! Result files of `probe run` (JSON or CSV) with the environment they were measured in, and
//! the one-shot runner that produces them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::probe::{ProbeKind, ProbeSizes, ProbeUnit};
use crate::stats::{summarize, Summary};
use crate::ProbeError;

/// Identifies the JSON result format.
pub const FORMAT: &str = "dgx-pixels-probe-results/1";
/// The header of a CSV result file; `peer` is empty for single-GPU probes; a node probe's row
/// has `gpu`, `uuid`, `model` and `peer` empty and `target`, `bytes` set ([`NodeResult`]).
pub const CSV_HEADER: &str = "probe,gpu,uuid,model,unit,iteration,value,peer,target,bytes";
/// The header of CSV files written before node probes, still read.
const CSV_HEADER_V2: &str = "probe,gpu,uuid,model,unit,iteration,value,peer";
/// The header of CSV files written before pair probes, still read.
const CSV_HEADER_V1: &str = "probe,gpu,uuid,model,unit,iteration,value";

/// Where a run happened. Every field is what was observed; unknown ones are empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// Host name.
    pub hostname: String,
    /// Whether the process runs in a container, and the evidence ("no" when none was found).
    pub container: String,
    /// NVIDIA kernel driver version (from /proc/driver/nvidia/version).
    pub driver_version: String,
    /// CUDA version the driver supports.
    pub cuda_version: String,
    /// Exporter version.
    pub exporter_version: String,
    /// Git revision the exporter was built from.
    pub git_revision: String,
    /// Start of the run, RFC 3339 UTC.
    pub started_at: String,
}

/// Detects whether this process runs in a container; returns the evidence or "no".
pub fn detect_container() -> String {
    if Path::new("/.dockerenv").exists() {
        return "yes (/.dockerenv)".into();
    }
    if Path::new("/run/.containerenv").exists() {
        return "yes (/run/.containerenv)".into();
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return "yes (Kubernetes pod)".into();
    }
    if let Ok(cg) = std::fs::read_to_string("/proc/1/cgroup") {
        for marker in ["docker", "kubepods", "containerd", "libpod", "lxc"] {
            if cg.contains(marker) {
                return format!("yes (/proc/1/cgroup mentions {marker})");
            }
        }
    }
    "no".into()
}

/// Largest result file `probe compare` reads (a run's results are a few KiB).
pub const MAX_RESULTS_FILE_BYTES: u64 = 16 << 20;

/// The host's name, from the kernel.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The NVIDIA kernel module's version, e.g. "580.65.06"; empty without a driver.
pub fn nvidia_driver_version() -> String {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").unwrap_or_default();
    parse_driver_version(&text)
}

fn parse_driver_version(text: &str) -> String {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
    text.lines()
        .find(|l| l.starts_with("NVRM version"))
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        })
        .unwrap_or_default()
        .to_string()
}

/// Measurements of one probe on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Probe name.
    pub probe: String,
    /// CUDA ordinal of the GPU.
    pub gpu: usize,
    /// GPU UUID.
    #[serde(default)]
    pub uuid: String,
    /// GPU model.
    #[serde(default)]
    pub model: String,
    /// Unit of `values`.
    pub unit: ProbeUnit,
    /// CUDA ordinal of the peer GPU, for a probe that runs on a pair (`p2p_copy`: the copy
    /// goes from `gpu` to `peer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<usize>,
    /// One value per measured iteration, in order.
    pub values: Vec<f64>,
    /// Summary of `values` (recomputed on load; stored for readers of the file).
    #[serde(default, skip_deserializing)]
    pub summary: Option<Summary>,
}

/// Measurements of a node probe (`storage_read`, `nccl_allreduce`): of a path or of a set of
/// GPUs, not of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// Probe name.
    pub probe: String,
    /// What it measured: the path (`storage_read`) or "N GPUs" (`nccl_allreduce`).
    pub target: String,
    /// Bytes read per run (`storage_read`) or message bytes per GPU (`nccl_allreduce`).
    pub bytes: u64,
    /// Unit of `values` (bytes per second: read throughput, or NCCL bus bandwidth).
    pub unit: ProbeUnit,
    /// One value per measured iteration, in order.
    pub values: Vec<f64>,
    /// Summary of `values` (recomputed on load).
    #[serde(default, skip_deserializing)]
    pub summary: Option<Summary>,
}

impl NodeResult {
    /// How reports name it, e.g. "nccl_allreduce busbw 4 GPUs 256 MiB" or "storage_read
    /// /raid".
    pub fn label(&self) -> String {
        if self.probe == "nccl_allreduce" {
            format!(
                "{} busbw {} {}",
                self.probe,
                self.target,
                human_bytes(self.bytes)
            )
        } else {
            format!("{} {}", self.probe, self.target)
        }
    }
}

/// `bytes` as "256 MiB" (binary units, whole where exact).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// A result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    /// [`FORMAT`].
    pub format: String,
    /// Where it ran.
    pub environment: Environment,
    /// Warm-up iterations per probe.
    pub warmup: usize,
    /// Measured iterations per probe.
    pub iterations: usize,
    /// Seed of the input data.
    pub seed: u64,
    /// Workload sizes.
    pub sizes: ProbeSizes,
    /// One entry per probe and GPU.
    pub results: Vec<ProbeResult>,
    /// One entry per node probe and target (and message size); absent in files of runs
    /// without node probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_results: Vec<NodeResult>,
}

impl RunResults {
    /// Fills every result's summary.
    pub fn summarize(&mut self) {
        for r in &mut self.results {
            r.summary = summarize(&r.values);
        }
        for r in &mut self.node_results {
            r.summary = summarize(&r.values);
        }
    }

    /// Serializes as JSON (pretty) or, for a `.csv` path, as CSV.
    pub fn render(&self, path: &Path) -> Result<String, ProbeError> {
        if is_csv(path) {
            Ok(self.to_csv())
        } else {
            serde_json::to_string_pretty(self)
                .map(|s| s + "\n")
                .map_err(|e| ProbeError::Io(format!("{}: {e}", path.display())))
        }
    }

    /// Writes to `path` (format by extension: `.csv`, else JSON).
    pub fn write(&self, path: &Path) -> Result<(), ProbeError> {
        let text = self.render(path)?;
        std::fs::write(path, text).map_err(|e| ProbeError::Io(format!("{}: {e}", path.display())))
    }

    /// CSV: `# key: value` metadata lines, then one row per measurement ([`CSV_HEADER`]).
    pub fn to_csv(&self) -> String {
        let e = &self.environment;
        let mut out = String::new();
        let meta = [
            ("format", self.format.clone()),
            ("hostname", e.hostname.clone()),
            ("container", e.container.clone()),
            ("driver_version", e.driver_version.clone()),
            ("cuda_version", e.cuda_version.clone()),
            ("exporter_version", e.exporter_version.clone()),
            ("git_revision", e.git_revision.clone()),
            ("started_at", e.started_at.clone()),
            ("warmup", self.warmup.to_string()),
            ("iterations", self.iterations.to_string()),
            ("seed", self.seed.to_string()),
        ];
        for (k, v) in meta {
            let _ = writeln!(out, "# {k}: {}", v.replace('\n', " "));
        }
        out.push_str(CSV_HEADER);
        out.push('\n');
        for r in &self.results {
            for (i, v) in r.values.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{i},{v:e},{},,",
                    r.probe,
                    r.gpu,
                    r.uuid,
                    r.model.replace(',', " "),
                    unit_key(r.unit),
                    r.peer.map(|p| p.to_string()).unwrap_or_default()
                );
            }
        }
        for r in &self.node_results {
            for (i, v) in r.values.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{},,,,{},{i},{v:e},,{},{}",
                    r.probe,
                    unit_key(r.unit),
                    r.target.replace(',', " "),
                    r.bytes
                );
            }
        }
        out
    }

    /// Reads a result file written by [`RunResults::write`] (JSON or CSV by extension).
    pub fn read(path: &Path) -> Result<RunResults, ProbeError> {
        let bytes = dgx_pixels_settings::file::read_regular(path, MAX_RESULTS_FILE_BYTES)
            .map_err(|e| ProbeError::Io(format!("{}: {e}", path.display())))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| ProbeError::Parse(format!("{}: not UTF-8: {e}", path.display())))?;
        let mut r = if is_csv(path) {
            Self::from_csv(&text)
                .map_err(|e| ProbeError::Parse(format!("{}: {e}", path.display())))?
        } else {
            serde_json::from_str::<RunResults>(&text).map_err(|e| {
                ProbeError::Parse(format!(
                    "{}: line {} column {}: {e}",
                    path.display(),
                    e.line(),
                    e.column()
                ))
            })?
        };
        if r.format != FORMAT {
            return Err(ProbeError::Parse(format!(
                "{}: format {:?} is not {FORMAT:?}",
                path.display(),
                r.format
            )));
        }
        for res in &r.node_results {
            if res.values.is_empty() || res.values.iter().any(|v| !v.is_finite()) {
                return Err(ProbeError::Parse(format!(
                    "{}: {} has no values or a non-finite one",
                    path.display(),
                    res.label()
                )));
            }
        }
        for res in &r.results {
            if res.values.is_empty() || res.values.iter().any(|v| !v.is_finite()) {
                return Err(ProbeError::Parse(format!(
                    "{}: probe {} on GPU {} has no values or a non-finite one",
                    path.display(),
                    res.probe,
                    res.gpu
                )));
            }
        }
        r.summarize();
        Ok(r)
    }

    fn from_csv(text: &str) -> Result<RunResults, String> {
        let mut meta = BTreeMap::new();
        let mut groups: Vec<ProbeResult> = Vec::new();
        let mut nodes: Vec<NodeResult> = Vec::new();
        // Columns of the header seen (0: none yet); files without the peer column have 7.
        let mut columns = 0usize;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if let Some(m) = line.strip_prefix("# ") {
                if let Some((k, v)) = m.split_once(": ") {
                    meta.insert(k.to_string(), v.to_string());
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            if columns == 0 {
                columns = if line == CSV_HEADER {
                    10
                } else if line == CSV_HEADER_V2 {
                    8
                } else if line == CSV_HEADER_V1 {
                    7
                } else {
                    return Err(format!("line {n}: expected the header {CSV_HEADER}"));
                };
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != columns {
                return Err(format!(
                    "line {n}: expected {columns} fields, found {}",
                    f.len()
                ));
            }
            if columns == 10 && f[1].is_empty() {
                let unit = unit_from_key(f[4])
                    .ok_or_else(|| format!("line {n}: unknown unit {:?}", f[4]))?;
                let value: f64 = f[6]
                    .parse()
                    .map_err(|_| format!("line {n}: value {:?} is not a number", f[6]))?;
                let bytes: u64 = f[9]
                    .parse()
                    .map_err(|_| format!("line {n}: bytes {:?} is not a number", f[9]))?;
                match nodes
                    .iter_mut()
                    .find(|g| g.probe == f[0] && g.target == f[8] && g.bytes == bytes)
                {
                    Some(g) => g.values.push(value),
                    None => nodes.push(NodeResult {
                        probe: f[0].to_string(),
                        target: f[8].to_string(),
                        bytes,
                        unit,
                        values: vec![value],
                        summary: None,
                    }),
                }
                continue;
            }
            let peer: Option<usize> = match f.get(7) {
                None | Some(&"") => None,
                Some(p) => Some(
                    p.parse()
                        .map_err(|_| format!("line {n}: peer {p:?} is not a number"))?,
                ),
            };
            let gpu: usize = f[1]
                .parse()
                .map_err(|_| format!("line {n}: gpu {:?} is not a number", f[1]))?;
            let unit =
                unit_from_key(f[4]).ok_or_else(|| format!("line {n}: unknown unit {:?}", f[4]))?;
            let value: f64 = f[6]
                .parse()
                .map_err(|_| format!("line {n}: value {:?} is not a number", f[6]))?;
            match groups
                .iter_mut()
                .find(|g| g.probe == f[0] && g.gpu == gpu && g.peer == peer)
            {
                Some(g) => g.values.push(value),
                None => groups.push(ProbeResult {
                    probe: f[0].to_string(),
                    gpu,
                    uuid: f[2].to_string(),
                    model: f[3].to_string(),
                    unit,
                    peer,
                    values: vec![value],
                    summary: None,
                }),
            }
        }
        let get = |k: &str| meta.get(k).cloned().unwrap_or_default();
        let num = |k: &str| -> Result<u64, String> {
            get(k)
                .parse()
                .map_err(|_| format!("metadata {k:?} missing or not a number"))
        };
        Ok(RunResults {
            format: get("format"),
            environment: Environment {
                hostname: get("hostname"),
                container: get("container"),
                driver_version: get("driver_version"),
                cuda_version: get("cuda_version"),
                exporter_version: get("exporter_version"),
                git_revision: get("git_revision"),
                started_at: get("started_at"),
            },
            warmup: num("warmup")? as usize,
            iterations: num("iterations")? as usize,
            seed: num("seed")?,
            sizes: ProbeSizes::default(),
            results: groups,
            node_results: nodes,
        })
    }
}

fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

fn unit_key(u: ProbeUnit) -> &'static str {
    match u {
        ProbeUnit::Flops => "flops",
        ProbeUnit::BytesPerSecond => "bytes_per_second",
        ProbeUnit::Seconds => "seconds",
    }
}

fn unit_from_key(s: &str) -> Option<ProbeUnit> {
    [
        ProbeUnit::Flops,
        ProbeUnit::BytesPerSecond,
        ProbeUnit::Seconds,
    ]
    .into_iter()
    .find(|u| unit_key(*u) == s)
}

/// Formats a value in its unit with an SI prefix, e.g. "712.4 TFLOP/s", "3.02 TB/s", "4.1 µs".
pub fn human(value: f64, unit: ProbeUnit) -> String {
    match unit {
        ProbeUnit::Seconds => {
            let (v, u) = if value.abs() < 1e-3 {
                (value * 1e6, "µs")
            } else if value.abs() < 1.0 {
                (value * 1e3, "ms")
            } else {
                (value, "s")
            };
            format!("{v:.2} {u}")
        }
        ProbeUnit::Flops | ProbeUnit::BytesPerSecond => {
            let base = if unit == ProbeUnit::Flops {
                "FLOP/s"
            } else {
                "B/s"
            };
            let (v, p) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
                .into_iter()
                .find(|(s, _)| value.abs() >= *s)
                .map(|(s, p)| (value / s, p))
                .unwrap_or((value, ""));
            format!("{v:.2} {p}{base}")
        }
    }
}

/// Which probe `r` measured, when the name is known.
pub fn kind_of(r: &ProbeResult) -> Option<ProbeKind> {
    r.probe.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_is_read_from_the_nvrm_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(parse_driver_version(text), "580.65.06");
        assert_eq!(parse_driver_version(""), "");
    }

    fn results(peer: Option<usize>) -> RunResults {
        RunResults {
            format: FORMAT.into(),
            environment: Environment::default(),
            warmup: 1,
            iterations: 2,
            seed: 42,
            sizes: ProbeSizes::default(),
            results: [None, peer]
                .into_iter()
                .map(|peer| ProbeResult {
                    probe: "p2p_copy".into(),
                    gpu: 0,
                    uuid: "GPU-0".into(),
                    model: "NVIDIA H100 80GB HBM3".into(),
                    unit: ProbeUnit::BytesPerSecond,
                    peer,
                    values: vec![3.8e11, 3.9e11],
                    summary: None,
                })
                .collect(),
            node_results: Vec::new(),
        }
    }

    /// A results file given to `probe compare` is read once, bounded: a FIFO (which hung the
    /// command) or /dev/zero (which filled memory) is refused at once.
    #[test]
    fn a_results_path_that_is_no_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("results.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for path in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = RunResults::read(path).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn a_pair_result_keeps_its_peer_through_csv_and_json() {
        let r = results(Some(5));
        let csv = r.to_csv();
        assert!(
            csv.contains(
                "\np2p_copy,0,GPU-0,NVIDIA H100 80GB HBM3,bytes_per_second,1,3.9e11,5,,\n"
            ),
            "{csv}"
        );
        let back = RunResults::from_csv(&csv).unwrap();
        let peers: Vec<_> = back.results.iter().map(|x| x.peer).collect();
        assert_eq!(peers, vec![None, Some(5)]);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json.matches("\"peer\":5").count(), 1, "{json}");
        let back: RunResults = serde_json::from_str(&json).unwrap();
        assert_eq!(back.results[1].peer, Some(5));
        // Files written before the peer column are still read.
        let v1 = csv
            .replace(CSV_HEADER, CSV_HEADER_V1)
            .lines()
            .filter(|l| !l.ends_with(",5,,"))
            .map(|l| l.strip_suffix(",,,").unwrap_or(l).to_string() + "\n")
            .collect::<String>();
        let old = RunResults::from_csv(&v1).unwrap();
        assert_eq!(old.results.len(), 1);
        assert_eq!(old.results[0].values, vec![3.8e11, 3.9e11]);
        let bad = csv.replace(",5,,\n", ",five,,\n");
        assert!(RunResults::from_csv(&bad)
            .unwrap_err()
            .contains("peer \"five\""));
    }

    #[test]
    fn node_results_go_through_csv_and_json_beside_gpu_results() {
        let mut r = results(None);
        r.node_results = vec![
            NodeResult {
                probe: "nccl_allreduce".into(),
                target: "4 GPUs".into(),
                bytes: 256 << 20,
                unit: ProbeUnit::BytesPerSecond,
                values: vec![3.6e11, 3.7e11],
                summary: None,
            },
            NodeResult {
                probe: "storage_read".into(),
                target: "/raid,x".into(),
                bytes: 1 << 30,
                unit: ProbeUnit::BytesPerSecond,
                values: vec![1.2e10],
                summary: None,
            },
        ];
        let csv = r.to_csv();
        assert!(
            csv.contains("\nnccl_allreduce,,,,bytes_per_second,1,3.7e11,,4 GPUs,268435456\n"),
            "{csv}"
        );
        let back = RunResults::from_csv(&csv).unwrap();
        assert_eq!(back.results.len(), 1);
        assert_eq!(back.node_results.len(), 2);
        assert_eq!(back.node_results[0].values, vec![3.6e11, 3.7e11]);
        assert_eq!(back.node_results[1].target, "/raid x");
        assert_eq!(
            back.node_results[0].label(),
            "nccl_allreduce busbw 4 GPUs 256 MiB"
        );
        let json = serde_json::to_string(&r).unwrap();
        let back: RunResults = serde_json::from_str(&json).unwrap();
        assert_eq!(back.node_results, r.node_results);
        // A run without node probes writes no node_results key (older readers read it).
        let json = serde_json::to_string(&results(None)).unwrap();
        assert!(!json.contains("node_results"), "{json}");
        // Version-2 CSV files (no target, bytes) are still read.
        let v2 = results(None)
            .to_csv()
            .replace(CSV_HEADER, CSV_HEADER_V2)
            .replace(",,\n", "\n");
        assert_eq!(RunResults::from_csv(&v2).unwrap().results.len(), 1);
        let bad = csv.replace(",268435456\n", ",many\n");
        assert!(RunResults::from_csv(&bad)
            .unwrap_err()
            .contains("bytes \"many\""));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(712.4e12, ProbeUnit::Flops), "712.40 TFLOP/s");
        assert_eq!(human(3.02e12, ProbeUnit::BytesPerSecond), "3.02 TB/s");
        assert_eq!(human(4.1e-6, ProbeUnit::Seconds), "4.10 µs");
    }
}
